#!/usr/bin/env bash
# Benchmark of a load of several partitions, in one run: a daily keyed
# `orders` table that already holds DAYS days of ROWS_PER_DAY rows has those
# days replaced by DAYS new ones, every day going live at once:
#   anchor   one psql session: \copy of each day's CSV into its own staging
#            table (the partition's CHECK bound, the unique index built after
#            the copy, as idem stages a day), then ONE transaction that
#            detaches and drops the old partitions and attaches the new ones
#   idem     POST /loads (a range target), the days' NDJSON files as parts
#            with curl, PARALLEL at a time (xargs -P), then one
#            POST /loads/{id}/publish
# Both are timed end to end (median of IDEM_BENCH_REPEAT runs, default 3).
# Prints both times, the ratio (anchor time / idem time: >= 1.0 means idem
# is faster) and idem's peak RSS against the 100 MB goal.
#
# usage: bench/loads.sh
#   ROWS_PER_DAY (default 300000), DAYS (default 7), PARALLEL (default 4)
#   IDEM_BENCH_SIDES=anchor to time the anchor alone (idem still starts)
# Runs in a database of its own, dropped at exit, on the server DATABASE_URL
# names, or without DATABASE_URL on a Postgres it starts in .idem/bench-pg.
set -euo pipefail
cd "$(dirname "$0")/.."
ROWS_PER_DAY=${ROWS_PER_DAY:-300000}
DAYS=${DAYS:-7}
PARALLEL=${PARALLEL:-4}
SIDES=${IDEM_BENCH_SIDES:-both}
case $SIDES in both | anchor) ;; *) echo "IDEM_BENCH_SIDES is both or anchor" >&2; exit 2 ;; esac
ROWS=$ROWS_PER_DAY
DS=2026-10-01
. bench/common.sh

mapfile -t DAY_LIST < <(python3 - "$DS" "$DAYS" <<'PY'
import datetime, sys
first = datetime.date.fromisoformat(sys.argv[1])
for i in range(int(sys.argv[2])):
    print(first + datetime.timedelta(days=i))
PY
)
FIRST=${DAY_LIST[0]}
LAST=${DAY_LIST[-1]}

# day_file AGE N EXT: day N's (1-based) file; AGE `old` is what the table
# holds before, `new` what replaces it (other rows of the same days).
day_file() { echo "$OUT/loads-$ROWS-$1-$2.$3"; }

echo "== generating $DAYS days of $ROWS rows, old and new ($FIRST to $LAST)"
for i in $(seq "$DAYS"); do
  DS=${DAY_LIST[i - 1]}
  gen "$(day_file old "$i" csv)" csv $((1000 + i))
  gen "$(day_file new "$i" csv)" csv $((2000 + i))
  gen "$(day_file new "$i" ndjson)" ndjson $((2000 + i))
done
du -ch "$OUT"/loads-"$ROWS"-new-*.ndjson | tail -n 1 | awk '{print "   new NDJSON: " $1}'

