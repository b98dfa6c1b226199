# shellcheck shell=bash
# Shared by the benchmark scripts (sourced, after `cd` to the project root and
# with ROWS and DS set): a database of the benchmark's own, a release build,
# test data, a running idem with an `orders` table, timing helpers, and
# pgbench_run / wrk_run (one side of a side-by-side run).
#
# The benchmark writes only into a database it creates: idem_bench_<random>
# on the server DATABASE_URL names or, without DATABASE_URL, on a Postgres of
# its own in .idem/bench-pg. It drops that database (and stops that Postgres)
# when it exits, and touches nothing else on the server. A caller that made
# the servers itself (bench/citus.sh) sets BENCH_DATABASE_READY=1 to use
# DATABASE_URL's database as it is, BENCH_POSTMASTER_PIDS (one pid per
# server) to count each server's CPU apart, and BENCH_WORKER_URLS for the
# Citus workers behind DATABASE_URL's coordinator.
set -euo pipefail
OUT=bench/out
mkdir -p "$OUT"

IDEM_PID='' BENCH_DB='' BENCH_PG_DIR=''
bench_cleanup() {
  if [ -n "$IDEM_PID" ]; then
    kill "$IDEM_PID" 2>/dev/null || true
    wait "$IDEM_PID" 2>/dev/null || true
  fi
  if [ -s "$OUT/more-idem.pids" ]; then
    xargs kill < "$OUT/more-idem.pids" 2>/dev/null || true
    rm -f "$OUT/more-idem.pids"
  fi
  if [ -n "$BENCH_DB" ]; then
    psql "$ADMIN_URL" -qc "drop database if exists \"$BENCH_DB\" with (force)" >/dev/null \
      || echo "bench: could not drop the database $BENCH_DB; drop it by hand" >&2
  fi
  if [ -n "$BENCH_PG_DIR" ]; then pg_stop "$BENCH_PG_DIR"; fi
}
trap bench_cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# with_database URL NAME: the same server URL, naming the database NAME.
with_database() {
  python3 - "$1" "$2" <<'PY'
import sys
import urllib.parse

url = urllib.parse.urlsplit(sys.argv[1])
print(urllib.parse.urlunsplit(url._replace(path="/" + sys.argv[2])))
PY
}

if [ -z "${DATABASE_URL:-}" ]; then
  . scripts/pg.sh
  BENCH_PG_DIR=.idem/bench-pg
  PG_DATABASE=postgres pg_start "$BENCH_PG_DIR" "${IDEM_BENCH_PG_PORT:-54339}"
fi

echo "== building release"
cargo build --release --quiet

# The server's own database (the one DATABASE_URL names) only serves to
# create and drop ours.
ADMIN_URL=$DATABASE_URL
if [ -z "${BENCH_DATABASE_READY:-}" ]; then
  new_db=idem_bench_$(python3 -c 'import secrets; print(secrets.token_hex(6))')
  psql "$ADMIN_URL" -v ON_ERROR_STOP=1 -qc "create database \"$new_db\"" >/dev/null \
    || { echo "bench: cannot create a database on the server of DATABASE_URL (needs CREATEDB)" >&2; exit 1; }
  BENCH_DB=$new_db
  DATABASE_URL=$(with_database "$ADMIN_URL" "$BENCH_DB")
  export DATABASE_URL
  echo "== database $BENCH_DB (dropped at exit)"
fi
PSQL=(psql "$DATABASE_URL" -v ON_ERROR_STOP=1 -qAt)

