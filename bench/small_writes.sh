#!/usr/bin/env bash
# Small writes, idem against pgbench on the same Postgres, in one run, each at
# 32 connections for IDEM_BENCH_SECONDS (default 20) seconds:
#   (a) pgbench: a new key row + a 1-row upsert per transaction
#       (bench/pgbench_one_row.sql)     vs idem: 1-row POSTs with new keys;
#   (b) pgbench: a new key row + a 100-row upsert per transaction
#       (bench/pgbench_100_rows.sql)    vs idem: 100-row POSTs with new keys;
#   (c) pgbench: a completed key row read by its primary key
#       (bench/pgbench_key_read.sql)    vs idem: replays of completed keys
#       (made by this idem just before: in its memory);
#   (d) the same read                   vs idem: replays of keys made before
#       50,000 other writes, more keys than idem's memory holds (each
#       replay is answered from the database);
#   (e) 3 idem processes on the one database, the 32 connections split
#       among them: 1-row POSTs with new keys (against (a)'s one process)
#       and (d)'s replays, the keys made by the first process (against
#       (d)'s one process; each process's rate is printed).
#   (f) at 16 connections, over 1,000 tables (events_0001..events_1000, no
#       primary key, partitioned by day): pgbench: a key row + a 1-row insert
#       into a random one of them by a PL/pgSQL function with dynamic SQL
#       (bench/pgbench_many_tables.sql) vs idem: 1-row appends with new keys,
#       each to a random one of the 1,000 (bench/post_many_tables.lua), as
#       producers of one event type per table would send them.
# For each: requests (transactions) per second, p50, p99, and the ratio
# idem/pgbench of requests per second (goals: >= 0.7 for (a) and (b), >= 0.5
# for (c), (d) and (f); (e) at least the rate of one process).
#
# usage: bench/small_writes.sh
#   IDEM_BENCH_SECONDS    seconds per measurement (default 20)
#   IDEM_BENCH_KEYS       completed keys for (c), on each side (default 10000)
#   IDEM_BENCH_OLD_KEYS   keys for (d), on each side (default 30000)
#   IDEM_BENCH_OTHER_WRITES  POSTs between them and (d) (default 50000)
#   IDEM_BENCH_TABLES     tables for (f), on each side (default 1000)
# Runs in a database of its own, dropped at exit, on the server DATABASE_URL
# names, or without DATABASE_URL on a Postgres it starts in .idem/bench-pg.
# Installs wrk and pgbench (postgresql-client) with apt-get when missing.
set -euo pipefail
cd "$(dirname "$0")/.."
DURATION=${IDEM_BENCH_SECONDS:-20}
KEYS=${IDEM_BENCH_KEYS:-10000}
TABLES=${IDEM_BENCH_TABLES:-1000}
CLIENTS=32
# One day per step, the same on both sides, so that each step writes into a
# partition of its own that starts empty on both sides.
DS_A=2026-10-13 DS_B=2026-10-14 DS_C=2026-10-15 DS_D=2026-10-16 DS_E=2026-10-17 DS_F=2026-10-18
OLD_KEYS=${IDEM_BENCH_OLD_KEYS:-30000}
OTHER_WRITES=${IDEM_BENCH_OTHER_WRITES:-50000}
ROWS=0 DS=$DS_A # for common.sh (its test data is not used here)
# The bench token writes orders and (f)'s events_NNNN.
BENCH_TOKEN_TABLES='["orders", "events_*"]'

MACHINE="$(nproc) cores ($(awk -F': *' '/^model name/ {print $2; exit}' /proc/cpuinfo)), $(awk '/^MemTotal/ {printf "%.1f GiB RAM", $2 / 1048576}' /proc/meminfo)"
echo "== machine: $MACHINE; load average $(cut -d' ' -f1-3 /proc/loadavg)"

if ! command -v wrk >/dev/null; then
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq wrk >/dev/null
fi
if ! command -v pgbench >/dev/null; then
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql-client >/dev/null
fi
. bench/common.sh
SERVER=$("${PSQL[@]}" -c 'show server_version' | cut -d' ' -f1)
echo "== PostgreSQL $SERVER, $(pgbench --version), $(wrk --version 2>&1 | head -n 1 | cut -d' ' -f1-2)"

