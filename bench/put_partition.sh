#!/usr/bin/env bash
# Benchmark of PUT /partitions against its physical limit, in one run:
#   anchor   psql \copy of the CSV into a staging table + unique index + ATTACH
#   PUT      curl -T of the same rows, NDJSON and CSV, into an empty partition
#   re-PUT   the same body again (unchanged content: nothing is rewritten)
#   replace  a different body over the existing partition
# Each side runs IDEM_BENCH_REPEAT times (default 3); prints the medians:
# rows/s, the PUT/COPY ratio of the medians per format (goal >= 1.0) and
# idem's peak RSS.
#
# usage: bench/put_partition.sh [ROWS]        (default 1000000)
# Runs in a database of its own, dropped at exit, on the server DATABASE_URL
# names, or without DATABASE_URL on a Postgres it starts in .idem/bench-pg.
set -euo pipefail
cd "$(dirname "$0")/.."
ROWS=${1:-1000000}
DS=2026-10-12
. bench/common.sh

echo "== generating $ROWS rows"
gen "$OUT/orders-$ROWS.ndjson" ndjson 42
gen "$OUT/orders-$ROWS.csv" csv 42
gen "$OUT/orders-$ROWS-b.csv" csv 7
ls -la "$OUT"/orders-"$ROWS"* | awk '{printf "   %s %.0f MB\n", $9, $5/1e6}'

echo "== anchor: psql \\copy into a staging table + unique index + attach (x$REPEAT)"
anchor_once() { copy_anchor "$OUT/orders-$ROWS.csv"; }
T_COPY=$(median_of anchor_once)

T_NDJSON=$(measure "PUT NDJSON, new partition" drop_day "$OUT/orders-$ROWS.ndjson" application/x-ndjson)
T_NDJSON_AGAIN=$(measure "PUT NDJSON again, unchanged" : "$OUT/orders-$ROWS.ndjson" application/x-ndjson)
T_CSV=$(measure "PUT CSV, new partition" drop_day "$OUT/orders-$ROWS.csv" text/csv)
T_CSV_AGAIN=$(measure "PUT CSV again, unchanged" : "$OUT/orders-$ROWS.csv" text/csv)
T_REPLACE=$(measure "PUT CSV with other rows over the day (replace)" \
  "put $OUT/orders-$ROWS.csv text/csv >/dev/null" "$OUT/orders-$ROWS-b.csv" text/csv)

RSS_MB=$(peak_rss_mb)
BODY_MB=$(stat -c %s "$OUT/orders-$ROWS.ndjson" | awk '{printf "%.0f", $1/1e6}')

python3 - "$ROWS" "$T_COPY" "$T_NDJSON" "$T_NDJSON_AGAIN" "$T_CSV" "$T_CSV_AGAIN" "$T_REPLACE" "$RSS_MB" "$BODY_MB" "$REPEAT" <<'PY'
import sys
rows = int(sys.argv[1])
runs = int(sys.argv[10])
copy, nd, nd2, csv, csv2, rep = map(float, sys.argv[2:8])
rss_mb = float(sys.argv[8])
body_mb = sys.argv[9]
print()
print(f"{'path (median of runs)':44} {'seconds':>8} {'rows/s':>12} {'vs COPY':>8}")
for name, t in [("anchor: psql \\copy + index + attach", copy),
                ("PUT NDJSON, new partition", nd),
                ("PUT CSV, new partition", csv),
                ("PUT CSV, replacing other rows", rep),
                ("PUT NDJSON again, unchanged", nd2),
                ("PUT CSV again, unchanged", csv2)]:
    print(f"{name:44} {t:8.3f} {rows / t:12,.0f} {copy / t:8.2f}")
print()
ok = lambda b: "ok" if b else "MISSED"
print(f"PUT/COPY ratio of the medians of {runs} runs: NDJSON {copy / nd:.2f}, CSV {copy / csv:.2f} (goal >= 1.00: {ok(min(copy / nd, copy / csv) >= 1.0)})")
print(f"unchanged re-PUT / first PUT time: NDJSON {nd2 / nd:.2f}, CSV {csv2 / csv:.2f} (goal < 0.33: {ok(max(nd2 / nd, csv2 / csv) < 1 / 3)})")
print(f"idem peak RSS: {rss_mb:.1f} MB for a {body_mb} MB NDJSON body (goal < 100 MB: {ok(rss_mb < 100)})")
PY
