-- pgbench, small_writes.sh (a): what one 1-row POST with a new key costs
-- Postgres alone. Per transaction: a new key row (the columns of
-- idem.idempotency_keys) and an upsert of one new order into the day :ds,
-- newer-or-equal updated_at wins (idem's merge with a cursor), one commit.
-- :n counts this client's transactions (-D n=0), so key and order_id are new
-- every time: ('pgb-1-' client '-' n) and client * 10^12 + n.
-- (The days in response_body only give it the size of idem's receipt.)
\set n :n + 1
\set id :client_id * 1000000000000 + :n
begin;
insert into bench.keys (principal, key, fingerprint, load_id, response_status, response_body, expires_at)
values ('bench', 'pgb-1-' || cast(:client_id as text) || '-' || cast(:n as text),
        'e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855', gen_random_uuid(), 200,
        '{"load_id": "00000000-0000-0000-0000-000000000000", "table": "orders", "mode": "merge", "ds": "2026-10-13", "partitions": [{"ds": "2026-10-13", "row_count": 1, "content_sha256": "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"}], "rows_received": 1, "rows_written": 1, "inserted": 1, "updated": 0, "deleted": 0, "unchanged": 0, "duplicates": 0, "rejected": 0, "changed": true, "replayed": false}',
        now() + interval '1 day');
insert into bench.orders as o (order_id, ds, customer_id, status, amount, updated_at, note)
values (:id, cast(:ds as date), 1, 'paid', 1.25, (cast(:ds as date) + time '01:02:03') at time zone 'UTC', 'wrk')
on conflict (ds, order_id) do update
   set customer_id = excluded.customer_id, status = excluded.status, amount = excluded.amount,
       updated_at = excluded.updated_at, note = excluded.note
 where excluded.updated_at >= o.updated_at;
commit;
