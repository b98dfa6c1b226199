-- wrk: replays of completed keys KEY_PREFIX1 .. KEY_PREFIX{KEYS} (default
-- replay-1 .. replay-1000), round-robin. Each sends its key's body: the
-- file BODY for every key, or, with ROW_BASE set, key i's own order
-- (id ROW_BASE + i, of the day ROW_DS) as bench/curl_posts.py --rows made it.
local keys = tonumber(os.getenv("KEYS") or "1000")
local prefix = os.getenv("KEY_PREFIX") or "replay-"
local row_base = tonumber(os.getenv("ROW_BASE") or "")
local ds = os.getenv("ROW_DS") or ""
local body = row_base == nil and io.open(os.getenv("BODY")):read("a") or nil
local authorization = "Bearer " .. (os.getenv("IDEM_BENCH_TOKEN") or "")
local counter = 0

-- The same bytes as curl_posts.py's `row`.
local function row_body(i)
  return string.format(
    '{"order_id":%d,"ds":"%s","customer_id":1,"status":"paid","amount":1.25,"updated_at":"%sT01:02:03Z","note":"old"}\n',
    row_base + i, ds, ds)
end

function request()
  counter = counter + 1
  local i = (counter % keys) + 1
  local headers = {
    ["Authorization"] = authorization,
    ["Content-Type"] = "application/x-ndjson",
    ["Idempotency-Key"] = prefix .. i,
  }
  return wrk.format("POST", "/rows?table=orders", headers, body or row_body(i))
end