# pgbench's side: a key table with idem.idempotency_keys' columns and
# indexes, and bench.orders' partitions for the days of (a) and (b).
"${PSQL[@]}" <<SQL
create table bench.keys (like idem.idempotency_keys including all);
create table bench.orders_a partition of bench.orders for values in ('$DS_A');
create table bench.orders_b partition of bench.orders for values in ('$DS_B');
SQL

# check_rows NAME DAY ROWS: every transaction and request wrote ROWS new
# rows (no key or order_id met twice), at least as many as counted: a
# transaction or request still in flight when the clock stopped may have
# added its rows too. Prints the rows of the day on each side.
check_rows() {
  local txns requests pg_rows idem_rows
  txns=$(sed -n 's/^number of transactions actually processed: \([0-9]*\).*/\1/p' "$OUT/pgbench-$1.txt")
  requests=$(awk '/ requests in / {print $1}' "$OUT/wrk-$1.txt")
  pg_rows=$("${PSQL[@]}" -c "select count(*) from bench.orders where ds = '$2'")
  idem_rows=$(curl -fsS "${AUTH[@]}" -I "$BASE/partitions/orders/$2" | awk -F': ' 'tolower($1)=="idem-row-count" {print $2+0}')
  echo "   rows of $2: pgbench $pg_rows for $txns transactions, idem $idem_rows for $requests requests (x $3 rows)"
  if [ "$pg_rows" -lt $((txns * $3)) ] || [ "$idem_rows" -lt $((requests * $3)) ]; then
    echo "bench: fewer rows than transactions or requests x $3: some keys or order ids repeated" >&2
    exit 1
  fi
}

# Each measured pair is one line of $OUT/small-writes.tsv for the summary:
# step, goal, what each side did, each side's requests/s p50 p99 failures,
# and each side's CPU a transaction or request (client idem Postgres, in µs;
# from $OUT/cpu-PG_RUN.txt and cpu-IDEM_RUN.txt, see cpu_per).
SUMMARY=$OUT/small-writes.tsv
: > "$SUMMARY"
record() { # record STEP GOAL PG_WHAT PG_FIGURES IDEM_WHAT IDEM_FIGURES PG_RUN IDEM_RUN
  printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "${@:1:6}" "$(cat "$OUT/cpu-$7.txt")" "$(cat "$OUT/cpu-$8.txt")" >> "$SUMMARY"
}

echo "== (a) pgbench: key row + 1-row upsert, $CLIENTS clients, ${DURATION}s"
A_PG=$(pgbench_run one bench/pgbench_one_row.sql -D n=0 -D ds="$DS_A")
echo "== (a) idem: 1-row POSTs with new keys, $CLIENTS connections, ${DURATION}s"
A_IDEM=$(IDEM_BENCH_ROWS=1 IDEM_BENCH_DS=$DS_A wrk_run one bench/post_unique.lua)
record "(a) 1 row, new key" 0.7 "key row + 1-row upsert" "$A_PG" "1-row POST" "$A_IDEM" pgbench-one idem-one
check_rows one "$DS_A" 1

echo "== (b) pgbench: key row + 100-row upsert, $CLIENTS clients, ${DURATION}s"
B_PG=$(pgbench_run hundred bench/pgbench_100_rows.sql -D n=0 -D ds="$DS_B")
echo "== (b) idem: 100-row POSTs with new keys, $CLIENTS connections, ${DURATION}s"
B_IDEM=$(IDEM_BENCH_ROWS=100 IDEM_BENCH_DS=$DS_B wrk_run hundred bench/post_unique.lua)
record "(b) 100 rows, new key" 0.7 "key row + 100-row upsert" "$B_PG" "100-row POST" "$B_IDEM" pgbench-hundred idem-hundred
check_rows hundred "$DS_B" 100

