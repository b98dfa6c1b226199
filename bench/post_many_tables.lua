-- wrk: POST /rows?table=events_NNNN&mode=append of one new event of the day
-- IDEM_BENCH_DS, to a table picked at random among events_0001 ..
-- events_<IDEM_BENCH_TABLES> (default 1000), with a new Idempotency-Key
-- each: a producer per event type, appending with a key per event.
-- Keys are wrk-RUN-DAY-THREAD-N (RUN: IDEM_BENCH_RUN, default f; another
-- run on the same tables and day needs another) and event ids
-- THREAD * 10^9 + N.
local tables = tonumber(os.getenv("IDEM_BENCH_TABLES") or "1000")
local ds = os.getenv("IDEM_BENCH_DS") or "2026-10-13"
local run = os.getenv("IDEM_BENCH_RUN") or "f"
local authorization = "Bearer " .. (os.getenv("IDEM_BENCH_TOKEN") or "")
local tail = string.format(',"ds":"%s","kind":"click","payload":"wrk","at":"%sT01:02:03Z"}\n', ds, ds)
local counter = 0
-- A global, not a local: setup's thread:set gives each thread its own.
thread_id = 0
local threads = {}

function setup(thread)
  thread:set("thread_id", #threads + 1)
  table.insert(threads, thread)
end

-- Each thread its own sequence of tables (the same seed everywhere would
-- send every thread to the same tables at once, and batch them).
function init(args)
  math.randomseed(thread_id * 7919 + os.time())
end

function request()
  counter = counter + 1
  local path = string.format("/rows?table=events_%04d&mode=append", math.random(1, tables))
  local headers = {
    ["Authorization"] = authorization,
    ["Content-Type"] = "application/x-ndjson",
    ["Idempotency-Key"] = string.format("wrk-%s-%s-%d-%d", run, ds, thread_id, counter),
  }
  return wrk.format("POST", path, headers, '{"event_id":' .. (thread_id * 1000000000 + counter) .. tail)
end
