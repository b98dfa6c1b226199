#!/usr/bin/env bash
# Where a small write's CPU goes: one step of bench/small_writes.sh run
# under wrk for 16 s, idem sampled by `perf record --call-graph dwarf` for
# 4 s in its middle, then every process for 4 s (for Postgres's share);
# prints the top costs of idem (inclusive, idem's own functions; and self)
# and of Postgres (self), and keeps the recordings in bench/out/perf-*.data
# for `perf report -i`.
#   a   1-row POSTs with new keys, 32 connections
#   b   100-row POSTs with new keys, 32 connections
#   c   replays of 1,000 completed keys made just before (in idem's memory)
#   f   1-row appends over 1,000 tables, 16 connections
#
# usage: bench/profile.sh STEP
# Runs in a database of its own (bench/common.sh). Installs wrk and perf
# (linux-perf) with apt-get when they are missing; perf needs the right to
# sample (root, or kernel.perf_event_paranoid <= 1).
set -euo pipefail
cd "$(dirname "$0")/.."
STEP=${1:?usage: bench/profile.sh a|b|c|f}
case "$STEP" in a | b | c | f) ;; *) echo "bench: no step $STEP (a, b, c or f)" >&2; exit 2 ;; esac
for tool in wrk perf; do
  if ! command -v "$tool" >/dev/null; then
    package=$tool
    [ "$tool" = perf ] && package=linux-perf
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$package" >/dev/null
  fi
done
ROWS=0 DS=2026-10-13
BENCH_TOKEN_TABLES='["orders", "events_*"]'
. bench/common.sh

# many_tables: events_0001..events_1000 declared, and each one's first
# event of the day written (its partition made), as small_writes.sh's (f).
many_tables() {
  python3 - "$BASE" "$IDEM_BENCH_TOKEN" "$DS" > "$OUT/profile-tables.curl" <<'PY'
import sys

base, token, ds = sys.argv[1:]
declaration = ('{"columns": {"event_id": "bigint", "ds": "date", "kind": "text", "payload": "text",'
               ' "at": "timestamptz"}}').replace('"', '\\"')
first = (f'{{"event_id": 0, "ds": "{ds}", "kind": "first", "payload": "setup",'
         f' "at": "{ds}T00:00:00Z"}}').replace('"', '\\"')
requests = []
for i in range(1, 1001):
    table = f"events_{i:04d}"
    requests.append(f'url = "{base}/tables/{table}"\nrequest = "PUT"\n'
                    f'header = "content-type: application/json"\ndata = "{declaration}"')
for i in range(1, 1001):
    table = f"events_{i:04d}"
    requests.append(f'url = "{base}/rows?table={table}&mode=append"\nrequest = "POST"\n'
                    f'header = "content-type: application/x-ndjson"\n'
                    f'header = "idempotency-key: first-{table}"\ndata = "{first}"')
print("\nnext\n".join(f'{r}\nheader = "authorization: Bearer {token}"\noutput = "/dev/null"'
                      for r in requests))
PY
  curl -fsS --no-progress-meter -K "$OUT/profile-tables.curl"
  rm -f "$OUT/profile-tables.curl"
}

connections=32
case "$STEP" in
  a) lua=bench/post_unique.lua; export IDEM_BENCH_ROWS=1 ;;
  b) lua=bench/post_unique.lua; export IDEM_BENCH_ROWS=100 ;;
  c)
    lua=bench/post_replay.lua
    export KEYS=1000 BODY="$OUT/profile-replay.ndjson"
    echo '{"order_id":7,"ds":"2026-10-14","customer_id":1,"status":"paid","amount":1.25,"updated_at":"2026-10-14T01:02:03Z","note":"old"}' > "$BODY"
    for i in $(seq "$KEYS"); do
      curl -fsS "${AUTH[@]}" -o /dev/null -X POST "$BASE/rows?table=orders" \
        -H 'content-type: application/x-ndjson' -H "idempotency-key: replay-$i" --data-binary "@$BODY"
    done
    ;;
  f) lua=bench/post_many_tables.lua; connections=16; many_tables ;;
esac

echo "== ($STEP) under wrk, $connections connections, 16 s; idem profiled for 4 s, then every process for 4 s"
wrk -t 1 -c "$connections" -d 16s --latency -s "$lua" "$BASE" > "$OUT/wrk-profile-$STEP.txt" &
WRK_PID=$!
sleep 4
perf record -q -F 299 --call-graph dwarf,16384 -p "$IDEM_PID" -o "$OUT/perf-idem-$STEP.data" -- sleep 4 >/dev/null 2>&1
perf record -q -F 499 -a -o "$OUT/perf-all-$STEP.data" -- sleep 4 >/dev/null 2>&1
wait "$WRK_PID"
echo "   $(python3 bench/wrk_summary.py < "$OUT/wrk-profile-$STEP.txt" | awk '{printf "%.0f requests/s, p50 %s ms, p99 %s ms, non-2xx %s", $1, $2, $3, $4}')"

# (sed, not head, reads to the end: perf must not die of a closed pipe
# under pipefail.)
top() { grep -v '^#' | grep '%' | sed -n "1,${1}p" | cut -c1-150; }
echo "== idem, inclusive (its own functions and the libraries it calls)"
perf report -i "$OUT/perf-idem-$STEP.data" --children --sort symbol --stdio -g none --percent-limit 2 2>/dev/null |
  grep -E 'idem::|sqlx|serde_json::|sha2|tracing_subscriber' | top 30
echo "== idem, self"
perf report -i "$OUT/perf-idem-$STEP.data" --no-children --sort symbol --stdio -g none 2>/dev/null | top 15
echo "== Postgres, self (share of Postgres's samples)"
perf report -i "$OUT/perf-all-$STEP.data" --comms postgres --percentage relative --no-children \
  --sort dso,symbol --stdio 2>/dev/null | top 15
