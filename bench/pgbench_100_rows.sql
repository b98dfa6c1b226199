-- pgbench, small_writes.sh (b): what one 100-row POST with a new key costs
-- Postgres alone. Per transaction: a new key row and one INSERT ... SELECT
-- of 100 new orders into the day :ds (made by generate_series, as idem's
-- unnest of its arrays would give them), upserted newer-or-equal, one commit.
-- :n counts this client's transactions (-D n=0): key ('pgb-100-' client '-'
-- n) and order ids (client * 10^10 + n) * 100 + 1..100 are new every time.
-- (The days in response_body only give it the size of idem's receipt.)
\set n :n + 1
\set base (:client_id * 10000000000 + :n) * 100
begin;
insert into bench.keys (principal, key, fingerprint, load_id, response_status, response_body, expires_at)
values ('bench', 'pgb-100-' || cast(:client_id as text) || '-' || cast(:n as text),
        'e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855', gen_random_uuid(), 200,
        '{"load_id": "00000000-0000-0000-0000-000000000000", "table": "orders", "mode": "merge", "ds": "2026-10-14", "partitions": [{"ds": "2026-10-14", "row_count": 100, "content_sha256": "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"}], "rows_received": 100, "rows_written": 100, "inserted": 100, "updated": 0, "deleted": 0, "unchanged": 0, "duplicates": 0, "rejected": 0, "changed": true, "replayed": false}',
        now() + interval '1 day');
insert into bench.orders as o (order_id, ds, customer_id, status, amount, updated_at, note)
select cast(:base as bigint) + g, cast(:ds as date), g, 'paid', g + 0.25, (cast(:ds as date) + time '01:02:03') at time zone 'UTC', 'wrk'
  from generate_series(1, 100) g
on conflict (ds, order_id) do update
   set customer_id = excluded.customer_id, status = excluded.status, amount = excluded.amount,
       updated_at = excluded.updated_at, note = excluded.note
 where excluded.updated_at >= o.updated_at;
commit;
