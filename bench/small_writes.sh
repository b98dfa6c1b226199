#!/usr/bin/env bash
# Small writes, idem against pgbench on the same Postgres, in one run, each at
# 32 connections for IDEM_BENCH_SECONDS (default 20) seconds:
#   (a) pgbench: a new key row + a 1-row upsert per transaction
#       (bench/pgbench_one_row.sql)     vs idem: 1-row POSTs with new keys;
#   (b) pgbench: a new key row + a 100-row upsert per transaction
#       (bench/pgbench_100_rows.sql)    vs idem: 100-row POSTs with new keys;
#   (c) pgbench: a completed key row read by its primary key
#       (bench/pgbench_key_read.sql)    vs idem: replays of completed keys;
#   (f) at 16 connections, over 1,000 tables (events_0001..events_1000, no
#       primary key, partitioned by day): pgbench: a key row + a 1-row insert
#       into a random one of them by a PL/pgSQL function with dynamic SQL
#       (bench/pgbench_many_tables.sql) vs idem: 1-row appends with new keys,
#       each to a random one of the 1,000 (bench/post_many_tables.lua), as
#       producers of one event type per table would send them.
# For each: requests (transactions) per second, p50, p99, and the ratio
# idem/pgbench of requests per second (goal: >= 0.5).
#
# usage: bench/small_writes.sh
#   IDEM_BENCH_SECONDS  seconds per measurement (default 20)
#   IDEM_BENCH_KEYS     completed keys for (c), on each side (default 10000)
#   IDEM_BENCH_TABLES   tables for (f), on each side (default 1000)
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
DS_A=2026-10-13 DS_B=2026-10-14 DS_C=2026-10-15 DS_F=2026-10-18
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

echo "== (a) pgbench: key row + 1-row upsert, $CLIENTS clients, ${DURATION}s"
FIGURES=$(pgbench_run one bench/pgbench_one_row.sql -D n=0 -D ds="$DS_A")
read -r A_PG_RPS A_PG_P50 A_PG_P99 A_PG_BAD <<< "$FIGURES"
echo "== (a) idem: 1-row POSTs with new keys, $CLIENTS connections, ${DURATION}s"
FIGURES=$(IDEM_BENCH_ROWS=1 IDEM_BENCH_DS=$DS_A wrk_run one bench/post_unique.lua)
read -r A_RPS A_P50 A_P99 A_BAD <<< "$FIGURES"
check_rows one "$DS_A" 1

echo "== (b) pgbench: key row + 100-row upsert, $CLIENTS clients, ${DURATION}s"
FIGURES=$(pgbench_run hundred bench/pgbench_100_rows.sql -D n=0 -D ds="$DS_B")
read -r B_PG_RPS B_PG_P50 B_PG_P99 B_PG_BAD <<< "$FIGURES"
echo "== (b) idem: 100-row POSTs with new keys, $CLIENTS connections, ${DURATION}s"
FIGURES=$(IDEM_BENCH_ROWS=100 IDEM_BENCH_DS=$DS_B wrk_run hundred bench/post_unique.lua)
read -r B_RPS B_P50 B_P99 B_BAD <<< "$FIGURES"
check_rows hundred "$DS_B" 100

echo "== (c) $KEYS completed keys on each side: POSTs of one row to idem, then the same rows in bench.keys"
printf '{"order_id":1,"ds":"%s","customer_id":1,"status":"paid","amount":1.25,"updated_at":"%sT01:02:03Z","note":"wrk"}\n' \
  "$DS_C" "$DS_C" > "$OUT/replay-body.ndjson"
# One curl for all the keys (a config file of KEYS transfers, 8 at a time on
# kept-alive connections); it holds the token (readable by us only), so it
# goes right after. The POSTs write one day, so they take turns on its lock:
# a minute or more for 10,000 keys.
T0=$(now)
(umask 077 && python3 - "$KEYS" "$BASE" "$IDEM_BENCH_TOKEN" "$OUT/replay-body.ndjson" > "$OUT/replay-keys.curl") <<'PY'
import sys

keys, base, token, body = int(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4]
for i in range(1, keys + 1):
    if i > 1:
        print("next")
    print(f'url = "{base}/rows?table=orders"\nrequest = "POST"\noutput = "/dev/null"\n'
          f'write-out = "%{{http_code}}\\n"\nheader = "authorization: Bearer {token}"\n'
          f'header = "content-type: application/x-ndjson"\nheader = "idempotency-key: replay-{i}"\n'
          f'data-binary = "@{body}"')
PY
curl -sS --no-progress-meter -Z --parallel-max 8 -K "$OUT/replay-keys.curl" > "$OUT/replay-keys.status" || true
rm -f "$OUT/replay-keys.curl"
echo "   made in $(elapsed "$T0" "$(now)") s"
MADE=$(grep -c '^2' "$OUT/replay-keys.status" || true)
if [ "$MADE" != "$KEYS" ]; then
  echo "bench: only $MADE of $KEYS POSTs making the replay keys answered 2xx; statuses:" >&2
  sort "$OUT/replay-keys.status" | uniq -c >&2
  exit 1
fi
# bench.keys gets the same rows (idem's stored receipt of replay-1 as every
# key's response body) under the principal 'bench'.
"${PSQL[@]}" <<SQL
insert into bench.keys (principal, key, fingerprint, load_id, response_status, response_body, expires_at)
select 'bench', 'replay-' || g, k.fingerprint, gen_random_uuid(), k.response_status, k.response_body,
       now() + interval '1 day'
  from idem.idempotency_keys k, generate_series(1, $KEYS) g
 where k.key = 'replay-1';