# gen FILE FORMAT SEED: ROWS orders of the day DS, kept in bench/out for the
# next run (made again when the generator is newer than the file).
gen() {
  if [ -s "$1" ] && [ "$1" -nt bench/gen_orders.py ]; then return 0; fi
  python3 bench/gen_orders.py "$ROWS" --ds "$DS" --format "$2" --seed "$3" > "$1.tmp"
  mv "$1.tmp" "$1"
}

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
# wait_ready BASE: until idem at BASE answers /readyz (10 s at most).
wait_ready() {
  for _ in $(seq 100); do curl -fs "$1/readyz" >/dev/null 2>&1 && return 0; sleep 0.1; done
  echo "bench: idem at $1 is not ready; see $OUT/idem*.log" >&2
  exit 1
}
PORT=$(free_port)
ADMIN_TOKEN="bench-admin-$(python3 -c 'import secrets; print(secrets.token_urlsafe(32))')"
IDEM_ADMIN_TOKEN="$ADMIN_TOKEN" target/release/idem serve --listen "127.0.0.1:$PORT" > "$OUT/idem.log" 2>&1 &
IDEM_PID=$!
BASE="http://127.0.0.1:$PORT"
wait_ready "$BASE"
# start_idem: one more idem process on the same database; prints its base
# URL (its pid goes to $OUT/more-idem.pids, killed at exit).
start_idem() {
  local port
  port=$(free_port)
  IDEM_ADMIN_TOKEN="$ADMIN_TOKEN" target/release/idem serve --listen "127.0.0.1:$port" \
    > "$OUT/idem-$port.log" 2>&1 &
  echo $! >> "$OUT/more-idem.pids"
  wait_ready "http://127.0.0.1:$port"
  echo "http://127.0.0.1:$port"
}
# The measured requests carry a token made over the API, as a producer's
# would be (looked up in idem.tokens on every request), not the admin's;
# for the tables BENCH_TOKEN_TABLES (a JSON list; default ["orders"]).
IDEM_BENCH_TOKEN=$(curl -fsS -X POST "$BASE/tokens" -H "authorization: Bearer $ADMIN_TOKEN" \
  -H 'content-type: application/json' \
  -d "{\"name\": \"bench\", \"scopes\": [\"read\", \"write\"], \"tables\": ${BENCH_TOKEN_TABLES:-[\"orders\"]}}" |
  python3 -c 'import json, sys; print(json.load(sys.stdin)["token"])')
export IDEM_BENCH_TOKEN
AUTH=(-H "authorization: Bearer $IDEM_BENCH_TOKEN")

ORDERS_COLUMNS='"order_id": "bigint", "ds": "date", "customer_id": "bigint", "status": "text", "amount": "numeric", "updated_at": "timestamptz", "note": "text"'
curl -fsS "${AUTH[@]}" -X PUT "$BASE/tables/orders" -H 'content-type: application/json' \
  -d "{\"columns\": {$ORDERS_COLUMNS}, \"primary_key\": [\"order_id\"], \"cursor\": \"updated_at\"}" >/dev/null
# The anchors' target: the same columns, partitioned the same way.
"${PSQL[@]}" <<'SQL'
create schema bench;
create table bench.orders (order_id bigint not null, ds date not null, customer_id bigint, status text,
  amount numeric, updated_at timestamptz, note text) partition by list (ds);
create unique index on bench.orders (ds, order_id);
SQL

now() { date +%s.%N; }
elapsed() { python3 -c "print(f'{$2 - $1:.3f}')"; }
REPEAT=${IDEM_BENCH_REPEAT:-3}
median() { python3 -c "import statistics,sys; print(f'{statistics.median(map(float, sys.argv[1:])):.3f}')" "$@"; }
# median_of FUNC: runs `FUNC RUN` (RUN = 1..REPEAT, each printing seconds),
# shows every time on stderr, prints the median.
median_of() {
  local times=() run
  for run in $(seq "$REPEAT"); do times+=("$("$1" "$run")"); done
  echo "   ${times[*]}" >&2
  median "${times[@]}"
}
# Each measurement starts from the same state: a fresh checkpoint, so that
# one step's WAL does not land on the next one's clock.
# On a cluster, both also run on each of BENCH_WORKER_URLS (space-separated):
# a VACUUM or CHECKPOINT on the coordinator leaves the workers' own to them.
checkpoint() {
  "${PSQL[@]}" -c checkpoint
  local url
  for url in ${BENCH_WORKER_URLS:-}; do psql "$url" -qAt -c checkpoint; done
}
# settle: what earlier steps wrote vacuumed and analyzed, then a checkpoint:
# otherwise autovacuum, woken by one side's millions of inserts, works
# through the next side's measurement (and the vacuum's WAL with it).
settle() {
  "${PSQL[@]}" -c 'vacuum (analyze)'
  local url
  for url in ${BENCH_WORKER_URLS:-}; do psql "$url" -qAt -c 'vacuum (analyze)'; done
  checkpoint
}
peak_rss_mb() { awk '/VmHWM/ {printf "%.1f", $2 / 1024}' "/proc/$IDEM_PID/status"; }

# Where a side's time goes when both sides share this machine's cores: the
# CPU each process spent, from /proc. Postgres's counts only when it runs on
# this machine: its postmaster is the checkpointer's parent.
if [ -n "${BENCH_POSTMASTER_PIDS:-}" ]; then
  POSTMASTER_PID=$BENCH_POSTMASTER_PIDS
