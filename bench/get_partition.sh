#!/usr/bin/env bash
# Benchmark of GET /partitions against its physical limit, in one run:
#   anchor   psql \copy (select the user columns of the day) to a CSV file,
#            the select idem runs for the GET, in idem's time zone (UTC)
#   GET      curl -o of the same day as CSV, NDJSON and JSON
# The day is PUT once; then REPEAT rounds each time all four reads, side by
# side, and the medians are compared. Checks that every output holds ROWS
# rows and that idem's CSV is byte for byte the anchor's. Prints seconds,
# rows/s, the anchor/GET ratios and idem's peak RSS while reading.
#
# usage: bench/get_partition.sh [ROWS]        (default 1000000)
# Runs in a database of its own, dropped at exit, on the server DATABASE_URL
# names, or without DATABASE_URL on a Postgres it starts in .idem/bench-pg.
set -euo pipefail
cd "$(dirname "$0")/.."
ROWS=${1:-1000000}
DS=2026-10-12
. bench/common.sh

echo "== generating $ROWS rows"
gen "$OUT/orders-$ROWS.csv" csv 42

echo "== PUT of the day"
curl -fsS "${AUTH[@]}" -X PUT -T "$OUT/orders-$ROWS.csv" -H 'content-type: text/csv' \
  "$BASE/partitions/orders/$DS" -o "$OUT/receipt.json"
cat "$OUT/receipt.json"; echo
# The PUT's rows vacuumed (hint bits set, visibility map written) and
# checkpointed, so that the first read does not pay for it.
settle
# The peak RSS measured from here on is the reads' (Linux >= 4.0).
echo 5 > "/proc/$IDEM_PID/clear_refs" 2>/dev/null || echo "   (peak RSS includes the PUT's)"

COLUMNS_SQL='"order_id", "ds", "customer_id", "status", "amount", "updated_at", "note"'
SELECT="select $COLUMNS_SQL from idem_data.\"orders\" where \"ds\" = date '$DS'"

anchor() { # anchor FILE -> prints seconds
  local t0 t1
  t0=$(now)
  PGTZ=UTC psql "$DATABASE_URL" -v ON_ERROR_STOP=1 -qc \
    "\\copy ($SELECT) to '$1' with (format csv, header)"
  t1=$(now)
  elapsed "$t0" "$t1"
}
get() { # get FORMAT FILE -> prints seconds
  local t0 t1
  t0=$(now)
  curl -fsS "${AUTH[@]}" "$BASE/partitions/orders/$DS?format=$1" -o "$2"
  t1=$(now)
  elapsed "$t0" "$t1"
}

echo "== warm-up: one read of each"
anchor "$OUT/get-anchor.csv" >/dev/null
for f in csv ndjson json; do get "$f" "$OUT/get.$f" >/dev/null; done

echo "== $REPEAT rounds: anchor, GET CSV, GET NDJSON, GET JSON"
T_COPY=() T_CSV=() T_NDJSON=() T_JSON=()
for _ in $(seq "$REPEAT"); do
  T_COPY+=("$(anchor "$OUT/get-anchor.csv")")
  T_CSV+=("$(get csv "$OUT/get.csv")")
  T_NDJSON+=("$(get ndjson "$OUT/get.ndjson")")
  T_JSON+=("$(get json "$OUT/get.json")")
done
echo "   anchor ${T_COPY[*]}; CSV ${T_CSV[*]}; NDJSON ${T_NDJSON[*]}; JSON ${T_JSON[*]}"

RSS_MB=$(peak_rss_mb)

# CSV has a header line; NDJSON a line a row; JSON `[`, a line a row, `]`.
lines() { wc -l < "$1" | tr -d ' '; }
check_rows() { # check_rows FILE LINES
  if [ "$(lines "$1")" != "$2" ]; then
    echo "bench: $1 holds $(lines "$1") lines, not $2" >&2
    exit 1
  fi
}
check_rows "$OUT/get-anchor.csv" $((ROWS + 1))
check_rows "$OUT/get.csv" $((ROWS + 1))
check_rows "$OUT/get.ndjson" "$ROWS"
check_rows "$OUT/get.json" "$ROWS"
cmp -s "$OUT/get-anchor.csv" "$OUT/get.csv" \
  || { echo "bench: idem's CSV differs from psql's" >&2; exit 1; }
echo "   every output holds $ROWS rows; idem's CSV is psql's, byte for byte"

python3 - "$ROWS" "$(median "${T_COPY[@]}")" "$(median "${T_CSV[@]}")" \
  "$(median "${T_NDJSON[@]}")" "$(median "${T_JSON[@]}")" "$RSS_MB" <<'PY'
import sys
rows = int(sys.argv[1])
copy, csv, nd, js = map(float, sys.argv[2:6])
rss_mb = float(sys.argv[6])
print()
print(f"{'read of a day (median of runs)':44} {'seconds':>8} {'rows/s':>12} {'anchor/GET':>10}")
for name, t in [("anchor: psql \\copy (select ...) to CSV", copy),
                ("GET CSV", csv),
                ("GET NDJSON", nd),
                ("GET JSON", js)]:
    print(f"{name:44} {t:8.3f} {rows / t:12,.0f} {copy / t:10.2f}")
print()
ok = lambda b: "ok" if b else "MISSED"
print(f"GET/COPY rows/s ratio: CSV {copy / csv:.2f}, NDJSON {copy / nd:.2f} "
      f"(goal >= 0.80: {ok(min(copy / csv, copy / nd) >= 0.8)}); JSON {copy / js:.2f}")
print(f"idem peak RSS while reading: {rss_mb:.1f} MB")
PY
