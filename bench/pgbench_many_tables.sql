-- pgbench, small_writes.sh (f): what one 1-row append to one of 1,000
-- tables, with a new key, costs Postgres alone. Per transaction (one
-- statement, so one implicit transaction): bench.append_event, a PL/pgSQL
-- function, adds a new key row (the columns of idem.idempotency_keys) and
-- inserts one event into bench.events_:t (t random in 1..:tables, the table
-- named by dynamic SQL, as a producer per event type picks its table; -D
-- tables=N, the count small_writes.sh made).
-- :n counts this client's transactions (-D n=0), so key and event_id are
-- new every time: ('pgb-f-' client '-' n) and client * 10^12 + n.
\set n :n + 1
\set id :client_id * 1000000000000 + :n
\set t random(1, :tables)
select bench.append_event(:t, 'pgb-f-' || cast(:client_id as text) || '-' || cast(:n as text),
                          :id, cast(:ds as date));