# post_keys NAME PREFIX COUNT (--body FILE | --rows FIRST_ID DS): COUNT
# one-row POSTs under the keys PREFIX1.., 32 at a time (bench/curl_posts.py;
# one curl, kept-alive connections); fails unless every one answered 2xx.
post_keys() {
  local name=$1 prefix=$2 count=$3 made t0
  shift 3
  t0=$(now)
  # The config holds the token (readable by us only), so it goes right after.
  (umask 077 && python3 bench/curl_posts.py "$prefix" "$count" "$BASE" "$IDEM_BENCH_TOKEN" "$@" \
    > "$OUT/$name.curl")
  curl -sS --no-progress-meter -Z --parallel-max 32 -K "$OUT/$name.curl" > "$OUT/$name.status" || true
  rm -f "$OUT/$name.curl"
  made=$(grep -c '^2' "$OUT/$name.status" || true)
  echo "   $made POSTs (${prefix}1..$count) in $(elapsed "$t0" "$(now)") s"
  if [ "$made" != "$count" ]; then
    echo "bench: only $made of $count POSTs ($prefix..) answered 2xx; statuses:" >&2
    sort "$OUT/$name.status" | uniq -c >&2
    exit 1
  fi
}

# copy_keys PREFIX COUNT: idem's keys PREFIXn (its stored answers) copied into
# bench.keys under the principal 'bench', for pgbench to read.
copy_keys() {
  "${PSQL[@]}" <<SQL
insert into bench.keys (principal, key, fingerprint, load_id, response_status, response_body, expires_at)
select 'bench', k.key, k.fingerprint, k.load_id, k.response_status, k.response_body, k.expires_at
  from idem.idempotency_keys k
 where k.key like '$1%';
analyze bench.keys;
analyze idem.idempotency_keys;
SQL
  local copied
  copied=$("${PSQL[@]}" -c "select count(*) from bench.keys where principal = 'bench' and key like '$1%'")
  if [ "$copied" != "$2" ]; then
    echo "bench: bench.keys has $copied keys $1N instead of $2" >&2
    exit 1
  fi
}

echo "== (c) $KEYS completed keys on each side: POSTs of one row to idem, then the same rows in bench.keys"
printf '{"order_id":1,"ds":"%s","customer_id":1,"status":"paid","amount":1.25,"updated_at":"%sT01:02:03Z","note":"wrk"}\n' \
  "$DS_C" "$DS_C" > "$OUT/replay-body.ndjson"
# One body for every key: their POSTs write one row and take turns on its
# lock (a minute or more for 10,000 keys).
post_keys replay-keys replay- "$KEYS" --body "$OUT/replay-body.ndjson"
copy_keys replay- "$KEYS"
echo "== (c) pgbench: key row by primary key, $CLIENTS clients, ${DURATION}s"
C_PG=$(pgbench_run replay bench/pgbench_key_read.sql -D keys="$KEYS" -D prefix=replay-)
echo "== (c) idem: replays of the $KEYS keys, round-robin, $CLIENTS connections, ${DURATION}s"
C_IDEM=$(KEYS=$KEYS BODY=$OUT/replay-body.ndjson wrk_run replay bench/post_replay.lua)
record "(c) completed key, remembered" 0.5 "key row by primary key" "$C_PG" "replay" "$C_IDEM" pgbench-replay idem-replay

echo "== (d) $OLD_KEYS keys with a row each, then $OTHER_WRITES other 1-row POSTs"
OLD_ROW_BASE=3000000000000
post_keys old-keys old- "$OLD_KEYS" --rows "$OLD_ROW_BASE" "$DS_D"
post_keys other-writes other- "$OTHER_WRITES" --rows 4000000000000 "$DS_D"
copy_keys old- "$OLD_KEYS"
echo "== (d) pgbench: key row by primary key, $CLIENTS clients, ${DURATION}s"
D_PG=$(pgbench_run old bench/pgbench_key_read.sql -D keys="$OLD_KEYS" -D prefix=old-)
# Index scans of idem.idempotency_keys: at least one per replay answered from
# the database (Postgres counts them a moment after each transaction).
key_scans() {
  sleep 1
  "${PSQL[@]}" -c "select coalesce(sum(idx_scan), 0) from pg_stat_user_indexes
                    where schemaname = 'idem' and relname = 'idempotency_keys'"
}
echo "== (d) idem: replays of the $OLD_KEYS old keys, round-robin, $CLIENTS connections, ${DURATION}s"
SCANS_BEFORE=$(key_scans)
D_IDEM=$(KEYS=$OLD_KEYS KEY_PREFIX=old- ROW_BASE=$OLD_ROW_BASE ROW_DS=$DS_D wrk_run old bench/post_replay.lua)
SCANS=$(( $(key_scans) - SCANS_BEFORE ))
record "(d) completed key, not remembered" 0.5 "key row by primary key" "$D_PG" "replay" "$D_IDEM" pgbench-old idem-old

