#!/usr/bin/env bash
# Benchmark of the web console's server time on a big table, in one run:
#   data     built through idem's own API: a daily table `events` of
#            PARTITIONS partitions (default 10,000, days from 1999-01-01,
#            3 to 50 rows each, fixed seed), loaded by range PUTs of
#            RANGE_DAYS days (default 100, at most 400: Postgres's lock
#            table); and a table `bad` with REJECTS pending rejects (default
#            1,000,000) from REJECT_PUTS day PUTs (default 4) of NDJSON rows
#            whose qty does not fit `integer` or is no number (column qty),
#            or which are no object (`[1]`: the row's own error). Counts
#            checked with psql; then `vacuum (analyze)` and a checkpoint.
#   pages    each console page fetched RUNS times (default 20) after 2
#            warm-up fetches, with curl and the session cookie of the admin
#            token's sign-in: the server's time (`Server-Timing: app;dur=`)
#            and curl's time_total; median and max server ms, median total
#            ms, and whether max <= 200 ms (the goal: no page over 200 ms of
#            server time at this size).
#   anchor   the SQL statements each page runs (copied from src/store: its
#            binds as literals), each timed by psql's \timing, the same
#            count of runs after the same warm-up; a page's anchor is the
#            sum of its statements' medians. Printed beside the page's
#            median server time, with the ratio page / anchor.
# A page over the goal gets EXPLAIN (ANALYZE, BUFFERS) of its statements.
#
# usage: bench/console.sh
#   PARTITIONS (10000), RANGE_DAYS (100), REJECTS (1000000),
#   REJECT_PUTS (4), IDEM_BENCH_RUNS (20)
# Runs in a database of its own, dropped at exit, on the server DATABASE_URL
# names, or without DATABASE_URL on a Postgres it starts in .idem/bench-pg.
# Everything printed is kept in bench/out/console-<UTC time>.txt.
set -euo pipefail
cd "$(dirname "$0")/.."
PARTITIONS=${PARTITIONS:-10000}
RANGE_DAYS=${RANGE_DAYS:-100}
REJECTS=${REJECTS:-1000000}
REJECT_PUTS=${REJECT_PUTS:-4}
RUNS=${IDEM_BENCH_RUNS:-20}
WARMUP=2
GOAL_MS=200
FIRST_DAY=1999-01-01
REJECT_FIRST_DAY=2026-10-12
if [ "$RANGE_DAYS" -gt 400 ] || [ "$RANGE_DAYS" -lt 1 ]; then
  echo "RANGE_DAYS is 1 to 400 (a range PUT locks each of its partitions)" >&2
  exit 2
fi

mkdir -p bench/out
REPORT=bench/out/console-$(date -u +%Y%m%dT%H%M%SZ).txt
: > "$REPORT"
exec > >(tee -a "$REPORT") 2> >(tee -a "$REPORT" >&2)
STARTED=$(date +%s)

echo "== machine: $(nproc) CPUs, $(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -n 1)," \
  "$(awk '/MemTotal/ {printf "%.1f GiB", $2 / 1048576}' /proc/meminfo) RAM"
. bench/common.sh
echo "== Postgres $("${PSQL[@]}" -c 'show server_version')" \
  "(shared_buffers $("${PSQL[@]}" -c 'show shared_buffers'), work_mem $("${PSQL[@]}" -c 'show work_mem'))"
echo "== idem $BASE; $PARTITIONS partitions of events in ranges of $RANGE_DAYS days," \
  "$REJECTS rejects of bad in $REJECT_PUTS PUTs; $RUNS runs a page after $WARMUP warm-up fetches"

ADMIN=(-H "authorization: Bearer $ADMIN_TOKEN")
RECEIPT=$OUT/console-receipt.json
BODY=$OUT/console-body.ndjson

