-- Rows a write refused under the `quarantine` policy, each as it was sent,
-- written in the transaction of the load that refused it (so a load that
-- fails leaves none behind). A replay tries the pending ones again.
create table idem.rejects (
    table_name       text not null references idem.tables (name) on delete cascade,
    load_id          uuid not null,
    -- The record's number in its body (1-based, a CSV header excluded) and
    -- the line it starts on.
    record           bigint not null,
    line             bigint not null,
    -- The partition: a PUT's; a POST row's when its partition column could
    -- be read.
    ds               text,
    -- 'put' or 'post': a PUT's rejects are superseded by the next PUT of
    -- their partition.
    origin           text not null check (origin in ('put', 'post')),
    -- A POST's mode (merge, patch, append, insert_missing), which its
    -- replay writes them by; null for a PUT's (the table's default then).
    mode             text,
    format           text not null check (format in ('ndjson', 'json', 'csv')),
    -- The record byte for byte (null when it was over the record limit, and
    -- so not kept), and for CSV the header it was read under.
    raw              bytea,
    csv_header       bytea,
    -- Every problem: [{"column": …, "message": …}], or one without column.
    errors           jsonb not null,
    idempotency_key  text,
    received_at      timestamptz not null,
    tries            integer not null default 1,
    status           text not null default 'pending'
                     check (status in ('pending', 'replayed', 'expired', 'superseded')),
    -- The load that wrote the row at last (status 'replayed').
    replayed_by      uuid,
    last_tried_at    timestamptz not null,
    primary key (table_name, load_id, record)
);

create index rejects_pending on idem.rejects (table_name, status, received_at);
create index rejects_partition on idem.rejects (table_name, ds) where status = 'pending';

-- How many rows of the body a partition was built from went to the rejects
-- store, so that the same body sent again is answered with the same counts.
alter table idem.partitions add column rejected bigint not null default 0;