echo "== (e) two more idem processes on the same database"
BASES=("$BASE" "$(start_idem)" "$(start_idem)")
echo "== (e) idem x3: 1-row POSTs with new keys, $CLIENTS connections in all, ${DURATION}s"
E_POSTS=$(IDEM_BENCH_ROWS=1 IDEM_BENCH_DS=$DS_E wrk_multi one-x3 bench/post_unique.lua)
record "(e) 1 row, new key, 3 processes" 0.7 "(a)'s key row + 1-row upsert" "$A_PG" "1-row POST" "${E_POSTS% *}" pgbench-one idem-one-x3
echo "== (e) idem x3: replays of (d)'s keys, made by the first process, ${DURATION}s"
E_REPLAYS=$(KEYS=$OLD_KEYS KEY_PREFIX=old- ROW_BASE=$OLD_ROW_BASE ROW_DS=$DS_D wrk_multi old-x3 bench/post_replay.lua)
record "(e) completed key, not remembered, 3 processes" 0.5 "(d)'s key row by primary key" "$D_PG" "replay" "${E_REPLAYS% *}" pgbench-old idem-old-x3

echo "== (f) $TABLES tables on each side: declared over the API, made in bench by SQL"
# many_tables_curl NAME KIND: one curl for a request to each table, 8 at a
# time: KIND declare (PUT /tables) or first (the day's first event, a
# POST under a key of its own: it makes the table's partition of the day,
# as pgbench's side has its partitions made before it is measured); fails
# unless each answered 2xx.
many_tables_curl() {
  (umask 077 && python3 - "$TABLES" "$BASE" "$IDEM_BENCH_TOKEN" "$2" "$DS_F" > "$OUT/$1.curl") <<'PY'
import sys

tables, base, token, kind, ds = int(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4], sys.argv[5]
declaration = ('{"columns": {"event_id": "bigint", "ds": "date", "kind": "text", "payload": "text",'
               ' "at": "timestamptz"}}')
first = f'{{"event_id": 0, "ds": "{ds}", "kind": "first", "payload": "setup", "at": "{ds}T00:00:00Z"}}'
for i in range(1, tables + 1):
    if i > 1:
        print("next")
    table = f"events_{i:04d}"
    if kind == "declare":
        request = (f'url = "{base}/tables/{table}"\nrequest = "PUT"\n'
                   'header = "content-type: application/json"\n')
        body = declaration
    else:
        request = (f'url = "{base}/rows?table={table}&mode=append"\nrequest = "POST"\n'
                   f'header = "content-type: application/x-ndjson"\nheader = "idempotency-key: first-{table}"\n')
        body = first
    body = body.replace('"', '\\"')
    print(f'{request}output = "/dev/null"\nwrite-out = "%{{http_code}}\\n"\n'
          f'header = "authorization: Bearer {token}"\ndata = "{body}"')
PY
  curl -sS --no-progress-meter -Z --parallel-max 8 -K "$OUT/$1.curl" > "$OUT/$1.status" || true
  rm -f "$OUT/$1.curl"
  local made
  made=$(grep -c '^2' "$OUT/$1.status" || true)
  if [ "$made" != "$TABLES" ]; then
    echo "bench: only $made of $TABLES requests ($2) answered 2xx; statuses:" >&2
    sort "$OUT/$1.status" | uniq -c >&2
    exit 1
  fi
}
T0=$(now)
many_tables_curl many-tables declare
many_tables_curl many-tables-first first
# pgbench's side: the same tables, each partitioned by day with the day of
# (f) made; bench/pgbench_many_tables.sql's function; and a count of the
# day's rows in the tables events_0001.. of a schema, for the check below.
"${PSQL[@]}" <<SQL
do \$\$
begin
  for i in 1..$TABLES loop
    execute format('create table bench.%I (event_id bigint, ds date not null, kind text, payload text,
                      "at" timestamptz) partition by list (ds)', 'events_' || lpad(i::text, 4, '0'));
    execute format('create table bench.%I partition of bench.%I for values in (''$DS_F'')',
                   'events_' || lpad(i::text, 4, '0') || '_f', 'events_' || lpad(i::text, 4, '0'));
    execute format('insert into bench.%I values (0, ''$DS_F'', ''first'', ''setup'', ''$DS_F'')',
                   'events_' || lpad(i::text, 4, '0'));
  end loop;