# put_body URL FILE: PUTs the NDJSON FILE to URL as the admin; the receipt in
# $RECEIPT; stops the script on any answer but 200 or 201.
put_body() {
  local code
  code=$(curl -sS "${ADMIN[@]}" -X PUT -H 'content-type: application/x-ndjson' \
    --data-binary @"$2" -o "$RECEIPT" -w '%{http_code}' "$1")
  if [ "$code" != 200 ] && [ "$code" != 201 ]; then
    echo "bench: PUT $1 answered $code:" >&2
    head -c 2000 "$RECEIPT" >&2; echo >&2
    exit 1
  fi
}
# receipt FIELD: a field of the last receipt.
receipt() { python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))[sys.argv[2]])' "$RECEIPT" "$1"; }
day() { date -u -d "$1 + $2 days" +%F; }

echo "== declaring events and bad"
DECLARATION='{"columns": {"id": "bigint", "ds": "date", "qty": "integer"}, "primary_key": ["id"], "bad_rows": "quarantine"}'
for table in events bad; do
  curl -fsS "${ADMIN[@]}" -X PUT "$BASE/tables/$table" -H 'content-type: application/json' \
    -d "$DECLARATION" >/dev/null
done

echo "== loading $PARTITIONS partitions of events by range PUTs (a few minutes)" >&2
T0=$(date +%s)
ROWS_SENT=0
i=0
while [ "$i" -lt "$PARTITIONS" ]; do
  j=$((i + RANGE_DAYS - 1))
  if [ "$j" -ge "$PARTITIONS" ]; then j=$((PARTITIONS - 1)); fi
  python3 bench/gen_console.py events "$FIRST_DAY" "$i" "$j" > "$BODY"
  put_body "$BASE/partitions/events?from=$(day "$FIRST_DAY" "$i")&to=$(day "$FIRST_DAY" "$j")" "$BODY"
  if [ "$(receipt rejected)" != 0 ]; then
    echo "bench: a range PUT of events rejected rows:" >&2; cat "$RECEIPT" >&2; exit 1
  fi
  ROWS_SENT=$((ROWS_SENT + $(wc -l < "$BODY")))
  done_now=$((j + 1))
  if [ $((done_now / 1000)) -gt $((i / 1000)) ] || [ "$done_now" -eq "$PARTITIONS" ]; then
    spent=$(($(date +%s) - T0))
    echo "   events: $done_now/$PARTITIONS partitions, $ROWS_SENT rows, ${spent}s" \
      "(about $((spent * (PARTITIONS - done_now) / done_now))s to go)" >&2
  fi
  i=$((j + 1))
done
echo "== events: $PARTITIONS partitions, $ROWS_SENT rows in $(($(date +%s) - T0))s"

echo "== loading $REJECTS rejects into bad by $REJECT_PUTS day PUTs" >&2
T0=$(date +%s)
for k in $(seq 0 $((REJECT_PUTS - 1))); do
  n=$((REJECTS / REJECT_PUTS))
  if [ "$k" -eq $((REJECT_PUTS - 1)) ]; then n=$((REJECTS - n * (REJECT_PUTS - 1))); fi
  ds=$(day "$REJECT_FIRST_DAY" "$k")
  python3 bench/gen_console.py bad "$n" --seed "42-$k" > "$BODY"
  put_body "$BASE/partitions/bad/$ds" "$BODY"
  got=$(receipt rejected)
  echo "   bad/$ds: $(receipt rows_received) rows received, $(receipt rows_written) written, $got rejected" >&2
  if [ "$got" != "$n" ]; then echo "bench: expected $n rejects, the receipt says $got" >&2; exit 1; fi
done
rm -f "$BODY"
echo "== bad: $REJECTS rejects in $(($(date +%s) - T0))s"

PARTS=$("${PSQL[@]}" -c "select count(*) from idem.partitions where table_name = 'events' and ds <> ''")
PENDING=$("${PSQL[@]}" -c "select count(*) from idem.rejects where table_name = 'bad' and status = 'pending'")
echo "== psql: $PARTS partitions of events, $PENDING pending rejects of bad; by the column of the first error:"
"${PSQL[@]}" -F ' ' -c "select '   ' || coalesce(errors -> 0 ->> 'column', '(the row)'), count(*) from idem.rejects
  where table_name = 'bad' and status = 'pending' group by 1 order by 1"
