-- pgbench, small_writes.sh (c): what a replay costs Postgres alone: one read
-- of a completed key row by its primary key, keys drawn at random from the
-- :keys completed keys replay-1 .. replay-:keys.
\set k random(1, :keys)
select response_status, response_body from bench.keys
 where principal = 'bench' and key = 'replay-' || cast(:k as text);
