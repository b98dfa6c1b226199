-- Loads that outlive a request (POST /loads): the load itself, then one row
-- per staged part. A part's rows wait in a table of their own in
-- idem_staging (named in stage_name) until the load is published, abandoned
-- or expired; publishing moves or copies them into the target partitions in
-- one transaction.
create table idem.staged_loads (
    load_id          uuid primary key,
    table_name       text not null,
    -- {"partitions": [...]} | {"range": {"from", "to"}} | {"table": true}
    target           jsonb not null,
    audits           jsonb not null default '{}',
    status           text not null
                     check (status in ('open', 'published', 'audit_failed', 'abandoned', 'expired')),
    -- who opened it, and the Idempotency-Key it was opened under
    principal        text not null,
    idempotency_key  text not null,
    -- SHA-256 of the request that opened it: the same key with another
    -- request is refused
    fingerprint      text not null,
    token_id         uuid,
    created_at       timestamptz not null default now(),
    expires_at       timestamptz not null,
    audit_report     jsonb,
    -- the publish's receipt, answered again to every later publish
    receipt          jsonb,
    -- {"reason", "token_id"} when published despite a failed audit
    forced           jsonb,
    unique (principal, idempotency_key)
);
create index staged_loads_expiring on idem.staged_loads (expires_at)
    where status in ('open', 'audit_failed');

create table idem.load_parts (
    load_id          uuid not null references idem.staged_loads (load_id) on delete cascade,
    part             integer not null check (part between 1 and 10000),
    stage_name       text not null,
    rows             bigint not null,
    rows_received    bigint not null,
    rejected         bigint not null,
    -- the order-independent hash of the part's rows, as a partition's
    content_sha256   text not null,
    -- what the part adds to each partition: {"ds": {"rows": n, "sum": hex}}
    additions        jsonb not null,
    -- SHA-256 of the table definition its rows were staged for: a publish
    -- under another one is refused (the parts must be sent again)
    definition_sha256 text not null,
    uploaded_at      timestamptz not null default now(),
    primary key (load_id, part)
);

-- A staged load whose audits failed is recorded in the ledger as such.
alter table idem.loads drop constraint loads_status_check;
alter table idem.loads add constraint loads_status_check
    check (status in ('published', 'unchanged', 'rejected', 'failed', 'audit_failed'));
