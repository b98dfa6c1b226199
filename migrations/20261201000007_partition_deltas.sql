-- Writers of one partition run side by side. Each records the change it
-- made to the partition's row count and content sum as a row of its own
-- here, in its own transaction, instead of updating the partition's
-- registry row (which would make them wait for each other until commit).
-- A partition's live count and content are its registry row plus its
-- deltas; deltas are folded into the registry row now and then.
create table idem.partition_deltas (
    table_name  text not null,
    ds          text not null,
    load_id     uuid not null,
    row_delta   bigint not null,
    sum_delta   bytea not null check (length(sum_delta) = 32),
    written_at  timestamptz not null default now(),
    primary key (table_name, ds, load_id)
);

-- An update keeps the row hash it replaced in `_prev_hash` (set from the
-- locked, latest version of the row), so a writer learns exactly what it
-- took out of the content, whatever committed before it.
do $$
declare t record;
begin
    for t in select name from idem.tables loop
        execute format('alter table idem_data.%I add column if not exists "_prev_hash" bytea', t.name);
    end loop;
end $$;
