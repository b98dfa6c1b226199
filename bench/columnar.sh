#!/usr/bin/env bash
# Benchmark of Parquet bodies, in one run, each side IDEM_BENCH_REPEAT times
# (default 3), medians:
#   anchor        psql \copy of the day as CSV into a staging table + unique
#                 index + ATTACH (bench/put_partition.sh's anchor)
#   PUT Parquet   the same rows as a Parquet file written by pyarrow (zstd,
#                 row groups of 131,072 rows), into an empty partition
#   PUT CSV       idem's own CSV PUT of the CSV file, beside it
# Prints seconds, rows/s, each ratio to the anchor (goal for Parquet: >= 1.2)
# and idem's peak RSS (goal < 200 MB).
#
# usage: bench/columnar.sh [ROWS]        (default 1000000)
# Runs in a database of its own, dropped at exit, on the server DATABASE_URL
# names, or without DATABASE_URL on a Postgres it starts in .idem/bench-pg.
# pyarrow comes from scripts/python-env.
set -euo pipefail
cd "$(dirname "$0")/.."
ROWS=${1:-1000000}
DS=2026-10-12
PYTHON=$(scripts/python-env)
. bench/common.sh

echo "== generating $ROWS rows (CSV, then the same rows as Parquet by pyarrow)"
gen "$OUT/orders-$ROWS.csv" csv 42
PARQUET=$OUT/orders-$ROWS.parquet
if ! [ "$PARQUET" -nt "$OUT/orders-$ROWS.csv" ]; then
  "$PYTHON" - "$OUT/orders-$ROWS.csv" "$PARQUET" <<'PY'
import sys
import pyarrow as pa, pyarrow.csv as csv, pyarrow.parquet as pq

# The orders' columns as a data team's export types them.
types = {"order_id": pa.int64(), "ds": pa.date32(), "customer_id": pa.int64(), "status": pa.string(),
         "amount": pa.decimal128(12, 2), "updated_at": pa.timestamp("us", tz="UTC"), "note": pa.string()}
table = csv.read_csv(sys.argv[1], convert_options=csv.ConvertOptions(column_types=types))
pq.write_table(table, sys.argv[2], compression="zstd", row_group_size=131072)
PY
fi
ls -la "$OUT/orders-$ROWS.csv" "$PARQUET" | awk '{printf "   %s %.0f MB\n", $9, $5/1e6}'

echo "== anchor: psql \\copy of the CSV into a staging table + unique index + attach (x$REPEAT)"
anchor_once() { copy_anchor "$OUT/orders-$ROWS.csv"; }
T_COPY=$(median_of anchor_once)
T_PARQUET=$(measure "PUT Parquet, new partition" drop_day "$PARQUET" application/vnd.apache.parquet)
T_CSV=$(measure "PUT CSV, new partition" drop_day "$OUT/orders-$ROWS.csv" text/csv)
RSS_MB=$(peak_rss_mb)

python3 - "$ROWS" "$T_COPY" "$T_PARQUET" "$T_CSV" "$RSS_MB" "$REPEAT" <<'PY'
import sys
rows, runs = int(sys.argv[1]), int(sys.argv[6])
copy, parquet, csv = map(float, sys.argv[2:5])
rss_mb = float(sys.argv[5])
print()
print(f"{'path (median of ' + str(runs) + ' runs)':44} {'seconds':>8} {'rows/s':>12} {'vs COPY':>8}")
for name, t in [("anchor: psql \\copy CSV + index + attach", copy),
                ("PUT Parquet (pyarrow, zstd)", parquet),
                ("PUT CSV", csv)]:
    print(f"{name:44} {t:8.3f} {rows / t:12,.0f} {copy / t:8.2f}")
ok = lambda b: "ok" if b else "MISSED"
print()
print(f"Parquet PUT / CSV \\copy: {copy / parquet:.2f} (goal >= 1.20: {ok(copy / parquet >= 1.2)})")
print(f"idem peak RSS: {rss_mb:.1f} MB (goal < 200 MB: {ok(rss_mb < 200)})")
PY
