#!/usr/bin/env bash
# Benchmark of Parquet bodies, in one run, each side IDEM_BENCH_REPEAT times
# (default 3), medians:
#   anchor        psql \copy of the day as CSV into a staging table + unique
#                 index + ATTACH (bench/put_partition.sh's anchor)
#   PUT CSV       idem's own CSV PUT of the CSV file, beside it
#   PUT Parquet   the same rows as a Parquet file written by pyarrow (zstd,
#                 row groups of 131,072 rows), into an empty partition
# and, reading the day back (the Parquet PUT's), medians again:
#   anchor        psql \copy (select the day's columns) to a CSV file
#   GET Parquet   idem's GET with Accept: application/vnd.apache.parquet,
#                 read back by pyarrow once to check its rows
#   GET CSV       idem's GET as CSV, beside it
# Prints seconds, rows/s, each ratio to its anchor (goal for the Parquet
# PUT: >= 1.2), the CPU a run of each side spent (client, idem, Postgres)
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
# with_cpu NAME COMMAND…: runs COMMAND, and writes the CPU of a run of it
# (its REPEAT runs' over REPEAT) of client, idem and Postgres to
# $OUT/cpu-NAME.txt (see cpu_per).
ME=$BASHPID
with_cpu() {
  local name=$1 before
  shift
  before=$(cpu_ticks "$ME")
  "$@"
  cpu_per "$name" "$before" "$(cpu_ticks "$ME")" "$REPEAT"
}
with_cpu anchor-put eval 'T_COPY=$(median_of anchor_once)'
with_cpu put-csv eval 'T_CSV=$(measure "PUT CSV, new partition" drop_day "$OUT/orders-$ROWS.csv" text/csv)'
# Last, so that the day read back below is the Parquet file's (amounts as
# decimals at their one scale; the CSV's have several).
with_cpu put-parquet eval 'T_PARQUET=$(measure "PUT Parquet, new partition" drop_day "$PARQUET" application/vnd.apache.parquet)'

echo "== reading the day back: psql \\copy (select …) to CSV, against idem's GET (x$REPEAT)"
copy_out_once() {
  local t0 t1
  t0=$(now)
  "${PSQL[@]}" -c "\\copy (select order_id, ds, customer_id, status, amount, updated_at, note \
    from idem_data.orders where ds = '$DS') to '$OUT/day-out.csv' with (format csv, header)" >/dev/null
  t1=$(now)
  elapsed "$t0" "$t1"
}
get_once() {
  local t0 t1
  t0=$(now)
  curl -fsS "${AUTH[@]}" -H "accept: $GET_TYPE" "$BASE/partitions/orders/$DS" -o "$OUT/day-out.$GET_EXT"
  t1=$(now)
  elapsed "$t0" "$t1"
}
with_cpu anchor-get eval 'T_COPY_OUT=$(median_of copy_out_once)'
with_cpu get-parquet eval 'T_GET_PARQUET=$(GET_TYPE=application/vnd.apache.parquet GET_EXT=parquet median_of get_once)'
"$PYTHON" -c "import pyarrow.parquet as pq, sys; t = pq.read_table(sys.argv[1]); \
assert t.num_rows == int(sys.argv[2]), t.num_rows; print('   pyarrow read', t.num_rows, 'rows:', t.schema.types)" \
  "$OUT/day-out.parquet" "$ROWS"
with_cpu get-csv eval 'T_GET_CSV=$(GET_TYPE=text/csv GET_EXT=csv median_of get_once)'
RSS_MB=$(peak_rss_mb)
CPU=()
for name in anchor-put put-parquet put-csv anchor-get get-parquet get-csv; do
  CPU+=("$(tr ' ' , < "$OUT/cpu-$name.txt")")
done

python3 - "$ROWS" "$REPEAT" "$RSS_MB" "$T_COPY" "$T_PARQUET" "$T_CSV" "$T_COPY_OUT" "$T_GET_PARQUET" "$T_GET_CSV" "${CPU[@]}" <<'PY'
import sys
rows, runs, rss_mb = int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3])
copy, parquet, csv, copy_out, get_parquet, get_csv = map(float, sys.argv[4:10])
# CPU seconds of a run: client (psql or curl), idem, Postgres ("-": not here).
cpu = [[None if v == "-" else float(v) / 1e6 for v in c.split(",")] for c in sys.argv[10:16]]
print()
print(f"{'path (median of ' + str(runs) + ' runs)':44} {'seconds':>8} {'rows/s':>12} {'vs anchor':>9}"
      f"  {'CPU s a run: client + idem + Postgres':>38}")
paths = [("anchor: psql \\copy CSV + index + attach", copy, 0),
         ("PUT Parquet (pyarrow, zstd)", parquet, 0),
         ("PUT CSV", csv, 0),
         ("anchor: psql \\copy (select) to CSV", copy_out, 3),
         ("GET Parquet", get_parquet, 3),
         ("GET CSV", get_csv, 3)]
for i, (name, t, anchor) in enumerate(paths):
    # Both sides share the machine's two cores: the anchor's Postgres works
    # on one, idem and its Postgres on both, so the CPU is where the time
    # goes, not a bound on the ratio.
    spent = " + ".join("-" if v is None else f"{v:.2f}" for v in cpu[i])
    print(f"{name:44} {t:8.3f} {rows / t:12,.0f} {paths[anchor][1] / t:9.2f}  {spent:>38}")
ok = lambda b: "ok" if b else "MISSED"
print()
print(f"Parquet PUT / CSV \\copy: {copy / parquet:.2f} (goal >= 1.20: {ok(copy / parquet >= 1.2)})")
print(f"Parquet GET / CSV \\copy to: {copy_out / get_parquet:.2f}")
print(f"idem peak RSS: {rss_mb:.1f} MB (goal < 200 MB: {ok(rss_mb < 200)})")
PY
