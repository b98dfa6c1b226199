-- idem's own tables live in schema idem; user tables in idem_data, their
-- partitions in idem_parts, loads being staged in idem_staging.
create schema if not exists idem;
create schema if not exists idem_data;
create schema if not exists idem_parts;
create schema if not exists idem_staging;

-- The catalog: one row per user table, its validated definition as JSON.
create table idem.tables (
    name        text primary key,
    definition  jsonb not null,
    inferred    boolean not null default false,
    created_at  timestamptz not null default now(),
    updated_at  timestamptz not null default now()
);

-- Every safe schema change applied by PUT /tables, in order.
create table idem.schema_changes (
    id          bigserial primary key,
    table_name  text not null references idem.tables (name) on delete cascade,
    changes     jsonb not null,
    applied_at  timestamptz not null default now()
);

-- The partitions registry: what each live partition holds. Changed in the
-- same transaction as the partition swap, so it never disagrees with it.
create table idem.partitions (
    table_name      text not null references idem.tables (name) on delete cascade,
    ds              date not null,
    row_count       bigint not null,
    -- order-independent hash of the rows as stored (after duplicates collapsed)
    content_sha256  text not null,
    -- the 256-bit sum of the rows' digests behind content_sha256, so that a
    -- merge can add and remove rows without reading the partition
    content_sum     bytea not null,
    -- SHA-256 of the body it was built from (with its format and the table
    -- definition), so that the same body sent again is known before decoding
    body_sha256     text not null,
    rows_received   bigint not null,
    load_id         uuid not null,
    published_at    timestamptz not null default now(),
    primary key (table_name, ds)
);

-- The loads ledger: one row per accepted or refused write.
create table idem.loads (
    load_id          uuid primary key,
    table_name       text not null,
    ds               date,
    mode             text not null,
    status           text not null check (status in ('published', 'unchanged', 'rejected', 'failed')),
    rows_received    bigint not null default 0,
    rows_written     bigint not null default 0,
    duplicates       bigint not null default 0,
    rejected         bigint not null default 0,
    content_sha256   text,
    changed          boolean not null default false,
    idempotency_key  text,
    error            jsonb,
    started_at       timestamptz not null,
    finished_at      timestamptz not null default now()
);
create index loads_by_table_ds on idem.loads (table_name, ds, started_at desc);
