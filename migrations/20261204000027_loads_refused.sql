-- The console shows a table's last refused load apart from its last
-- published one: the refused loads of a table, newest first, without
-- walking the published ones (a table published every minute has half a
-- million of them in a year). Refusals are few, so the index is small, and
-- a published load's insert never touches it.
create index loads_refused_by_table on idem.loads (table_name, load_id desc)
    where status in ('rejected', 'failed', 'audit_failed');
