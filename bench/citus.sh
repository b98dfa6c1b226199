#!/usr/bin/env bash
# idem on a Citus cluster (a coordinator and two workers, scripts/citus.sh)
# against idem on one Postgres, both on this machine, in one run:
#   PUT     a day of ROWS orders (CSV) into an empty partition, median of
#           IDEM_BENCH_REPEAT runs (default 3), the day deleted before each;
#   merge   IDEM_BENCH_MERGE_ROWS orders (default 300000) of another day in
#           POSTs of 10,000 rows, merge mode, one after the other on one
#           connection (median of the runs, the day deleted before each);
#   POST    1-row POSTs with new keys at 32 connections for
#           IDEM_BENCH_SECONDS (default 20) seconds (wrk).
# For each: the rate on each side and the ratio cluster/plain, and the CPU
# each process spent (from /proc): the load generator, idem, and each
# Postgres server (the cluster's coordinator and workers apart), in µs per
# 1,000 rows for PUT and merge, per request for POST. The orders table is
# keyed by order_id; on the cluster the server distributes it by that
# column (IDEM_DISTRIBUTION_DEFAULT=key), in IDEM_BENCH_SHARDS shards
# (default 32, Citus's own default; the cluster's citus.shard_count).
#
# usage: bench/citus.sh [ROWS]        (default 1000000)
# Starts both in .idem/bench-citus (removed at exit). Needs Citus installed,
# or IDEM_CITUS_SRC naming its source tarball to build it from (as root).
# Installs wrk with apt-get when it is missing.
set -euo pipefail
cd "$(dirname "$0")/.."
ROWS=${1:-1000000}
MERGE_ROWS=${IDEM_BENCH_MERGE_ROWS:-300000}
BATCH=10000
DS_PUT=2026-10-12 DS_MERGE=2026-10-14 DS_POST=2026-10-15
export IDEM_BENCH_SECONDS=${IDEM_BENCH_SECONDS:-20}
OUT=bench/out
mkdir -p "$OUT"

. scripts/pg.sh
. scripts/citus.sh
if ! citus_install; then
  echo "bench: no Citus here: install it, or set IDEM_CITUS_SRC to its source tarball" >&2
  exit 1
fi
if ! command -v wrk >/dev/null; then
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq wrk >/dev/null
fi

MACHINE="$(nproc) cores ($(awk -F': *' '/^model name/ {print $2; exit}' /proc/cpuinfo)), $(awk '/^MemTotal/ {printf "%.1f GiB RAM", $2 / 1048576}' /proc/meminfo)"
echo "== machine: $MACHINE; load average $(cut -d' ' -f1-3 /proc/loadavg)"

DIR=.idem/bench-citus
stop_servers() {
  pg_stop "$DIR/plain"
  citus_stop "$DIR/cluster"
  rm -rf "$DIR"
}
trap stop_servers EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
stop_servers
mkdir -p "$DIR"

echo "== starting one Postgres and a Citus cluster (a coordinator and two workers)"
PG_DATABASE=idem pg_start "$DIR/plain" "$(pg_free_port)"
PLAIN_URL=$DATABASE_URL
SHARDS=${IDEM_BENCH_SHARDS:-32}
PG_EXTRA_OPTS="-c citus.shard_count=$SHARDS" citus_start "$DIR/cluster" "$(citus_free_port)"
CLUSTER_URL=$DATABASE_URL
postmaster() { head -n 1 "$DIR/$1/postmaster.pid"; }
PLAIN_PIDS=$(postmaster plain)
CLUSTER_PIDS="$(postmaster cluster/coordinator) $(postmaster cluster/worker1) $(postmaster cluster/worker2)"