# anchor_sql AGE REPLACING: the anchor's script for one psql session: each
# day staged (CHECK, \copy, unique index), then one transaction that swaps
# them all in (detaching and dropping the old days when REPLACING is 1).
anchor_sql() {
  local i day part
  # As idem builds a stage's index: sorted in memory, not on disk.
  echo "set maintenance_work_mem = '256MB';"
  echo "set client_min_messages = warning;"
  for i in $(seq "$DAYS"); do
    day=${DAY_LIST[i - 1]}
    part=bench.orders_${day//-/}
    cat <<SQL
drop table if exists ${part}_stage;
create table ${part}_stage (order_id bigint not null, ds date not null, customer_id bigint, status text,
  amount numeric, updated_at timestamptz, note text, check (ds is not null and ds = date '$day'));
\\copy ${part}_stage from '$(day_file "$1" "$i" csv)' with (format csv, header)
create unique index on ${part}_stage (ds, order_id);
SQL
  done
  echo "begin;"
  for i in $(seq "$DAYS"); do
    day=${DAY_LIST[i - 1]}
    part=bench.orders_${day//-/}
    if [ "$2" = 1 ]; then
      echo "alter table bench.orders detach partition $part;"
      echo "drop table $part;"
    fi
    echo "alter table ${part}_stage rename to ${part#bench.};"
    echo "alter table bench.orders attach partition $part for values in ('$day');"
  done
  echo "commit;"
}

echo "== the anchor's table holds the old days"
anchor_sql old 0 | "${PSQL[@]}"

echo "== anchor: psql \\copy of $DAYS days into staging tables + one swap transaction (x$REPEAT)"
anchor_once() {
  settle
  local t0 t1
  t0=$(now)
  anchor_sql new 1 | "${PSQL[@]}"
  t1=$(now)
  elapsed "$t0" "$t1"
}
T_ANCHOR=$(median_of anchor_once)
ANCHOR_ROWS=$("${PSQL[@]}" -c "select count(*) from bench.orders")
[ "$ANCHOR_ROWS" = $((ROWS * DAYS)) ] || { echo "bench: the anchor holds $ANCHOR_ROWS rows, not $((ROWS * DAYS))" >&2; exit 1; }

printf '\nanchor: %s s for %s days of %s rows (%s rows/s)\n\n' "$T_ANCHOR" "$DAYS" "$ROWS" \
  "$(python3 -c "print(f'{$ROWS * $DAYS / $T_ANCHOR:,.0f}')")"
if [ "$SIDES" = anchor ]; then exit 0; fi

# put_old_days: idem's table back to the old days, PARALLEL PUTs at a time
# (not timed: each run of the load must replace days that differ from it).
# Each `sh` gets the part and its day as $1 and $2; the rest comes through
# the environment.
# shellcheck disable=SC2016 # the single-quoted script expands in each sh
put_old_days() {
  local i
  for i in $(seq "$DAYS"); do echo "$i ${DAY_LIST[i - 1]}"; done |
    BASE=$BASE OUT=$OUT ROWS=$ROWS xargs -P "$PARALLEL" -n 2 sh -c \
      'curl -fsS -o /dev/null -H "authorization: Bearer $IDEM_BENCH_TOKEN" -X PUT \
         -T "$OUT/loads-$ROWS-old-$1.csv" -H "content-type: text/csv" "$BASE/partitions/orders/$2"' sh
}

# idem_once RUN: open a load of the range, send the days as parts PARALLEL
# at a time, publish; prints seconds, the receipt in $OUT/loads-receipt.json.
idem_once() {
  put_old_days
  settle
  local t0 t1 load_id
  t0=$(now)
  load_id=$(curl -fsS "${AUTH[@]}" -X POST "$BASE/loads" -H 'content-type: application/json' \
    -H "idempotency-key: bench-loads-$1-$(python3 -c 'import secrets; print(secrets.token_hex(8))')" \
    -d "{\"table\": \"orders\", \"target\": {\"range\": {\"from\": \"$FIRST\", \"to\": \"$LAST\"}}}" |
    python3 -c 'import json, sys; print(json.load(sys.stdin)["load_id"])')
  seq "$DAYS" | xargs -P "$PARALLEL" -I{} curl -fsS -o /dev/null "${AUTH[@]}" -X PUT \
    -T "$OUT/loads-$ROWS-new-{}.ndjson" -H 'content-type: application/x-ndjson' \
    "$BASE/loads/$load_id/parts/{}"
  curl -fsS "${AUTH[@]}" -X POST "$BASE/loads/$load_id/publish" -o "$OUT/loads-receipt.json"
  t1=$(now)
  elapsed "$t0" "$t1"
}

echo "== the idem table holds the old days"
put_old_days
curl -fsS "${AUTH[@]}" "$BASE/partitions/orders" | python3 -c '
import json, sys
days, rows = int(sys.argv[1]), int(sys.argv[2])
held = [p["rows"] for p in json.load(sys.stdin)]
if held != [rows] * days:
    sys.exit(f"bench: idem holds {held}, not {days} days of {rows} rows")' "$DAYS" "$ROWS"
# A POST /loads without its Idempotency-Key opens nothing: 400 where loads
# are served, 405 where only the ledger is.
if [ "$(curl -sS -o /dev/null -w '%{http_code}' "${AUTH[@]}" -X POST "$BASE/loads")" = 405 ]; then
  echo "bench: this idem serves no POST /loads; only the anchor was timed" >&2
  exit 1
fi
echo "== idem: POST /loads, $DAYS parts ($PARALLEL at a time), publish (x$REPEAT)"
T_IDEM=$(median_of idem_once)
python3 - "$OUT/loads-receipt.json" "$((ROWS * DAYS))" <<'PY'
import json, sys
receipt = json.load(open(sys.argv[1]))
rows = sum(p["row_count"] for p in receipt["partitions"])
if receipt.get("status") != "published" or not receipt["changed"] or rows != int(sys.argv[2]):
    sys.exit(f"bench: the publish receipt is not a change to {sys.argv[2]} rows: {receipt}")
PY

RSS_MB=$(peak_rss_mb)
python3 - "$DAYS" "$ROWS" "$PARALLEL" "$T_ANCHOR" "$T_IDEM" "$RSS_MB" <<'PY'
import sys
days, rows, parallel = map(int, sys.argv[1:4])
anchor, idem, rss_mb = map(float, sys.argv[4:7])
total = days * rows
ok = lambda b: "ok" if b else "MISSED"
print()
head = f"replacing {days} days x {rows} rows (median of runs)"
print(f"{head:52} {'seconds':>8} {'rows/s':>12}")
for name, t in [(f"anchor: psql \\copy x{days} + one swap transaction", anchor),
                (f"idem: POST /loads, {days} parts {parallel} at a time, publish", idem)]:
    print(f"{name:52} {t:8.3f} {total / t:12,.0f}")
print()
print(f"ratio anchor/idem: {anchor / idem:.2f} (goal >= 1.0: {ok(anchor / idem >= 1.0)})")
print(f"idem peak RSS: {rss_mb:.1f} MB (goal < 100 MB: {ok(rss_mb < 100)})")
PY
