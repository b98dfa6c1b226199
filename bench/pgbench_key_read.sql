-- pgbench, small_writes.sh (c) and (d): what a replay costs Postgres alone:
-- one read of a completed key row by its primary key, keys drawn at random
-- from the :keys completed keys :prefix1 .. :prefix:keys (-D prefix=replay-).
\set k random(1, :keys)
select response_status, response_body from bench.keys
 where principal = 'bench' and key = :prefix || cast(:k as text);