echo "   $("${PSQL[@]}" -c "select count(*) from idem.loads") loads in the ledger," \
  "$("${PSQL[@]}" -c "select pg_size_pretty(pg_total_relation_size('idem.rejects'))") in idem.rejects"
if [ "$PARTS" != "$PARTITIONS" ] || [ "$PENDING" != "$REJECTS" ]; then
  echo "bench: expected $PARTITIONS partitions and $REJECTS pending rejects" >&2
  exit 1
fi
echo "== vacuum (analyze) and a checkpoint" >&2
settle

echo "== signing in to the console as the admin"
SIGNIN=$(curl -sS -o /dev/null -D - -w '%{http_code}' -X POST \
  --data-urlencode "token=$ADMIN_TOKEN" "$BASE/console/session" | tr -d '\r')
COOKIE=$(sed -n 's/^set-cookie: \(idem_console=[^;]*\).*/\1/Ip' <<<"$SIGNIN")
if [ "$(tail -n 1 <<<"$SIGNIN")" != 303 ] || [ -z "$COOKIE" ]; then
  echo "bench: the sign-in did not answer 303 with a cookie:" >&2; echo "$SIGNIN" >&2; exit 1
fi

TIMINGS=$OUT/console-timings.tsv
: > "$TIMINGS"
PAGE_HTML=$OUT/console-page.html
# fetch PATH: one GET of a console page with the cookie; prints
# "STATUS SERVER_MS TOTAL_MS" (the page in $PAGE_HTML).
fetch() {
  local out server
  out=$(curl -sS -o "$PAGE_HTML" -D "$OUT/console-headers.txt" -H "cookie: $COOKIE" \
    -w '%{http_code} %{time_total}' "$BASE$1")
  server=$(tr -d '\r' < "$OUT/console-headers.txt" | sed -n 's/^server-timing: app;dur=\([0-9.]*\).*/\1/Ip')
  echo "${out% *} ${server:-nan} $(python3 -c "print(f'{float(\"${out#* }\") * 1000:.1f}')")"
}
# time_page NAME PATH: WARMUP + RUNS fetches; each run's line in $TIMINGS.
time_page() {
  local run line
  for run in $(seq $((WARMUP + RUNS))); do
    line=$(fetch "$2")
    if [ "$run" -gt "$WARMUP" ]; then printf '%s\t%s\t%s\n' "$1" "$2" "$line" >> "$TIMINGS"; fi
  done
  echo "   $1: ${line%% *} $(wc -c < "$PAGE_HTML") bytes, last run ${line#* } (server, total ms)" >&2
}
# next_of PATH: the page's rel="next" link (none: empty).
next_of() {
  fetch "$1" >/dev/null
  python3 - "$PAGE_HTML" <<'PY'
import html, re, sys
m = re.search(r'<a rel="next" href="([^"]*)"', open(sys.argv[1], encoding="utf-8").read())
print(html.unescape(m.group(1)) if m else "")
PY
}
# param URL NAME: a query parameter of URL.
param() {
  python3 -c 'import sys, urllib.parse as u; print(u.parse_qs(u.urlsplit(sys.argv[1]).query)[sys.argv[2]][0])' "$1" "$2"
}

