-- pgbench, streams.sh (b): what one 100-row `versions` POST with a new key
-- costs Postgres alone: a new key row and an INSERT ... ON CONFLICT DO
-- NOTHING of 100 new versions (key and cursor) into the day :ds of
-- bench.events (unique on day, order id and updated_at), one commit.
\set n :n + 1
\set base (:client_id * 10000000000 + :n) * 100
begin;
insert into bench.keys (principal, key, fingerprint, load_id, response_status, response_body, expires_at)
values ('bench', 'pgb-v-' || cast(:client_id as text) || '-' || cast(:n as text),
        'e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855', gen_random_uuid(), 200,
        '{"load_id": "00000000-0000-0000-0000-000000000000", "table": "events", "mode": "versions", "ds": "2026-10-17", "partitions": [{"ds": "2026-10-17", "row_delta": 100}], "rows_received": 100, "rows_written": 100, "inserted": 100, "updated": 0, "deleted": 0, "unchanged": 0, "already_present": 0, "conflicts": 0, "duplicates": 0, "rejected": 0, "changed": true, "replayed": false}',
        now() + interval '1 day');
insert into bench.events (order_id, ds, customer_id, status, amount, updated_at, note)
select cast(:base as bigint) + g, cast(:ds as date), g, 'paid', g + 0.25, (cast(:ds as date) + time '01:02:03') at time zone 'UTC', 'wrk'
  from generate_series(1, 100) g
on conflict (ds, order_id, updated_at) do nothing;
commit;
