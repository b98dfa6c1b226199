#!/usr/bin/env bash
# Where a POST body stops being small (IDEM_SMALL_BODY_BYTES): for bodies of
# 10 to 5,000 new orders, 8 connections each for IDEM_BENCH_SECONDS (default
# 5) seconds, the rows per second of
#   arrays: IDEM_SMALL_BODY_BYTES large, so every body is read whole,
#           decoded on its task, bound as arrays and written in batches;
#   COPY:   IDEM_SMALL_BODY_BYTES=0, so every body streams into a temporary
#           table by COPY, one transaction per POST;
# side by side on one Postgres, and the ratio arrays/COPY. The default
# threshold sits where the ratio falls to about 1.
#
# usage: bench/small_body_threshold.sh
# Runs in a database of its own, like the other benchmarks (bench/common.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
DURATION=${IDEM_BENCH_SECONDS:-5}
SIZES=${IDEM_BENCH_SIZES:-10 100 500 1000 2000 5000}
ROWS=0 DS=2026-10-13 # for common.sh (its test data is not used here)

if ! command -v wrk >/dev/null; then
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq wrk >/dev/null
fi
# The server common.sh starts takes every body as small ...
export IDEM_SMALL_BODY_BYTES=$((1 << 30))
. bench/common.sh
# ... and a second one, on the same database, none.
COPY_PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
IDEM_SMALL_BODY_BYTES=0 IDEM_ADMIN_TOKEN="$ADMIN_TOKEN" target/release/idem serve \
  --listen "127.0.0.1:$COPY_PORT" > "$OUT/idem-copy.log" 2>&1 &
COPY_PID=$!
trap 'kill $COPY_PID 2>/dev/null || true; bench_cleanup' EXIT
COPY_BASE="http://127.0.0.1:$COPY_PORT"
for _ in $(seq 100); do curl -fs "$COPY_BASE/readyz" >/dev/null 2>&1 && break; sleep 0.1; done

# run BASE DAY ROWS: requests/s (every answer must be 2xx).
run() {
  checkpoint
  local figures
  figures=$(IDEM_BENCH_ROWS=$3 IDEM_BENCH_DS=$2 wrk -t 1 -c 8 -d "${DURATION}s" --latency \
    -s bench/post_unique.lua "$1" | python3 bench/wrk_summary.py)
  read -r rps _ _ bad <<< "$figures"
  if [ "$bad" != 0 ]; then
    echo "bench: $bad answers were not 2xx ($1, $3 rows)" >&2
    exit 1
  fi
  echo "$rps"
}

echo "== $(nproc) cores; 8 connections, ${DURATION}s per measurement"
printf '%8s %10s %16s %16s %8s\n' rows "body KiB" "arrays rows/s" "COPY rows/s" ratio
day=0
for rows in $SIZES; do
  day=$((day + 1))
  arrays=$(run "$BASE" "2026-11-$(printf %02d "$day")" "$rows")
  copy=$(run "$COPY_BASE" "2026-12-$(printf %02d "$day")" "$rows")
  # One order as post_unique.lua writes it is about 150 bytes.
  python3 - "$rows" "$arrays" "$copy" <<'PY'
import sys

rows, arrays, copy = int(sys.argv[1]), float(sys.argv[2]), float(sys.argv[3])
body_kib = rows * 150 / 1024
print(f"{rows:8d} {body_kib:10.1f} {arrays * rows:16,.0f} {copy * rows:16,.0f} {arrays / copy:8.2f}")
PY
done
