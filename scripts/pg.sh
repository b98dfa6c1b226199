# shellcheck shell=bash
# Starts a local Postgres for idem's scripts when DATABASE_URL is not given.
# Sourced by scripts/serve, scripts/test and bench/*.sh; not run on its own.
#
#   pg_start DATA_DIR PORT   initdb (once) and start a server on 127.0.0.1:PORT,
#                            exporting DATABASE_URL; as root it runs as `postgres`
#   pg_stop DATA_DIR         fast shutdown

pg_find_bin() {
  if command -v initdb >/dev/null 2>&1 && command -v pg_ctl >/dev/null 2>&1; then
    PG_BIN=$(dirname "$(command -v pg_ctl)")
    return 0
  fi
  for dir in /usr/lib/postgresql/*/bin; do
    if [ -x "$dir/initdb" ] && [ -x "$dir/pg_ctl" ]; then PG_BIN=$dir; return 0; fi
  done
  return 1
}

pg_install() {
  if pg_find_bin; then return 0; fi
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "idem: initdb not found; installing PostgreSQL with apt-get" >&2
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql >/dev/null
    pg_find_bin && return 0
  fi
  cat >&2 <<'MSG'
idem: the PostgreSQL server binaries (initdb, pg_ctl, postgres) are not on PATH.
Install them, e.g. `sudo apt-get install postgresql` (Debian/Ubuntu) or
`brew install postgresql@15` (macOS), or set DATABASE_URL to a running server.
MSG
  return 1
}

# Runs a command as the postgres user when we are root (Postgres refuses root).
pg_as_owner() {
  if [ "$(id -u)" = 0 ]; then
    su postgres -s /bin/sh -c "$(printf '%q ' "$@")"
  else
    "$@"
  fi
}

pg_start() {
  local data_dir=$1 port=$2
  pg_install || return 1
  mkdir -p "$data_dir"
  data_dir=$(cd "$data_dir" && pwd)
  if [ "$(id -u)" = 0 ]; then chown postgres: "$data_dir"; chmod 700 "$data_dir"; fi
  if [ ! -f "$data_dir/PG_VERSION" ]; then
    pg_as_owner "$PG_BIN/initdb" -D "$data_dir" -U postgres --auth=trust -E UTF8 --locale=C.UTF-8 >/dev/null \
      || pg_as_owner "$PG_BIN/initdb" -D "$data_dir" -U postgres --auth=trust -E UTF8 --locale=C >/dev/null \
      || return 1
  fi
  if ! pg_as_owner "$PG_BIN/pg_ctl" -D "$data_dir" status >/dev/null 2>&1; then
    pg_as_owner "$PG_BIN/pg_ctl" -D "$data_dir" -w -t 60 -l "$data_dir/server.log" \
      -o "-c listen_addresses=127.0.0.1 -c port=$port -c unix_socket_directories='$data_dir' -c max_connections=300 ${PG_EXTRA_OPTS:-}" \
      start >/dev/null || { tail -n 20 "$data_dir/server.log" >&2; return 1; }
  fi
  export DATABASE_URL="postgres://postgres@127.0.0.1:$port/${PG_DATABASE:-idem}"
  # The maintenance database always exists; create ours if it does not.
  if ! psql -h 127.0.0.1 -p "$port" -U postgres -d postgres -Atqc \
      "select 1 from pg_database where datname = '${PG_DATABASE:-idem}'" | grep -q 1; then
    psql -h 127.0.0.1 -p "$port" -U postgres -d postgres -qc "create database \"${PG_DATABASE:-idem}\"" >/dev/null
  fi
}

# pg_stop DIR [MODE]: a fast shutdown, or MODE's (`immediate`: as a crash).
pg_stop() {
  local data_dir=$1 mode=${2:-fast}
  pg_find_bin || return 0
  [ -f "$data_dir/PG_VERSION" ] || return 0
  pg_as_owner "$PG_BIN/pg_ctl" -D "$data_dir" -m "$mode" -w stop >/dev/null 2>&1 || true
}

# A TCP port nobody listens on, chosen by the kernel.
pg_free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}
