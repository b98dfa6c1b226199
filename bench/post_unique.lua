-- wrk: POST /rows with a new Idempotency-Key and 100 new orders per request.
local counter = 0
local thread_id = 0
local threads = {}

function setup(thread)
  thread:set("thread_id", #threads + 1)
  table.insert(threads, thread)
end

function request()
  counter = counter + 1
  local base = (thread_id * 100000000) + counter * 100
  local rows = {}
  for j = 1, 100 do
    rows[j] = string.format(
      '{"order_id":%d,"ds":"2026-10-13","customer_id":%d,"status":"paid","amount":%d.25,"updated_at":"2026-10-13T01:02:03Z","note":"wrk"}',
      base + j, j, j)
  end
  local headers = {
    ["Authorization"] = "Bearer " .. os.getenv("IDEM_BENCH_TOKEN"),
    ["Content-Type"] = "application/x-ndjson",
    ["Idempotency-Key"] = string.format("wrk-%d-%d", thread_id, counter),
  }
  return wrk.format("POST", "/rows?table=orders", headers, table.concat(rows, "\n") .. "\n")
end
