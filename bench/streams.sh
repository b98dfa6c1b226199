#!/usr/bin/env bash
# Streams, idem against pgbench on the same Postgres, in one run, each at 32
# connections for IDEM_BENCH_SECONDS (default 20) seconds:
#   (a) pgbench: small_writes.sh (a)'s transaction (a key row + a 1-row
#       upsert) plus the update of the client's offset row
#       (bench/pgbench_channel_one_row.sql)
#       vs idem: 1-row POSTs on channels, no Idempotency-Key, 32 producers
#       each on a channel of its own with offsets 1, 2, 3… (bench/post_channel.lua);
#   (b) pgbench: a key row + INSERT … ON CONFLICT DO NOTHING of 100 new
#       versions (bench/pgbench_versions_100.sql)
#       vs idem: 100-row `mode=versions` POSTs with new keys into a table
#       whose write_mode is versions (bench/post_unique.lua).
# For each: requests (transactions) per second, p50, p99, and the ratio
# idem/pgbench of requests per second (goal: >= 0.5).
#
# usage: bench/streams.sh
#   IDEM_BENCH_SECONDS  seconds per measurement (default 20)
# Runs in a database of its own, dropped at exit, on the server DATABASE_URL
# names, or without DATABASE_URL on a Postgres it starts in .idem/bench-pg.
# Installs wrk and pgbench (postgresql-client) with apt-get when missing.
set -euo pipefail
cd "$(dirname "$0")/.."
DURATION=${IDEM_BENCH_SECONDS:-20}
CLIENTS=32
# One day per step, the same on both sides, each starting empty.
DS_A=2026-10-16 DS_B=2026-10-17
ROWS=0 DS=$DS_A # for common.sh (its test data is not used here)
BENCH_TOKEN_TABLES='["orders", "events"]'

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

# idem's versions table: the orders' columns, every version kept once.
curl -fsS "${AUTH[@]}" -X PUT "$BASE/tables/events" -H 'content-type: application/json' \
  -d "{\"columns\": {$ORDERS_COLUMNS}, \"primary_key\": [\"order_id\"], \"cursor\": \"updated_at\", \"write_mode\": \"versions\"}" >/dev/null

# pgbench's side: a key table with idem.idempotency_keys' columns, an offset
# row per client with idem.channels' columns, bench.orders' partition for
# (a), and bench.events, unique on (day, key, cursor), for (b).
"${PSQL[@]}" <<SQL
create table bench.keys (like idem.idempotency_keys including all);
create table bench.channels (like idem.channels including all);
insert into bench.channels (principal, name, offset_kind, committed_offset, table_name, load_id, committed_at, commits)
select 'bench', 'pgb-' || c, 'integer', '0', 'orders', gen_random_uuid(), now(), 0
  from generate_series(1, $CLIENTS) c;
create table bench.orders_a partition of bench.orders for values in ('$DS_A');
create table bench.events (order_id bigint not null, ds date not null, customer_id bigint, status text,
  amount numeric, updated_at timestamptz not null, note text) partition by list (ds);
create unique index on bench.events (ds, order_id, updated_at);
create table bench.events_b partition of bench.events for values in ('$DS_B');
SQL

echo "== (a) pgbench: offset row + key row + 1-row upsert, $CLIENTS clients, ${DURATION}s"
FIGURES=$(pgbench_run channel bench/pgbench_channel_one_row.sql -D n=0 -D ds="$DS_A")
read -r A_PG_RPS A_PG_P50 A_PG_P99 A_PG_BAD <<< "$FIGURES"
echo "== (a) idem: 1-row channel POSTs, $CLIENTS producers on channels of their own, ${DURATION}s"
FIGURES=$(IDEM_BENCH_DS=$DS_A wrk_run channel bench/post_channel.lua "$CLIENTS")
read -r A_RPS A_P50 A_P99 A_BAD <<< "$FIGURES"
# Every request committed its offset with its row: the day holds as many
# rows as requests (a request in flight when the clock stopped may add its
# own), and each channel counts a commit for each.
REQUESTS=$(awk '/ requests in / {print $1}' "$OUT/wrk-channel.txt")
# The requests in flight when wrk stopped still commit (a client gone does
# not cancel a write): let them, so that rows and commits are read alike.
sleep 2
IDEM_ROWS=$(curl -fsS "${AUTH[@]}" -I "$BASE/partitions/orders/$DS_A" | awk -F': ' 'tolower($1)=="idem-row-count" {print $2+0}')
# Commits, not offsets: wrk calls the first thread's request() once to
# check it before the run, so that thread's offsets start at 2.
COMMITS=$("${PSQL[@]}" -c "select coalesce(sum(commits), 0) from idem.channels where name like 'wrk-$DS_A-%'")
echo "   idem: $REQUESTS requests, $IDEM_ROWS rows of $DS_A, $COMMITS offsets committed"
if [ "$IDEM_ROWS" -lt "$REQUESTS" ] || [ "$COMMITS" != "$IDEM_ROWS" ]; then
  echo "bench: the channels' commits do not count the rows written" >&2
  exit 1
