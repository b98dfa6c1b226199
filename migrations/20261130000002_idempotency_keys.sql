-- Idempotency keys of POST /rows and keyed PUT /partitions. A row is written
-- in the same transaction as the write it guards, so a committed row always
-- means a completed write; a request in flight holds the (uncommitted) row,
-- and the primary key makes a second request with the same key wait for it.
create table idem.idempotency_keys (
    principal        text not null,
    key              text not null,
    fingerprint      text not null,
    load_id          uuid,
    response_status  integer not null,
    response_body    jsonb not null,
    created_at       timestamptz not null default now(),
    expires_at       timestamptz not null,
    primary key (principal, key)
);
create index idempotency_keys_by_expiry on idem.idempotency_keys (expires_at);
