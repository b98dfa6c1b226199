-- Partitions of any grain: the registry and the ledger name a partition by
-- its label (`2026-10-12T13`, `2026-10-12`, `2026-10`), which sorts by time
-- within a table (one table has one grain). A day's label is its date as
-- before, so existing rows keep their meaning.
alter table idem.partitions alter column ds type text using to_char(ds, 'YYYY-MM-DD');
alter table idem.loads alter column ds type text using to_char(ds, 'YYYY-MM-DD');
