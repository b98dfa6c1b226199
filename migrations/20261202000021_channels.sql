-- Channels (POST /rows?channel=&offset=): per principal, like Idempotency-Keys,
-- the offset each channel last committed. A channel's row is locked (and made,
-- if new) first in the transaction of a write on it and updated in that same
-- transaction, so a committed offset always means its rows were written; a
-- second producer on the channel waits on the row.
create table idem.channels (
    principal         text not null,
    name              text not null,
    -- integer | lsn | text, fixed by the first commit
    offset_kind       text not null check (offset_kind in ('integer', 'lsn', 'text')),
    -- in the kind's written form (integer without leading zeros, LSN as X/Y
    -- in upper-case hex); null only in the uncommitted row of a first write
    committed_offset  text,
    -- the table and load of the last commit
    table_name        text,
    load_id           uuid,
    committed_at      timestamptz,
    commits           bigint not null default 0,
    primary key (principal, name)
);
