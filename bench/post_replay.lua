-- wrk: replays of completed keys (replay-1 .. replay-KEYS, all with one body).
local keys = tonumber(os.getenv("KEYS") or "1000")
local body = io.open(os.getenv("BODY")):read("a")
local counter = 0

function request()
  counter = counter + 1
  local headers = {
    ["Authorization"] = "Bearer " .. os.getenv("IDEM_BENCH_TOKEN"),
    ["Content-Type"] = "application/x-ndjson",
    ["Idempotency-Key"] = string.format("replay-%d", (counter % keys) + 1),
  }
  return wrk.format("POST", "/rows?table=orders", headers, body)
end
