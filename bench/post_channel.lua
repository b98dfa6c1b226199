-- wrk: 1-row POSTs on channels, without an Idempotency-Key, as producers
-- that resume by offset send them. Run with as many threads as connections
-- (`-t 32 -c 32`): each thread is one producer on a channel of its own
-- (wrk-DAY-THREAD) whose offsets count its requests 1, 2, 3… in order,
-- each with a new order of the day IDEM_BENCH_DS (id THREAD * 10^9 + N).
local ds = os.getenv("IDEM_BENCH_DS") or "2026-10-16"
local counter = 0
-- A global, not a local: setup's thread:set gives each thread its own
-- (a local would shadow it, and every thread would be thread 0).
thread_id = 0
local threads = {}

function setup(thread)
  thread:set("thread_id", #threads + 1)
  table.insert(threads, thread)
end

local tail = string.format(
  ',"ds":"%s","customer_id":1,"status":"paid","amount":1.25,"updated_at":"%sT01:02:03Z","note":"wrk"}\n',
  ds, ds)
local authorization = "Bearer " .. (os.getenv("IDEM_BENCH_TOKEN") or "")

function request()
  counter = counter + 1
  local path = string.format("/rows?table=orders&channel=wrk-%s-%d&offset=%d", ds, thread_id, counter)
  local headers = {
    ["Authorization"] = authorization,
    ["Content-Type"] = "application/x-ndjson",
  }
  return wrk.format("POST", path, headers, '{"order_id":' .. (thread_id * 1000000000 + counter) .. tail)
end
