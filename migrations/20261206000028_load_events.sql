-- Loads announced. Every committed load (a ledger row published or
-- unchanged) sends NOTIFY idem_loads with its ledger row, from a trigger in
-- its own transaction: a load rolled back is never announced. Once
-- committed it gets a position in idem.load_events, handed out by one
-- announcer at a time (any idem process; see store/load_events.rs) in the
-- order it finds them: a position is never handed out below one already
-- committed, so a client that resumes after the last position it saw
-- (GET /loads/events, Last-Event-ID) misses nothing.
alter table idem.loads add column announced boolean not null default true;
alter table idem.loads alter column announced set default false;
create index loads_to_announce on idem.loads (finished_at, load_id)
    where not announced and status in ('published', 'unchanged');

create table idem.load_events (
    position    bigserial primary key,
    load_id     uuid not null unique,
    table_name  text not null
);
create index load_events_by_table on idem.load_events (table_name, position);

create function idem.announce_load() returns trigger language plpgsql as $$
begin
    -- The row without its error (a committed load has none): well under
    -- NOTIFY's 8000-byte payload.
    perform pg_notify('idem_loads', json_build_object(
        'load_id', new.load_id, 'table', new.table_name, 'ds', new.ds,
        'mode', new.mode, 'status', new.status, 'rows_written', new.rows_written,
        'content_sha256', new.content_sha256, 'finished_at', new.finished_at)::text);
    return null;
end
$$;

create trigger loads_announced after insert on idem.loads
    for each row when (new.status in ('published', 'unchanged'))
    execute function idem.announce_load();
