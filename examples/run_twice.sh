#!/usr/bin/env bash
# The run-twice example: one day's file (order 2 in it twice, as upstream
# exports do) loaded twice, as a retried job would.
#
#   plain inserts (psql \copy into a table):   3 rows, then 6
#   idem put of the same file:                 2 rows, then 2
#
# After the README's quick start it needs nothing more: idem at IDEM_URL
# (default http://127.0.0.1:8080) with IDEM_TOKEN, `idem` on PATH (or IDEM
# naming the binary), psql and curl. The plain half runs on the Postgres
# DATABASE_URL names, or else on the one `scripts/serve` started in .idem/pg
# (it makes and drops a table `run_twice_plain` there).
set -euo pipefail
IDEM=${IDEM:-idem}
IDEM_URL=${IDEM_URL:-http://127.0.0.1:8080}
if [ -z "${DATABASE_URL:-}" ]; then
  # The same call scripts/serve makes: it starts that Postgres only if it is
  # not running, and sets DATABASE_URL.
  repo=$(cd "$(dirname "$0")/.." && pwd)
  . "$repo/scripts/pg.sh"
  pg_start "$repo/.idem/pg" "${IDEM_PG_PORT:-54329}"
fi
work=$(mktemp -d)
trap 'rm -rf "$work"; psql "$DATABASE_URL" -qc "drop table if exists run_twice_plain" >/dev/null 2>&1 || true' EXIT

printf '%s\n' order_id,status,amount 1,paid,10.50 2,paid,99.00 2,paid,99.00 >"$work/day.csv"

# Plain inserts: each run appends the file again.
psql "$DATABASE_URL" -qc "create table run_twice_plain (order_id bigint, status text, amount numeric)"
plain=()
for run in 1 2; do
  psql "$DATABASE_URL" -qc "\\copy run_twice_plain from '$work/day.csv' csv header"
  plain+=("$(psql "$DATABASE_URL" -tAc "select count(*) from run_twice_plain")")
  echo "plain inserts, run $run: ${plain[-1]} rows"
done

# idem: the table has a business key; the day is PUT whole, twice.
curl -fsS -o /dev/null -X PUT "$IDEM_URL/tables/run_twice" \
  -H "authorization: Bearer ${IDEM_TOKEN:-}" -H 'content-type: application/json' -d '{
  "columns": {"order_id": "bigint", "ds": "date", "status": "text", "amount": "numeric"},
  "partition_by": "ds", "primary_key": ["order_id"]}'
loaded=()
for run in 1 2; do
  "$IDEM" put run_twice 2026-10-12 "$work/day.csv" --quiet >/dev/null
  loaded+=("$("$IDEM" get run_twice 2026-10-12 | wc -l | tr -d ' ')")
  echo "idem put, run $run: ${loaded[-1]} rows"
done

echo "plain inserts: ${plain[0]} -> ${plain[1]}; idem: ${loaded[0]} -> ${loaded[1]}"
[ "${plain[*]} ${loaded[*]}" = "3 6 2 2" ]
