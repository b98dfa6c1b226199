-- Versions of a key that one body repeated and that were not written:
-- under `duplicates: keep_one` the ones that lost to the kept version
-- (`kept_row_hash`), under `hold` every version of the key. Written in the
-- transaction that publishes (PUT) or merges (POST) the load.
create table idem.duplicates (
    table_name     text not null references idem.tables (name) on delete cascade,
    load_id        uuid not null,
    ds             text not null,
    -- The key's row id, the same for each of its versions.
    row_id         bytea not null,
    -- The key's values, e.g. {"order_id": 5}.
    key            jsonb not null,
    -- The version's place among the key's versions (by the keep_one rule:
    -- largest cursor, then smallest row hash), 1 being the winner's.
    version        integer not null,
    -- The version's values, as the table holds them (what GET would give).
    row            jsonb not null,
    row_hash       bytea not null,
    -- The version written instead, under keep_one; null under hold (and
    -- reject, whose versions are held when bad rows are quarantined).
    kept_row_hash  bytea,
    policy         text not null check (policy in ('keep_one', 'hold', 'reject')),
    logged_at      timestamptz not null default now(),
    primary key (table_name, load_id, row_id, version)
);
