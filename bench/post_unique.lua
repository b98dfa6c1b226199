-- wrk: POST /rows with a new Idempotency-Key and IDEM_BENCH_ROWS new orders
-- (default 100) of the day IDEM_BENCH_DS (default 2026-10-13) per request.
-- Keys are wrk-DAY-ROWS-THREAD-N and order ids THREAD * 10^9 + N * ROWS + j
-- (j = 1..ROWS), N counting the thread's requests: never the same twice in
-- one run, and runs with another day or row count use other keys.
local rows_per_request = tonumber(os.getenv("IDEM_BENCH_ROWS") or "100")
local ds = os.getenv("IDEM_BENCH_DS") or "2026-10-13"
local counter = 0
local thread_id = 0
local threads = {}

function setup(thread)
  thread:set("thread_id", #threads + 1)
  table.insert(threads, thread)
end

function request()
  counter = counter + 1
  local base = (thread_id * 1000000000) + counter * rows_per_request
  local rows = {}
  for j = 1, rows_per_request do
    rows[j] = string.format(
      '{"order_id":%d,"ds":"%s","customer_id":%d,"status":"paid","amount":%d.25,"updated_at":"%sT01:02:03Z","note":"wrk"}',
      base + j, ds, j, j, ds)
  end
  local headers = {
    ["Authorization"] = "Bearer " .. os.getenv("IDEM_BENCH_TOKEN"),
    ["Content-Type"] = "application/x-ndjson",
    ["Idempotency-Key"] = string.format("wrk-%s-%d-%d-%d", ds, rows_per_request, thread_id, counter),
  }
  return wrk.format("POST", "/rows?table=orders", headers, table.concat(rows, "\n") .. "\n")
end
