-- A table's schema history: each change names the load that caused it
-- (a write under `schema: evolve`), or none (a declaration).
alter table idem.schema_changes add column load_id uuid;
create index schema_changes_table on idem.schema_changes (table_name, id);
