# shellcheck shell=bash
# A Citus cluster for idem's tests and benchmarks: a coordinator and two
# workers, three Postgres processes on 127.0.0.1 and private ports, each
# with its data in a folder of its own. Sourced (after scripts/pg.sh); not
# run on its own.
#
#   citus_install          Citus's extension installed, or built once from the
#                          source tarball IDEM_CITUS_SRC names; 1 when neither
#                          (then the Citus runs are skipped)
#   citus_start DIR PORT   the coordinator on PORT, the workers on PORT+1 and
#                          PORT+2 (data in DIR/{coordinator,worker1,worker2}),
#                          each loading Citus, the workers registered in the
#                          database `idem`; exports DATABASE_URL (the
#                          coordinator's) and IDEM_CITUS_WORKER_URLS (the
#                          workers' maintenance databases, comma-separated),
#                          both with sslmode=disable
#   citus_start_node DIR PORT  one node started (again) as citus_start
#                          starts it
#   citus_stop DIR         fast shutdown of the three
#
# Build Citus before any Postgres of the run starts: its build installs
# postgresql-server-dev-15, which upgrades the server package to its minor
# version, and a Postgres already running then fails to load the new
# plpgsql.so.

citus_installed() {
  pg_find_bin || return 1
  [ -f "$("$PG_BIN/pg_config" --pkglibdir 2>/dev/null || pg_config --pkglibdir)/citus.so" ]
}

citus_install() {
  if citus_installed; then return 0; fi
  local src=${IDEM_CITUS_SRC:-}
  if [ -z "$src" ] || [ ! -f "$src" ]; then return 1; fi
  if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null 2>&1; then
    echo "idem: building Citus needs root and apt-get (for its build dependencies)" >&2
    return 1
  fi
  echo "idem: building Citus from $src (a few minutes, once)" >&2
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql-server-dev-15 build-essential \
    liblz4-dev libzstd-dev libkrb5-dev libselinux1-dev libxslt1-dev libpam0g-dev \
    libreadline-dev libcurl4-openssl-dev >/dev/null || return 1
  local build
  build=$(mktemp -d /tmp/idem-citus-build.XXXXXX)
  tar xzf "$src" -C "$build" || return 1
  local tree patch_file
  patch_file=$(pwd)/scripts/citus/pg15.20.patch
  tree=$(find "$build" -mindepth 1 -maxdepth 1 -type d | head -n 1)
  # PostgreSQL 15.20 exports have_createdb_privilege(); Citus 13.2.2 defines
  # its own static copy for 15, which then fails to compile.
  if grep -q have_createdb_privilege "$(pg_config --includedir-server)/commands/dbcommands.h" \
      && grep -q 'have_createdb_privilege(void)' "$tree/src/include/pg_version_compat.h"; then
    (cd "$tree" && patch -s -p1 < "$patch_file") || return 1
  fi
  (cd "$tree" && ./configure --without-libcurl >/dev/null && make -s -j"$(nproc)" >/dev/null \
      && make -s install >/dev/null) || { echo "idem: the Citus build failed in $tree" >&2; return 1; }
  rm -rf "$build"
  citus_installed
}

# citus_start_node DIR PORT: one node (again, after a stop), with Citus's
# settings and PG_EXTRA_OPTS.
citus_start_node() {
  # The coordinator opens at most 200 connections to each worker, below
  # the workers' max_connections (300, scripts/pg.sh): past it, Citus
  # waits for one rather than fails. A transaction a worker's crash left
  # prepared holds its locks until the coordinator recovers it: every 5 s
  # rather than Citus's default minute (docs/operations/citus.md).
  local opts="-c shared_preload_libraries=citus -c max_prepared_transactions=200 -c citus.max_shared_pool_size=200 -c citus.recover_2pc_interval=5s ${PG_EXTRA_OPTS:-}"
  PG_EXTRA_OPTS="$opts" PG_DATABASE=idem pg_start "$1" "$2"
}

citus_start() {
  local dir=$1 port=$2 node i
  # The nodes' folders are the postgres user's (pg_start), inside this one.
  mkdir -p "$dir" && chmod 755 "$dir"
  i=0
  for node in coordinator worker1 worker2; do
    citus_start_node "$dir/$node" $((port + i)) || return 1
    i=$((i + 1))
  done
  for i in 0 1 2; do
    psql -h 127.0.0.1 -p $((port + i)) -U postgres -d idem -v ON_ERROR_STOP=1 -qc \
      "create extension if not exists citus" >/dev/null || return 1
  done
  psql -h 127.0.0.1 -p "$port" -U postgres -d idem -v ON_ERROR_STOP=1 -qAt >/dev/null <<SQL || return 1
select citus_set_coordinator_host('127.0.0.1', $port);
select citus_add_node('127.0.0.1', $((port + 1))) where not exists (select from pg_dist_node where nodeport = $((port + 1)));
select citus_add_node('127.0.0.1', $((port + 2))) where not exists (select from pg_dist_node where nodeport = $((port + 2)));
SQL
  # `create extension citus` turned TLS on with a self-signed X.509 v1
  # certificate, which rustls (the tests' own connections) cannot parse.
  export DATABASE_URL="postgres://postgres@127.0.0.1:$port/idem?sslmode=disable"
  export IDEM_CITUS_WORKER_URLS="postgres://postgres@127.0.0.1:$((port + 1))/postgres?sslmode=disable,postgres://postgres@127.0.0.1:$((port + 2))/postgres?sslmode=disable"
}

citus_stop() {
  local dir=$1 node
  for node in coordinator worker1 worker2; do pg_stop "$dir/$node"; done
}

# A port such that it and the next two are free, for citus_start.
citus_free_port() {
  python3 - <<'PY'
import random
import socket

for _ in range(200):
    base = random.randint(20000, 60000)
    sockets = []
    try:
        for port in range(base, base + 3):
            s = socket.socket()
            s.bind(("127.0.0.1", port))
            sockets.append(s)
        print(base)
        break
    except OSError:
        pass
    finally:
        for s in sockets:
            s.close()
PY
}