else
  POSTMASTER_PID=$("${PSQL[@]}" -c "select pid from pg_stat_activity where backend_type = 'checkpointer'")
  POSTMASTER_PID=$(awk '$2 == "(postgres)" {print $4}' "/proc/$POSTMASTER_PID/stat" 2>/dev/null || true)
fi
CLOCK_TICKS=$(getconf CLK_TCK)
# ticks_of PID: the clock ticks PID and the children it reaped have spent.
ticks_of() { awk '{print $14 + $15 + $16 + $17}' "/proc/$1/stat" 2>/dev/null || echo 0; }
# cpu_ticks SHELL_PID: "CLIENT IDEM POSTGRES…" ticks so far: the reaped
# children of the shell SHELL_PID (pgbench, wrk: the caller's $BASHPID, read
# before $(cpu_ticks …) forks a shell of its own), every idem process, and each
# Postgres server (its postmaster, each of its processes, and those that
# ended; one figure per server of POSTMASTER_PID, 0 when there is none).
cpu_ticks() {
  local idem=0 pg servers='' pid postmaster
  for pid in $IDEM_PID $(cat "$OUT/more-idem.pids" 2>/dev/null); do
    idem=$((idem + $(ticks_of "$pid")))
  done
  for postmaster in ${POSTMASTER_PID:-0}; do
    pg=0
    if [ "$postmaster" != 0 ]; then
      pg=$(ticks_of "$postmaster")
      for pid in $(pgrep -P "$postmaster"); do pg=$((pg + $(ticks_of "$pid"))); done
    fi
    servers="$servers $pg"
  done
  echo "$(awk '{print $16 + $17}' "/proc/$1/stat") $idem$servers"
}
# cpu_per NAME BEFORE AFTER COUNT: writes $OUT/cpu-NAME.txt, the µs of CPU
# a transaction or request of client, idem and each Postgres server ("-"
# for Postgres when it is not on this machine).
cpu_per() {
  python3 - "$2" "$3" "$4" "$CLOCK_TICKS" "${POSTMASTER_PID:--}" > "$OUT/cpu-$1.txt" <<'PY'
import sys

before, after, count, ticks, postmaster = sys.argv[1:]
spent = [int(a) - int(b) for a, b in zip(after.split(), before.split())]
each = [f"{s * 1e6 / int(ticks) / max(int(count), 1):.0f}" for s in spent]
print(" ".join(each if postmaster != "-" else each[:2] + ["-"]))
PY
}

