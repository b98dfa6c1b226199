-- pgbench, streams.sh (a): what one 1-row channel POST costs Postgres alone:
-- small_writes.sh (a)'s transaction (a key row, a 1-row upsert into the day
-- :ds; bench/pgbench_one_row.sql) plus the update of the client's offset row
-- (bench.channels, one per client, made before the run).
\set n :n + 1
\set id :client_id * 1000000000000 + :n
begin;
update bench.channels set committed_offset = cast(:n as text), load_id = gen_random_uuid(),
       committed_at = now(), commits = commits + 1
 where name = 'pgb-' || cast(:client_id as text);
insert into bench.keys (principal, key, fingerprint, load_id, response_status, response_body, expires_at)
values ('bench', 'pgb-ch-' || cast(:client_id as text) || '-' || cast(:n as text),
        'e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855', gen_random_uuid(), 200,
        '{"load_id": "00000000-0000-0000-0000-000000000000", "table": "orders", "mode": "merge", "ds": "2026-10-16", "partitions": [{"ds": "2026-10-16", "row_count": 1, "content_sha256": "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"}], "rows_received": 1, "rows_written": 1, "inserted": 1, "updated": 0, "deleted": 0, "unchanged": 0, "duplicates": 0, "rejected": 0, "changed": true, "replayed": false}',
        now() + interval '1 day');
insert into bench.orders as o (order_id, ds, customer_id, status, amount, updated_at, note)
values (:id, cast(:ds as date), 1, 'paid', 1.25, (cast(:ds as date) + time '01:02:03') at time zone 'UTC', 'wrk')
on conflict (ds, order_id) do update
   set customer_id = excluded.customer_id, status = excluded.status, amount = excluded.amount,
       updated_at = excluded.updated_at, note = excluded.note
 where excluded.updated_at >= o.updated_at;
commit;