LOADS_NEXT=$(next_of /console/loads)
REJECTS_NEXT=$(next_of '/console/rejects?table=bad&column=qty')
PAGES=(
  "tables|/console/tables"
  "events calendar (last year)|/console/tables/events"
  "events calendar at=2010-06-01|/console/tables/events?at=2010-06-01"
  "loads of events|/console/loads?table=events"
  "loads|/console/loads"
  "loads, next page|$LOADS_NEXT"
  "rejects of bad|/console/rejects?table=bad"
  "rejects of bad, column qty|/console/rejects?table=bad&column=qty"
  "rejects of bad, qty, next page|$REJECTS_NEXT"
  "duplicates of bad|/console/duplicates?table=bad"
)
echo "== timing the pages ($WARMUP warm-up + $RUNS fetches each)" >&2
for entry in "${PAGES[@]}"; do
  name=${entry%%|*} path=${entry#*|}
  if [ -z "$path" ]; then
    echo "bench: no next page for \"$name\" (the page before has no rel=\"next\" link)" >&2
    printf '%s\t%s\t%s\n' "$name" "-" "none nan nan" >> "$TIMINGS"
    continue
  fi
  time_page "$name" "$path"
done

# The anchors: each page's statements, as src/store runs them, with the
# binds as literals (the admin reads every table: visible = '{%}').
SQL_DIR=$OUT/console-sql
rm -rf "$SQL_DIR"
mkdir -p "$SQL_DIR"
VISIBLE="'{%}'::text[]"
CAP=10001 # COUNT_CAP + 1
# window_of AT: "BEFORE_REACH MOST" of the calendar of a day table holding
# AT (src/http/console/calendar.rs, tables.rs window_counts).
window_of() {
  python3 - "$1" <<'PY'
import datetime, sys
at = datetime.date.fromisoformat(sys.argv[1])
start, end = datetime.date(at.year, 1, 1), datetime.date(at.year + 1, 1, 1)
reach = start - datetime.timedelta(days=7)
print((reach - datetime.timedelta(days=1)).isoformat(), (end - start).days * 2 + 2)
PY
}
LAST_DS=$("${PSQL[@]}" -c "select max(ds) from idem.partitions where table_name = 'events' and ds <> ''")
read -r REACH_LAST MOST_LAST <<<"$(window_of "$LAST_DS")"
read -r REACH_2010 MOST_2010 <<<"$(window_of 2010-06-01)"

table_info_sql() {
  cat <<SQL
select t.definition, t.inferred, t.created_at, t.updated_at,
       count(p.ds) filter (where p.ds <> '') as partitions,
       (coalesce(sum(p.row_count), 0)
        + (select coalesce(sum(d.row_delta), 0) from idem.partition_deltas d
            where d.table_name = t.name))::bigint as rows
  from idem.tables t
  left join idem.partitions p on p.table_name = t.name
SQL
}
{ table_info_sql; echo " where (null::text is null or t.name > null) and t.name like any($VISIBLE)
  group by t.name order by t.name limit 50"; } > "$SQL_DIR/tables.sql"
{ table_info_sql; echo " where t.name = 'events' group by t.name"; } > "$SQL_DIR/table_info_events.sql"
TABLES=$("${PSQL[@]}" -c "select name from idem.tables order by name limit 50")
# activity_sql NAMES: store::console::table_activity of the tables NAMES
# (an SQL array literal), one statement for a page of them.
activity_sql() {
  cat <<SQL
select p.load_id as published_id, p.status as published_status,
       p.finished_at as published_at,
       r.load_id as refused_id, r.status as refused_status,
       r.finished_at as refused_at,
       (select count(*) from (select 1 from idem.rejects r
         where r.table_name = t.name and r.status = 'pending' limit $CAP) c) as pending,
       (select count(*) from (select 1 from idem.duplicates d
         where d.table_name = t.name limit $CAP) c) as duplicates
  from unnest($1::text[]) with ordinality as t(name, place)
  left join lateral (select load_id, status, finished_at from idem.loads
                      where table_name = t.name and status in ('published', 'unchanged')
                      order by load_id desc limit 1) p on true
  left join lateral (select load_id, status, finished_at from idem.loads
                      where table_name = t.name
                        and status in ('rejected', 'failed', 'audit_failed')
                      order by load_id desc limit 1) r on true
 order by t.place
SQL
}
activity_sql "array[$(for table in $TABLES; do printf "'%s'," "$table"; done | sed 's/,$//')]" \
  > "$SQL_DIR/activity_tables.sql"
activity_sql "array['events']" > "$SQL_DIR/activity_events.sql"
cat > "$SQL_DIR/history_events.sql" <<'SQL'
select 1::bigint as version, created_at as at, '[]'::jsonb as changes, null::uuid as load_id
  from idem.tables where name = 'events'
union all
select 1 + row_number() over (order by id), applied_at, changes, load_id
  from idem.schema_changes where table_name = 'events'
 order by version
SQL
cat > "$SQL_DIR/span_events.sql" <<'SQL'
select (select ds from idem.partitions where table_name = 'events' and ds <> ''
         order by ds limit 1) as first,
       (select ds from idem.partitions where table_name = 'events' and ds <> ''
         order by ds desc limit 1) as last
SQL
# window_sql BEFORE_REACH MOST: Store::partitions (LIVE_SELECT, LIVE_GROUP).
window_sql() {
  cat <<SQL
select p.ds, p.row_count, p.content_sum, p.content_sha256, p.body_sha256, p.rows_received, p.rejected,
       p.load_id, p.published_at,
       coalesce(sum(d.row_delta), 0)::bigint as row_delta,
       coalesce(array_agg(d.sum_delta) filter (where d.load_id is not null), '{}') as sum_deltas,
       max(d.load_id::text)::uuid as delta_load_id, max(d.written_at) as delta_written_at
  from idem.partitions p
  left join idem.partition_deltas d on d.table_name = p.table_name and d.ds = p.ds
 where p.table_name = 'events' and ('$1'::text is null or p.ds > '$1')
 group by p.table_name, p.ds order by p.ds limit $2
SQL
}
window_sql "$REACH_LAST" "$MOST_LAST" > "$SQL_DIR/window_last_year.sql"
window_sql "$REACH_2010" "$MOST_2010" > "$SQL_DIR/window_2010.sql"
# loads_sql TABLE BEFORE (SQL literals or null): Store::loads.
loads_sql() {
  cat <<SQL
select load_id, table_name, ds, mode, status, rows_received, rows_written,
       duplicates, rejected, content_sha256, changed, idempotency_key, error, started_at, finished_at,
       (extract(epoch from finished_at - started_at) * 1000)::bigint as duration_ms,
       token_id, token_name, dropped_by
  from idem.loads
 where ($1::text is null or table_name = $1) and (null::text is null or ds = null)
   and ($2::uuid is null or load_id < $2) and table_name like any($VISIBLE)
   and (null::text is null or status = null) and (null::text is null or token_name = null)
 order by load_id desc
 limit 50
SQL
}
loads_sql "'events'" null > "$SQL_DIR/loads_events.sql"
loads_sql null null > "$SQL_DIR/loads.sql"
if [ -n "$LOADS_NEXT" ]; then loads_sql null "'$(param "$LOADS_NEXT" before)'" > "$SQL_DIR/loads_next.sql"; fi
cat > "$SQL_DIR/reject_groups_bad.sql" <<SQL
with recursive columns(name) as (
    (select coalesce(errors -> 0 ->> 'column', '') from idem.rejects
      where table_name = 'bad' and status = 'pending'
      order by coalesce(errors -> 0 ->> 'column', '') limit 1)
    union all
    select (select coalesce(errors -> 0 ->> 'column', '') from idem.rejects
             where table_name = 'bad' and status = 'pending'
               and coalesce(errors -> 0 ->> 'column', '') > columns.name
             order by coalesce(errors -> 0 ->> 'column', '') limit 1)
      from columns where columns.name is not null
)
select c.name,
       (select count(*) from (select 1 from idem.rejects r
         where r.table_name = 'bad' and r.status = 'pending'
           and coalesce(r.errors -> 0 ->> 'column', '') = c.name
         order by r.load_id, r.record limit $CAP) n) as count,
       (select r.errors -> 0 ->> 'message' from idem.rejects r
         where r.table_name = 'bad' and r.status = 'pending'
           and coalesce(r.errors -> 0 ->> 'column', '') = c.name
         order by r.load_id, r.record limit 1) as example
  from columns c where c.name is not null
 limit 50
SQL
# rejects_sql COLUMN AFTER_LOAD AFTER_RECORD (SQL literals or null):
# rejects::list of the pending rejects of bad.
rejects_sql() {
  cat <<SQL
select table_name, load_id, record, line, ds, origin, mode, format, raw,
       csv_header, errors, idempotency_key, received_at, tries, status, replayed_by, last_tried_at
  from idem.rejects
 where ('bad'::text is null or table_name = 'bad') and (null::uuid is null or load_id = null)
   and ('pending'::text is null or status = 'pending') and (null::timestamptz is null or received_at >= null)
   and ($2::uuid is null or (load_id, record) > ($2, $3::bigint))
   and table_name like any($VISIBLE)
   and ($1::text is null or coalesce(errors -> 0 ->> 'column', '') = $1)
 order by load_id, record
 limit 50
SQL
}
# The page of rejects of bad with no column shows its first group's.
FIRST_GROUP=$("${PSQL[@]}" -c "select coalesce(errors -> 0 ->> 'column', '') as c from idem.rejects
  where table_name = 'bad' and status = 'pending' order by c limit 1")
rejects_sql "'$FIRST_GROUP'" null null > "$SQL_DIR/rejects_bad_first_group.sql"
rejects_sql "'qty'" null null > "$SQL_DIR/rejects_bad_qty.sql"
if [ -n "$REJECTS_NEXT" ]; then
  after=$(param "$REJECTS_NEXT" after)
  rejects_sql "'qty'" "'${after%.*}'" "${after##*.}" > "$SQL_DIR/rejects_bad_qty_next.sql"
fi
cat > "$SQL_DIR/duplicates_bad.sql" <<SQL
select table_name, load_id, nullif(ds, '') as ds, encode(row_id, 'hex') as row_id, key, version, row,
       encode(row_hash, 'hex') as row_hash, encode(kept_row_hash, 'hex') as kept_row_hash,
       policy, logged_at
  from idem.duplicates d
 where ('bad'::text is null or table_name = 'bad') and (null::uuid is null or load_id = null)
   and (null::uuid is null or (load_id, row_id, version) > (null, null, null))
   and table_name like any($VISIBLE)
   and exists (select from idem.loads l
                where l.load_id = d.load_id and l.status in ('published', 'unchanged'))
 order by load_id, row_id, version
 limit 100
SQL

# Each page's statements (files of $SQL_DIR, without .sql).
CALENDAR="table_info_events activity_events history_events span_events"
declare -A ANCHOR=(
  ["tables"]="tables activity_tables"
  ["events calendar (last year)"]="$CALENDAR window_last_year"
  ["events calendar at=2010-06-01"]="$CALENDAR window_2010"
  ["loads of events"]="loads_events"
  ["loads"]="loads"
  ["loads, next page"]="${LOADS_NEXT:+loads_next}"
  ["rejects of bad"]="reject_groups_bad rejects_bad_first_group"
  ["rejects of bad, column qty"]="reject_groups_bad rejects_bad_qty"
  ["rejects of bad, qty, next page"]="reject_groups_bad${REJECTS_NEXT:+ rejects_bad_qty_next}"
  ["duplicates of bad"]="duplicates_bad"
)

echo "== timing the anchors with psql \\timing ($WARMUP warm-up + $RUNS runs each)" >&2
STATEMENTS=$OUT/console-statements.tsv
: > "$STATEMENTS"
for file in "$SQL_DIR"/*.sql; do
  name=$(basename "$file" .sql)
  {
    echo '\o /dev/null'
    echo '\timing on'
    for _ in $(seq $((WARMUP + RUNS))); do cat "$file"; echo ';'; done
  } > "$OUT/console-timing.psql"
  times=$(psql "$DATABASE_URL" -v ON_ERROR_STOP=1 -qX -f "$OUT/console-timing.psql" |
    sed -n 's/^Time: \([0-9.]*\) ms.*/\1/p' | tail -n "$RUNS" | tr '\n' ' ')
  printf '%s\t%s\n' "$name" "$times" >> "$STATEMENTS"
done
rm -f "$OUT/console-timing.psql"
ANCHORS=$OUT/console-anchors.tsv
: > "$ANCHORS"
for entry in "${PAGES[@]}"; do
  name=${entry%%|*}
  printf '%s\t%s\n' "$name" "${ANCHOR[$name]}" >> "$ANCHORS"
done

echo
echo "== figures: server ms from Server-Timing, total ms from curl's time_total; anchor: psql \\timing"
echo "   (medians of $RUNS runs; a page's anchor is the sum of its statements' medians)"
SLOW_PAGES=$OUT/console-slow.txt
python3 - "$TIMINGS" "$STATEMENTS" "$ANCHORS" "$GOAL_MS" "$SLOW_PAGES" <<'PY'
import math, statistics, sys
timings, statements, anchors, goal, slow_pages = sys.argv[1:4] + [float(sys.argv[4]), sys.argv[5]]
pages = {}
order = []
for line in open(timings):
    name, path, rest = line.rstrip("\n").split("\t")
    status, server, total = rest.split()
    if name not in pages:
        order.append(name)
        pages[name] = {"path": path, "status": set(), "server": [], "total": []}
    p = pages[name]
    p["status"].add(status)
    if server != "nan":
        p["server"].append(float(server))
        p["total"].append(float(total))
stmt = {}
for line in open(statements):
    name, times = line.rstrip("\n").split("\t")
    stmt[name] = [float(t) for t in times.split()]
anchor = {}
for line in open(anchors):
    name, parts = line.rstrip("\n").split("\t")
    anchor[name] = parts.split()

med = lambda xs: statistics.median(xs) if xs else math.nan
print()
print(f"{'page':32} {'HTTP':>4} {'server med':>10} {'max':>7} {'total med':>9} {'max<=200':>8}"
      f" {'anchor ms':>9} {'page/anchor':>11}")
slow = []
for name in order:
    p = pages[name]
    status = ",".join(sorted(p["status"]))
    s_med, s_max, t_med = med(p["server"]), max(p["server"], default=math.nan), med(p["total"])
    a = sum(med(stmt[s]) for s in anchor.get(name, [])) if anchor.get(name) else math.nan
    if not p["server"]:
        ok = "n/a"  # not fetched (no next page)
    elif s_max <= goal and status == "200":
        ok = "yes"
    else:
        ok = "NO"
        slow.append(name)
    ratio = s_med / a if a and a == a else math.nan
    print(f"{name:32} {status:>4} {s_med:10.1f} {s_max:7.1f} {t_med:9.1f} {ok:>8} {a:9.2f} {ratio:11.1f}")
print()
print(f"{'anchor statement (psql)':32} {'median ms':>10} {'max':>7}   used by")
for name, times in stmt.items():
    users = [p for p in order if name in anchor.get(p, [])]
    print(f"{name:32} {med(times):10.2f} {max(times, default=math.nan):7.2f}   {'; '.join(users)}")
print()
worst = max((max(p["server"], default=0) for p in pages.values()), default=0)
print(f"goal: no page over {goal:.0f} ms of server time: "
      + ("met" if not slow else "MISSED by " + "; ".join(slow)) + f" (the slowest fetch: {worst:.1f} ms)")
with open(slow_pages, "w") as f:
    f.writelines(name + "\n" for name in slow)
PY
if [ -s "$SLOW_PAGES" ]; then
  echo
  echo "== EXPLAIN (ANALYZE, BUFFERS) of the statements of the pages over the goal (or not 200)"
  declare -A SHOWN=()
  while IFS= read -r name; do
    for statement in ${ANCHOR[$name]}; do
      if [ -n "${SHOWN[$statement]:-}" ]; then continue; fi
      SHOWN[$statement]=1
      echo "-- $statement ($name)"
      { echo 'explain (analyze, buffers)'; cat "$SQL_DIR/$statement.sql"; } | "${PSQL[@]}"
    done
  done < "$SLOW_PAGES"
fi
echo
echo "== pages fetched: $OUT/console-timings.tsv; statements: $SQL_DIR; total run $(($(date +%s) - STARTED))s"
echo "== kept in $REPORT"
