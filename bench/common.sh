# shellcheck shell=bash
# Shared by the benchmark scripts (sourced, after `cd` to the project root and
# with ROWS and DS set): a Postgres, a release build, test data, a running
# idem with an `orders` table, and timing helpers.
set -euo pipefail
OUT=bench/out
mkdir -p "$OUT"

if [ -z "${DATABASE_URL:-}" ]; then
  . scripts/pg.sh
  PG_DATABASE=idem_bench pg_start .idem/bench-pg "${IDEM_BENCH_PG_PORT:-54339}"
fi
PSQL=(psql "$DATABASE_URL" -v ON_ERROR_STOP=1 -qAt)

echo "== building release"
cargo build --release --quiet

gen() { # gen FILE FORMAT SEED
  [ -s "$1" ] || python3 ../shared/bench/gen_orders.py "$ROWS" --ds "$DS" --format "$2" --seed "$3" > "$1"
}

# A clean slate: the benchmark owns this database.
"${PSQL[@]}" -c "set client_min_messages = warning; drop schema if exists idem, idem_data, idem_parts, idem_staging, bench cascade; drop table if exists _sqlx_migrations"

PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
target/release/idem serve --listen "127.0.0.1:$PORT" > "$OUT/idem.log" 2>&1 &
IDEM_PID=$!
trap 'kill $IDEM_PID 2>/dev/null || true; if [ -n "${PG_BIN:-}" ]; then pg_stop .idem/bench-pg; fi' EXIT
BASE="http://127.0.0.1:$PORT"
for _ in $(seq 100); do curl -fs "$BASE/readyz" >/dev/null 2>&1 && break; sleep 0.1; done

ORDERS_COLUMNS='"order_id": "bigint", "ds": "date", "customer_id": "bigint", "status": "text", "amount": "numeric", "updated_at": "timestamptz", "note": "text"'
curl -fsS -X PUT "$BASE/tables/orders" -H 'content-type: application/json' \
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
checkpoint() { "${PSQL[@]}" -c checkpoint; }
peak_rss_mb() { awk '/VmHWM/ {printf "%.1f", $2 / 1024}' "/proc/$IDEM_PID/status"; }
