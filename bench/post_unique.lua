-- wrk: POST /rows with a new Idempotency-Key and IDEM_BENCH_ROWS new orders
-- (default 100) of the day IDEM_BENCH_DS (default 2026-10-13) per request,
-- into the table IDEM_BENCH_TABLE (default orders; it may carry more of
-- the query: `events&mode=versions`).
-- Keys are wrk-DAY-ROWS-THREAD-N and order ids THREAD * 10^9 + N * ROWS + j
-- (j = 1..ROWS), N counting the thread's requests: never the same twice in
-- one run, and runs with another day or row count use other keys.
local rows_per_request = tonumber(os.getenv("IDEM_BENCH_ROWS") or "100")
local ds = os.getenv("IDEM_BENCH_DS") or "2026-10-13"
local path = "/rows?table=" .. (os.getenv("IDEM_BENCH_TABLE") or "orders")
local counter = 0
-- A global, not a local: setup's thread:set gives each thread its own
-- (a local would shadow it, and every thread would be thread 0).
thread_id = 0
local threads = {}

-- IDEM_BENCH_WRK numbers this wrk among several run at once (default 0):
-- threads of wrk w are w * 100 + 1, w * 100 + 2, ...
local instance = tonumber(os.getenv("IDEM_BENCH_WRK") or "0")

function setup(thread)
  thread:set("thread_id", instance * 100 + #threads + 1)
  table.insert(threads, thread)
end

-- Each row is its order id and a tail made once (the load generator shares
-- the two cores with idem and Postgres: the less it spends, the less it
-- takes from the side it measures).
local tails = {}
for j = 1, rows_per_request do
  tails[j] = string.format(
    ',"ds":"%s","customer_id":%d,"status":"paid","amount":%d.25,"updated_at":"%sT01:02:03Z","note":"wrk"}',
    ds, j, j, ds)
end
local authorization = "Bearer " .. (os.getenv("IDEM_BENCH_TOKEN") or "")

function request()
  counter = counter + 1
  local base = (thread_id * 1000000000) + counter * rows_per_request
  local rows = {}
  for j = 1, rows_per_request do
    rows[j] = '{"order_id":' .. (base + j) .. tails[j]
  end
  local headers = {
    ["Authorization"] = authorization,
    ["Content-Type"] = "application/x-ndjson",
    ["Idempotency-Key"] = string.format("wrk-%s-%d-%d-%d", ds, rows_per_request, thread_id, counter),
  }
  return wrk.format("POST", path, headers, table.concat(rows, "\n") .. "\n")
end