# pgbench_run NAME SCRIPT [pgbench options]: prints tps p50 p99 failed
# (called in $(...), so that its failure stops the script); CLIENTS
# clients, DURATION seconds, after `settle`; the CPU a transaction in
# $OUT/cpu-pgbench-NAME.txt.
pgbench_run() {
  local name=$1 script=$2 log=$OUT/pgbench-$1-log before me=$BASHPID
  shift 2
  rm -f "$log".*
  settle
  before=$(cpu_ticks "$me")
  if ! pgbench -n -c "$CLIENTS" -j 2 -T "$DURATION" -M prepared -f "$script" "$@" \
      --log --log-prefix="$log" "$DATABASE_URL" > "$OUT/pgbench-$name.txt" 2>&1; then
    echo "bench: pgbench ($name) failed; see $OUT/pgbench-$name.txt:" >&2
    grep -m 5 -i 'error' "$OUT/pgbench-$name.txt" >&2 || tail -n 20 "$OUT/pgbench-$name.txt" >&2
    exit 1
  fi
  cpu_per "pgbench-$name" "$before" "$(cpu_ticks "$me")" \
    "$(sed -n 's/^number of transactions actually processed: \([0-9]*\).*/\1/p' "$OUT/pgbench-$name.txt")"
  python3 bench/pgbench_summary.py "$log" < "$OUT/pgbench-$name.txt"
}
# wrk_multi NAME LUA: one wrk per idem process of BASES, all at once, the
# CLIENTS connections split among them (wrk i gets IDEM_BENCH_WRK=i); prints
# the requests/s of all, the largest p50 and p99, the non-2xx of all, and
# each process's requests/s (comma-separated), after `settle`.
wrk_multi() {
  settle
  local i n=${#BASES[@]} pids=() before me=$BASHPID
  before=$(cpu_ticks "$me")
  for i in $(seq "$n"); do
    IDEM_BENCH_WRK=$i wrk -t 1 -c $(((CLIENTS + n - i) / n)) -d "${DURATION}s" --latency -s "$2" \
      "${BASES[$((i - 1))]}" > "$OUT/wrk-$1-$i.txt" &
    pids+=($!)
  done
  wait "${pids[@]}"
  cpu_per "idem-$1" "$before" "$(cpu_ticks "$me")" "$(cat "$OUT/wrk-$1-"*.txt | awk '/ requests in / {n += $1} END {print n}')"
  for i in $(seq "$n"); do python3 bench/wrk_summary.py < "$OUT/wrk-$1-$i.txt"; done |
    awk '{rps += $1; if ($2 > p50) p50 = $2; if ($3 > p99) p99 = $3; bad += $4; each = each (NR > 1 ? "," : "") $1}
         END {printf "%.0f %.2f %.2f %d %s\n", rps, p50, p99, bad, each}'
}
# wrk_run NAME LUA [THREADS]: prints requests/s p50 p99 non-2xx (environment
# for the script from the caller); CLIENTS connections over THREADS threads
# (default 1), DURATION seconds, after `settle`; the CPU a request in
# $OUT/cpu-idem-NAME.txt.
wrk_run() {
  local before me=$BASHPID
  settle
  before=$(cpu_ticks "$me")
  wrk -t "${3:-1}" -c "$CLIENTS" -d "${DURATION}s" --latency -s "$2" "$BASE" > "$OUT/wrk-$1.txt"
  cpu_per "idem-$1" "$before" "$(cpu_ticks "$me")" "$(awk '/ requests in / {print $1}' "$OUT/wrk-$1.txt")"
  python3 bench/wrk_summary.py < "$OUT/wrk-$1.txt"
}

# copy_anchor CSV: the anchor of a day's PUT, printing its seconds: psql's
# \copy of CSV (orders of the day DS, with a header) into a staging table
# with the partition's CHECK, its unique index, and ATTACH, in one
# transaction, as idem's PUT stages and publishes (dropped first if there).
copy_anchor() {
  "${PSQL[@]}" -c "drop table if exists bench.orders_stage"
  checkpoint
  local t0 t1
  t0=$(now)
  "${PSQL[@]}" <<SQL
begin;
create table bench.orders_stage (order_id bigint not null, ds date not null, customer_id bigint, status text,
  amount numeric, updated_at timestamptz, note text, check (ds is not null and ds = date '$DS'));
\\copy bench.orders_stage from '$1' with (format csv, header)
create unique index on bench.orders_stage (ds, order_id);
alter table bench.orders attach partition bench.orders_stage for values in ('$DS');
commit;
SQL
  t1=$(now)
  elapsed "$t0" "$t1"
}

# put FILE CONTENT_TYPE: PUTs FILE as the day DS of orders, printing its
# seconds; the receipt in $OUT/receipt.json.
put() {
  local t0 t1
  t0=$(now)
  curl -fsS "${AUTH[@]}" -X PUT -T "$1" -H "content-type: $2" "$BASE/partitions/orders/$DS" -o "$OUT/receipt.json"
  t1=$(now)
  elapsed "$t0" "$t1"
}
# post_batches KEY_PREFIX BATCH...: POSTs each batch file (NDJSON orders)
# in merge mode, one after the other on one kept-alive connection (as a
# client library would send them), batch N under the Idempotency-Key
# KEY_PREFIX-N; prints the seconds.
post_batches() {
  local prefix=$1 t0 t1 i=0 args=() batch
  shift
  for batch in "$@"; do
    i=$((i + 1))
    [ "$i" -gt 1 ] && args+=(--next)
    args+=(-fsS "${AUTH[@]}" -o /dev/null -X POST "$BASE/rows?table=orders&mode=merge"
      -H 'content-type: application/x-ndjson' -H "idempotency-key: $prefix-$i" --data-binary "@$batch")
  done
  t0=$(now)
  curl "${args[@]}"
  t1=$(now)
  elapsed "$t0" "$t1"
}
drop_day() { curl -fsS "${AUTH[@]}" -X DELETE "$BASE/partitions/orders/$DS"; }

# measure NAME SETUP FILE TYPE: runs SETUP, a checkpoint, then the timed PUT; median of REPEAT.
measure() {
  local name=$1 setup=$2 file=$3 type=$4 times=()
  for _ in $(seq "$REPEAT"); do
    eval "$setup"
    checkpoint
    times+=("$(put "$file" "$type")")
  done
  echo "== $name: ${times[*]}" >&2
  cat "$OUT/receipt.json" >&2; echo >&2
  median "${times[@]}"
}