# side NAME: the three steps on the server DATABASE_URL names (in a
# subshell: common.sh starts an idem of its own, stopped when it ends);
# writes $OUT/citus-NAME.txt.
side() (
  ROWS=$ROWS DS=$DS_PUT
  CLIENTS=32 DURATION=$IDEM_BENCH_SECONDS
  . bench/common.sh
  local me=$BASHPID before
  gen "$OUT/orders-$ROWS.csv" csv 42
  ROWS=$MERGE_ROWS DS=$DS_MERGE gen "$OUT/orders-$MERGE_ROWS-$DS_MERGE.ndjson" ndjson 43
  rm -rf "$OUT/citus-batches" && mkdir -p "$OUT/citus-batches"
  split -l "$BATCH" -d -a 5 "$OUT/orders-$MERGE_ROWS-$DS_MERGE.ndjson" "$OUT/citus-batches/b-"

  echo "== $1: PUT of $ROWS rows (CSV), new partition (x$REPEAT)"
  put_once() { drop_day >/dev/null; checkpoint; put "$OUT/orders-$ROWS.csv" text/csv; }
  before=$(cpu_ticks "$me")
  local t_put
  t_put=$(median_of put_once)
  cpu_per "$1-put" "$before" "$(cpu_ticks "$me")" $((ROWS * REPEAT / 1000))

  echo "== $1: $MERGE_ROWS rows in POSTs of $BATCH, merge mode (x$REPEAT)"
  merge_once() { # merge_once RUN
    curl -fsS "${AUTH[@]}" -X DELETE "$BASE/partitions/orders/$DS_MERGE" >/dev/null
    checkpoint
    post_batches "citus-$1" "$OUT"/citus-batches/b-*
  }
  before=$(cpu_ticks "$me")
  local t_merge
  t_merge=$(median_of merge_once)
  cpu_per "$1-merge" "$before" "$(cpu_ticks "$me")" $((MERGE_ROWS * REPEAT / 1000))

  echo "== $1: 1-row POSTs with new keys, 32 connections, ${DURATION}s"
  local post
  post=$(IDEM_BENCH_ROWS=1 IDEM_BENCH_DS=$DS_POST wrk_run "$1-post" bench/post_unique.lua)
  {
    echo "put $t_put $(cat "$OUT/cpu-$1-put.txt")"
    echo "merge $t_merge $(cat "$OUT/cpu-$1-merge.txt")"
    echo "post $post $(cat "$OUT/cpu-idem-$1-post.txt")"
  } > "$OUT/citus-$1.txt"
)

DATABASE_URL=$PLAIN_URL BENCH_DATABASE_READY=1 BENCH_POSTMASTER_PIDS=$PLAIN_PIDS side plain
# The workers' `idem` databases, where their shards are.
WORKER_URLS=$(echo "$IDEM_CITUS_WORKER_URLS" | tr ',' ' ' | sed 's|/postgres?|/idem?|g')
DATABASE_URL=$CLUSTER_URL BENCH_DATABASE_READY=1 BENCH_POSTMASTER_PIDS=$CLUSTER_PIDS \
  BENCH_WORKER_URLS=$WORKER_URLS IDEM_DISTRIBUTION_DEFAULT=key side cluster

python3 - "$ROWS" "$MERGE_ROWS" "$OUT/citus-plain.txt" "$OUT/citus-cluster.txt" "$MACHINE" "$SHARDS" <<'PY'
import sys

rows, merge_rows, shards = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[6])
def read(path):
    return {line.split()[0]: line.split()[1:] for line in open(path)}
plain, cluster = read(sys.argv[3]), read(sys.argv[4])
print()
print(f"on {sys.argv[5]}; the load generator, idem and every Postgres share its cores; {shards} shards a table on the cluster")
print(f"{'step':42} {'one Postgres':>14} {'Citus, 2 workers':>17} {'cluster/plain':>14}")
def line(name, unit, a, b):
    print(f"{name:42} {a:>11,.0f} {unit:2} {b:>14,.0f} {unit:2} {b / a:>14.2f}")
line(f"PUT of {rows:,} rows (CSV), rows/s", "", rows / float(plain["put"][0]), rows / float(cluster["put"][0]))
line(f"{merge_rows:,} rows merged in POSTs of 10,000, rows/s", "", merge_rows / float(plain["merge"][0]), merge_rows / float(cluster["merge"][0]))
line("1-row POSTs, new keys, c=32, requests/s", "", float(plain["post"][0]), float(cluster["post"][0]))
print(f"{'1-row POSTs, p99 ms':42} {float(plain['post'][2]):>14.2f} {float(cluster['post'][2]):>17.2f}")
bad = int(plain["post"][3]) + int(cluster["post"][3])
print(f"non-2xx answers to the 1-row POSTs: {bad}")
print()
print("CPU (µs per 1,000 rows for PUT and merge, per request for POST):")
print(f"{'step':8} {'side':8} {'client':>8} {'idem':>8} {'Postgres':>9} | {'coordinator':>11} {'worker 1':>9} {'worker 2':>9} {'all nodes':>10}")
for step, skip in (("put", 1), ("merge", 1), ("post", 4)):
    p = plain[step][skip:]
    c = cluster[step][skip:]
    print(f"{step:8} {'plain':8} {p[0]:>8} {p[1]:>8} {p[2]:>9} |")
    nodes = sum(int(x) for x in c[2:5])
    print(f"{step:8} {'cluster':8} {c[0]:>8} {c[1]:>8} {'':>9} | {c[2]:>11} {c[3]:>9} {c[4]:>9} {nodes:>10}")
PY