analyze bench.keys;
analyze idem.idempotency_keys;
SQL
COPIED=$("${PSQL[@]}" -c "select count(*) from bench.keys where principal = 'bench' and key like 'replay-%'")
if [ "$COPIED" != "$KEYS" ]; then
  echo "bench: bench.keys has $COPIED keys replay-N instead of $KEYS" >&2
  exit 1
fi
echo "== (c) pgbench: key row by primary key, $CLIENTS clients, ${DURATION}s"
FIGURES=$(pgbench_run replay bench/pgbench_key_read.sql -D keys="$KEYS")
read -r C_PG_RPS C_PG_P50 C_PG_P99 C_PG_BAD <<< "$FIGURES"
echo "== (c) idem: replays of the $KEYS keys, round-robin, $CLIENTS connections, ${DURATION}s"
FIGURES=$(KEYS=$KEYS BODY=$OUT/replay-body.ndjson wrk_run replay bench/post_replay.lua)
read -r C_RPS C_P50 C_P99 C_BAD <<< "$FIGURES"

echo "== (f) $TABLES tables on each side: declared over the API, made in bench by SQL"
# The tables' declarations, one curl for all (as for (c)'s keys).
T0=$(now)
(umask 077 && python3 - "$TABLES" "$BASE" "$IDEM_BENCH_TOKEN" > "$OUT/many-tables.curl") <<'PY'
import sys

tables, base, token = int(sys.argv[1]), sys.argv[2], sys.argv[3]
body = ('{"columns": {"event_id": "bigint", "ds": "date", "kind": "text", "payload": "text",'
        ' "at": "timestamptz"}}').replace('"', '\\"')
for i in range(1, tables + 1):
    if i > 1:
        print("next")
    print(f'url = "{base}/tables/events_{i:04d}"\nrequest = "PUT"\noutput = "/dev/null"\n'
          f'write-out = "%{{http_code}}\\n"\nheader = "authorization: Bearer {token}"\n'
          f'header = "content-type: application/json"\ndata = "{body}"')
PY
curl -sS --no-progress-meter -Z --parallel-max 8 -K "$OUT/many-tables.curl" > "$OUT/many-tables.status" || true
rm -f "$OUT/many-tables.curl"
MADE=$(grep -c '^2' "$OUT/many-tables.status" || true)
if [ "$MADE" != "$TABLES" ]; then
  echo "bench: only $MADE of $TABLES table declarations answered 2xx; statuses:" >&2
  sort "$OUT/many-tables.status" | uniq -c >&2
  exit 1
fi
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
FIGURES=$(CLIENTS=$F_CLIENTS pgbench_run many bench/pgbench_many_tables.sql -D n=0 -D ds="$DS_F")
read -r F_PG_RPS F_PG_P50 F_PG_P99 F_PG_BAD <<< "$FIGURES"
echo "== (f) idem: 1-row appends with new keys to 1 of $TABLES tables, $F_CLIENTS connections, ${DURATION}s"
FIGURES=$(CLIENTS=$F_CLIENTS IDEM_BENCH_TABLES=$TABLES IDEM_BENCH_DS=$DS_F wrk_run many bench/post_many_tables.lua)
read -r F_RPS F_P50 F_P99 F_BAD <<< "$FIGURES"
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

F_TABLES=$TABLES python3 - "$MACHINE" "$SERVER" "$DURATION" \
  "$A_PG_RPS" "$A_PG_P50" "$A_PG_P99" "$A_PG_BAD" "$A_RPS" "$A_P50" "$A_P99" "$A_BAD" \
  "$B_PG_RPS" "$B_PG_P50" "$B_PG_P99" "$B_PG_BAD" "$B_RPS" "$B_P50" "$B_P99" "$B_BAD" \
  "$C_PG_RPS" "$C_PG_P50" "$C_PG_P99" "$C_PG_BAD" "$C_RPS" "$C_P50" "$C_P99" "$C_BAD" \
  "$F_PG_RPS" "$F_PG_P50" "$F_PG_P99" "$F_PG_BAD" "$F_RPS" "$F_P50" "$F_P99" "$F_BAD" <<'PY'
import os
import sys

machine, server, seconds = sys.argv[1:4]
figures = [sys.argv[4 + 8 * i: 12 + 8 * i] for i in range(4)]
steps = [
    ("(a) 1 row, new key", "key row + 1-row upsert", "1-row POST"),
    ("(b) 100 rows, new key", "key row + 100-row upsert", "100-row POST"),
    ("(c) completed key", "key row by primary key", "replay"),
    (f"(f) 1 row to 1 of {int(os.environ['F_TABLES']):,} tables, 16 connections",
     "key row + 1-row insert", "1-row append"),
]
print()
print(f"machine: {machine}; PostgreSQL {server}; 32 connections, {seconds} s each")
print(f"{'':36} {'requests/s':>10} {'p50 ms':>8} {'p99 ms':>8}")
bad = []
for (title, pg_what, idem_what), f in zip(steps, figures):
    pg_rps, pg50, pg99, pg_bad, rps, p50, p99, non2xx = f
    print(title)
    print(f"    pgbench: {pg_what:<26} {float(pg_rps):10,.0f} {float(pg50):8.2f} {float(pg99):8.2f}   failed {pg_bad}")
    print(f"    idem: {idem_what:<29} {float(rps):10,.0f} {float(p50):8.2f} {float(p99):8.2f}   non-2xx {non2xx}")
    ratio = float(rps) / float(pg_rps)
    print(f"    ratio idem/pgbench: {ratio:.2f} (goal >= 0.5: {'ok' if ratio >= 0.5 else 'MISSED'})")
    if int(pg_bad) or int(non2xx):
        bad.append(title)
if bad:
    sys.exit(f"bench: FAILED requests or transactions in {', '.join(bad)}: the figures above do not count")
PY