end
\$\$;
create function bench.append_event(t int, k text, id bigint, day date) returns void
language plpgsql as \$\$
begin
  insert into bench.keys (principal, key, fingerprint, load_id, response_status, response_body, expires_at)
  values ('bench', k, 'e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855',
          gen_random_uuid(), 200,
          '{"load_id": "00000000-0000-0000-0000-000000000000", "table": "events_0001", "mode": "append", "ds": "$DS_F", "partitions": [{"ds": "$DS_F", "row_count": 1, "content_sha256": "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"}], "rows_received": 1, "rows_written": 1, "inserted": 1, "updated": 0, "deleted": 0, "unchanged": 0, "duplicates": 0, "rejected": 0, "changed": true, "replayed": false}',
          now() + interval '1 day');
  execute format('insert into bench.%I (event_id, ds, kind, payload, "at") values (\$1, \$2, ''click'', ''wrk'', \$3)',
                 'events_' || lpad(t::text, 4, '0'))
    using id, day, (day + time '01:02:03') at time zone 'UTC';
end
\$\$;
create function bench.count_events(schema_name text, day date) returns bigint
language plpgsql as \$\$
declare
  total bigint := 0;
  n bigint;
begin
  for i in 1..$TABLES loop
    execute format('select count(*) from %I.%I where ds = \$1', schema_name, 'events_' || lpad(i::text, 4, '0'))
      into n using day;
    total := total + n;
  end loop;
  return total;
end
\$\$;
SQL
echo "   made in $(elapsed "$T0" "$(now)") s"
F_CLIENTS=16
echo "== (f) pgbench: key row + 1-row insert into 1 of $TABLES tables, $F_CLIENTS clients, ${DURATION}s"
F_PG=$(CLIENTS=$F_CLIENTS pgbench_run many bench/pgbench_many_tables.sql -D n=0 -D ds="$DS_F" -D tables="$TABLES")
echo "== (f) idem: 1-row appends with new keys to 1 of $TABLES tables, $F_CLIENTS connections, ${DURATION}s"
F_IDEM=$(CLIENTS=$F_CLIENTS IDEM_BENCH_TABLES=$TABLES IDEM_BENCH_DS=$DS_F wrk_run many bench/post_many_tables.lua)
record "(f) 1 row to 1 of $TABLES tables, 16 connections" 0.5 "key row + 1-row insert" "$F_PG" "1-row append" "$F_IDEM" pgbench-many idem-many
echo "   idem's peak RSS: $(peak_rss_mb) MB"
TXNS=$(sed -n 's/^number of transactions actually processed: \([0-9]*\).*/\1/p' "$OUT/pgbench-many.txt")
REQUESTS=$(awk '/ requests in / {print $1}' "$OUT/wrk-many.txt")
PG_ROWS=$("${PSQL[@]}" -c "select bench.count_events('bench', '$DS_F')")
IDEM_ROWS=$("${PSQL[@]}" -c "select bench.count_events('idem_data', '$DS_F')")
echo "   rows of $DS_F: pgbench $PG_ROWS for $TXNS transactions, idem $IDEM_ROWS for $REQUESTS requests"
if [ "$PG_ROWS" -lt "$TXNS" ] || [ "$IDEM_ROWS" -lt "$REQUESTS" ]; then
  echo "bench: fewer rows than transactions or requests in (f): some keys repeated" >&2
  exit 1
fi


python3 bench/small_writes_summary.py "$MACHINE" "$SERVER" "$DURATION" "$SUMMARY" \
  "$A_IDEM" "${E_POSTS% *}" "$D_IDEM" "${E_REPLAYS% *}" "${E_REPLAYS##* }" "$SCANS"
