#!/usr/bin/env bash
# Benchmark of POST /rows, in one run:
#   (a) ROWS rows POSTed in batches of 10,000 in merge mode, one after the
#       other, against the anchor: the same batches through one psql session,
#       each in a transaction of its own (as each POST is): \copy into a
#       temporary table + INSERT ... ON CONFLICT DO UPDATE ... WHERE cursor
#       (prints rows/s and the ratio, goal >= 0.8);
#   (b) 100-row POSTs with new keys at concurrency 32 for 20 s (wrk):
#       requests/s, p50, p99;
#   (c) replays of completed keys at concurrency 32 for 20 s: requests/s, p99.
#
# usage: bench/post_rows.sh [ROWS]        (default 1000000)
# Runs in a database of its own, dropped at exit, on the server DATABASE_URL
# names, or without DATABASE_URL on a Postgres it starts in .idem/bench-pg.
# Installs wrk with apt-get when it is missing.
set -euo pipefail
cd "$(dirname "$0")/.."
ROWS=${1:-1000000}
BATCH=10000
DS=2026-10-12
DURATION=${IDEM_BENCH_SECONDS:-20}
if ! command -v wrk >/dev/null; then
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq wrk >/dev/null
fi
. bench/common.sh

echo "== generating $ROWS rows in batches of $BATCH"
gen "$OUT/orders-$ROWS.ndjson" ndjson 42
gen "$OUT/orders-$ROWS.csv" csv 42
rm -rf "$OUT/batches" && mkdir -p "$OUT/batches"
split -l "$BATCH" -d -a 5 "$OUT/orders-$ROWS.ndjson" "$OUT/batches/b-"
BATCHES=("$OUT"/batches/b-*)
# The anchor's batches: the same rows as CSV, without the header line.
tail -n +2 "$OUT/orders-$ROWS.csv" | split -l "$BATCH" -d -a 5 - "$OUT/batches/c-"
CSV_BATCHES=("$OUT"/batches/c-*)

echo "== (a) anchor: ${#CSV_BATCHES[@]} batches of $BATCH in one psql session, each: \\copy into a temp table + insert ... on conflict do update (x$REPEAT)"
"${PSQL[@]}" -c "create table bench.orders_p partition of bench.orders for values in ('$DS')"
# One session's script: the temporary table made once (emptied at each
# commit, as idem's own is), then a transaction per batch.
{
  echo "create temp table incoming (like bench.orders) on commit delete rows;"
  for batch in "${CSV_BATCHES[@]}"; do
    cat <<SQL
begin;
\\copy incoming from '$batch' with (format csv)
insert into bench.orders select * from incoming
on conflict (ds, order_id) do update set customer_id = excluded.customer_id, status = excluded.status,
  amount = excluded.amount, updated_at = excluded.updated_at, note = excluded.note
  where excluded.updated_at >= bench.orders.updated_at;
commit;
SQL
  done
} > "$OUT/anchor-batches.sql"
anchor_once() {
  "${PSQL[@]}" -c "truncate bench.orders"
  checkpoint
  local t0 t1
  t0=$(now)
  "${PSQL[@]}" -f "$OUT/anchor-batches.sql"
  t1=$(now)
  elapsed "$t0" "$t1"
}
T_ANCHOR=$(median_of anchor_once)

echo "== (a) idem: ${#BATCHES[@]} POSTs of $BATCH rows, merge mode (x$REPEAT)"
idem_once() { # idem_once RUN
  curl -fsS "${AUTH[@]}" -X DELETE "$BASE/partitions/orders/$DS"
  checkpoint
  post_batches "bench-$1" "${BATCHES[@]}"
}
T_IDEM=$(median_of idem_once)
ROWS_NOW=$(curl -fsS "${AUTH[@]}" -I "$BASE/partitions/orders/$DS" | awk -F': ' 'tolower($1)=="idem-row-count" {print $2+0}')
echo "   rows in the partition: $ROWS_NOW"

wrk_summary() { python3 bench/wrk_summary.py; }

echo "== (b) 100-row POSTs with new keys, concurrency 32, ${DURATION}s"
checkpoint
wrk -t 1 -c 32 -d "${DURATION}s" --latency -s bench/post_unique.lua "$BASE" > "$OUT/wrk-unique.txt"
read -r B_RPS B_P50 B_P99 B_BAD < <(wrk_summary < "$OUT/wrk-unique.txt")

echo "== (c) replays of 1000 completed keys, concurrency 32, ${DURATION}s"
head -n 100 "$OUT/orders-$ROWS.ndjson" | sed "s/$DS/2026-10-14/" > "$OUT/replay-body.ndjson"
for i in $(seq 1000); do
  curl -fsS "${AUTH[@]}" -o /dev/null -X POST "$BASE/rows?table=orders" -H 'content-type: application/x-ndjson' \
    -H "idempotency-key: replay-$i" --data-binary "@$OUT/replay-body.ndjson"
done
KEYS=1000 BODY="$OUT/replay-body.ndjson" \
  wrk -t 1 -c 32 -d "${DURATION}s" --latency -s bench/post_replay.lua "$BASE" > "$OUT/wrk-replay.txt"
read -r C_RPS C_P50 C_P99 C_BAD < <(wrk_summary < "$OUT/wrk-replay.txt")

python3 - "$ROWS" "$T_ANCHOR" "$T_IDEM" "$B_RPS" "$B_P50" "$B_P99" "$B_BAD" "$C_RPS" "$C_P50" "$C_P99" "$C_BAD" "$(peak_rss_mb)" <<'PY'
import sys
rows = int(sys.argv[1])
anchor, idem = float(sys.argv[2]), float(sys.argv[3])
b_rps, b50, b99, b_bad = float(sys.argv[4]), float(sys.argv[5]), float(sys.argv[6]), int(sys.argv[7])
c_rps, c50, c99, c_bad = float(sys.argv[8]), float(sys.argv[9]), float(sys.argv[10]), int(sys.argv[11])
ok = lambda b: "ok" if b else "MISSED"
print()
print(f"{f'(a) {rows:,} rows, merge mode':60}{'seconds':>8} {'rows/s':>12}")
for name, t in [("anchor: \\copy + insert on conflict, batches of 10,000", anchor),
                ("idem: POSTs of 10,000 rows", idem)]:
    print(f"    {name:55} {t:8.3f} {rows / t:12,.0f}")
print(f"    ratio idem/anchor: {anchor / idem:.2f} (goal >= 0.80: {ok(anchor / idem >= 0.8)})")
print(f"(b) 100-row POSTs, new keys, c=32: {b_rps:,.0f} requests/s ({b_rps * 100:,.0f} rows/s), p50 {b50:.2f} ms, p99 {b99:.2f} ms, non-2xx {b_bad}")
print(f"(c) replays, c=32: {c_rps:,.0f} requests/s, p50 {c50:.2f} ms, p99 {c99:.2f} ms (goal p99 < 5 ms: {ok(c99 < 5)}), non-2xx {c_bad}")
print(f"idem peak RSS: {sys.argv[12]} MB")
PY