fi

echo "== (b) pgbench: key row + 100 versions, ON CONFLICT DO NOTHING, $CLIENTS clients, ${DURATION}s"
FIGURES=$(pgbench_run versions bench/pgbench_versions_100.sql -D n=0 -D ds="$DS_B")
read -r B_PG_RPS B_PG_P50 B_PG_P99 B_PG_BAD <<< "$FIGURES"
echo "== (b) idem: 100-row mode=versions POSTs with new keys, $CLIENTS connections, ${DURATION}s"
FIGURES=$(IDEM_BENCH_ROWS=100 IDEM_BENCH_DS=$DS_B IDEM_BENCH_TABLE='events&mode=versions' \
  wrk_run versions bench/post_unique.lua 1)
read -r B_RPS B_P50 B_P99 B_BAD <<< "$FIGURES"
REQUESTS=$(awk '/ requests in / {print $1}' "$OUT/wrk-versions.txt")
IDEM_ROWS=$(curl -fsS "${AUTH[@]}" -I "$BASE/partitions/events/$DS_B" | awk -F': ' 'tolower($1)=="idem-row-count" {print $2+0}')
echo "   idem: $REQUESTS requests, $IDEM_ROWS versions of $DS_B"
if [ "$IDEM_ROWS" -lt $((REQUESTS * 100)) ]; then
  echo "bench: fewer versions than requests x 100" >&2
  exit 1
fi

python3 - "$MACHINE" "$SERVER" "$DURATION" \
  "$A_PG_RPS" "$A_PG_P50" "$A_PG_P99" "$A_PG_BAD" "$A_RPS" "$A_P50" "$A_P99" "$A_BAD" \
  "$B_PG_RPS" "$B_PG_P50" "$B_PG_P99" "$B_PG_BAD" "$B_RPS" "$B_P50" "$B_P99" "$B_BAD" <<'PY'
import sys

machine, server, seconds = sys.argv[1:4]
figures = [sys.argv[4 + 8 * i: 12 + 8 * i] for i in range(2)]
steps = [
    ("(a) 1 row on a channel", "offset + key + 1-row upsert", "1-row channel POST"),
    ("(b) 100 versions, new key", "key + 100 rows DO NOTHING", "100-row versions POST"),
]
print()
print(f"machine: {machine}; PostgreSQL {server}; 32 connections, {seconds} s each")
print(f"{'':40} {'requests/s':>10} {'p50 ms':>8} {'p99 ms':>8}")
bad = []
for (title, pg_what, idem_what), f in zip(steps, figures):
    pg_rps, pg50, pg99, pg_bad, rps, p50, p99, non2xx = f
    print(title)
    print(f"    pgbench: {pg_what:<30} {float(pg_rps):10,.0f} {float(pg50):8.2f} {float(pg99):8.2f}   failed {pg_bad}")
    print(f"    idem: {idem_what:<33} {float(rps):10,.0f} {float(p50):8.2f} {float(p99):8.2f}   non-2xx {non2xx}")
    ratio = float(rps) / float(pg_rps)
    print(f"    ratio idem/pgbench: {ratio:.2f} (goal >= 0.5: {'ok' if ratio >= 0.5 else 'MISSED'})")
    if int(pg_bad) or int(non2xx):
        bad.append(title)
if bad:
    sys.exit(f"bench: FAILED requests or transactions in {', '.join(bad)}: the figures above do not count")
PY
