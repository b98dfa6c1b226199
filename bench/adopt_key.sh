#!/usr/bin/env bash
# How long a key adopted later keeps a table's writers waiting, beside what
# Postgres itself takes to check and index the same rows, in one run:
#   setup    DAYS days of ROWS orders each PUT into `visits`, a table the
#            first write makes (no key), and the same rows COPYed into
#            bench.visits (partitioned the same way, no key)
#   anchor   psql: the key's column NOT NULL and a unique index on
#            (ds, order_id) over bench.visits, in one transaction
#   adopt    PUT /tables/visits with the key, while a writer sends 1-row
#            POSTs to the table one after another; the slowest of them is
#            how long a writer waited for the adoption
# Prints the seconds of each, the anchor/adopt ratio (1.0: as fast as
# Postgres alone), idem's CPU and peak RSS, and the writer's slowest POST.
#
# usage: bench/adopt_key.sh [ROWS_A_DAY] [DAYS]   (default 100000 and 10)
# Runs in a database of its own, dropped at exit, on the server DATABASE_URL
# names, or without DATABASE_URL on a Postgres it starts in .idem/bench-pg.
set -euo pipefail
cd "$(dirname "$0")/.."
ROWS=${1:-100000}
DAYS=${2:-10}
DS=2026-10-01
BENCH_TOKEN_TABLES='["orders", "visits"]'
. bench/common.sh

"${PSQL[@]}" -c "create table bench.visits (like bench.orders) partition by list (ds)"
echo "== $DAYS days of $ROWS rows into visits (made by its first write) and bench.visits"
for i in $(seq 0 $((DAYS - 1))); do
  day=$(date -d "$DS + $i day" +%F)
  file=$OUT/visits-$ROWS-$day.csv
  [ -s "$file" ] || python3 bench/gen_orders.py "$ROWS" --ds "$day" --format csv --seed "$i" > "$file"
  curl -fsS "${AUTH[@]}" -X PUT -T "$file" -H 'content-type: text/csv' \
    "$BASE/partitions/visits/$day" -o /dev/null
  "${PSQL[@]}" <<SQL
create table bench.visits_$i partition of bench.visits for values in ('$day');
\\copy bench.visits_$i from '$file' with (format csv, header)
SQL
done
checkpoint

echo "== anchor: NOT NULL and a unique index on (ds, order_id)"
t0=$(now)
"${PSQL[@]}" <<'SQL'
begin;
alter table bench.visits alter column order_id set not null;
create unique index on bench.visits (ds, order_id);
commit;
SQL
T_ANCHOR=$(elapsed "$t0" "$(now)")
checkpoint

# One writer, 1-row POSTs one after another until the adoption has
# answered: appends before it, merges after; each one's seconds to a file.
writer() {
  local n=0
  while [ ! -e "$OUT/adopted" ]; do
    n=$((n + 1))
    curl -sS "${AUTH[@]}" -o /dev/null -w '%{http_code} %{time_total}\n' -X POST \
      "$BASE/rows?table=visits" -H 'content-type: application/x-ndjson' \
      -H "idempotency-key: adopt-writer-$n" \
      --data-binary "{\"order_id\": $((ROWS + n)), \"ds\": \"$DS\", \"status\": \"paid\"}"
  done > "$OUT/adopt-writer.txt"
}
rm -f "$OUT/adopted"
writer &
WRITER=$!
sleep 1

echo "== adopt: PUT /tables/visits with the key order_id"
columns=$(curl -fsS "${AUTH[@]}" "$BASE/tables/visits" |
  python3 -c 'import json, sys; print(json.dumps({c["name"]: c["type"] for c in json.load(sys.stdin)["columns"]}))')
IDEM_TICKS0=$(ticks_of "$IDEM_PID")
t0=$(now)
curl -fsS "${AUTH[@]}" -X PUT "$BASE/tables/visits" -H 'content-type: application/json' \
  -d "{\"columns\": $columns, \"primary_key\": [\"order_id\"]}" -o "$OUT/adopt-answer.json"
T_ADOPT=$(elapsed "$t0" "$(now)")
IDEM_TICKS1=$(ticks_of "$IDEM_PID")
touch "$OUT/adopted"
sleep 1
touch "$OUT/adopted"
wait "$WRITER"
rm -f "$OUT/adopted"
grep -q '"adopt_key"' "$OUT/adopt-answer.json" || { echo "bench: no adoption: $(cat "$OUT/adopt-answer.json")" >&2; exit 1; }

python3 - "$OUT/adopt-writer.txt" "$ROWS" "$DAYS" "$T_ANCHOR" "$T_ADOPT" \
  "$((IDEM_TICKS1 - IDEM_TICKS0))" "$(getconf CLK_TCK)" "$(peak_rss_mb)" <<'PY'
import sys

path, rows, days, anchor, adopt, ticks, hz, rss = sys.argv[1:]
posts = [line.split() for line in open(path) if line.strip()]
statuses = sorted({code for code, _ in posts})
slowest = max(float(seconds) for _, seconds in posts)
total = int(rows) * int(days)
print(f"rows stored           {total:,} ({days} days of {int(rows):,})")
print(f"anchor (psql)         {float(anchor):.2f} s  NOT NULL + unique index")
print(f"adopt (idem)          {float(adopt):.2f} s  re-key + NOT NULL + unique index")
print(f"anchor / adopt        {float(anchor) / float(adopt):.3f}")
print(f"idem's CPU            {int(ticks) / int(hz):.2f} s ({int(ticks) / int(hz) / total * 1e6:.2f} µs a row)")
print(f"idem's peak RSS       {rss} MB")
print(f"writer's POSTs        {len(posts)}, statuses {' '.join(statuses)}, slowest {slowest:.2f} s")
PY
