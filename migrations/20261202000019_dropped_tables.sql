-- `DELETE /tables/{table}` keeps the ledger of the table it drops: each of
-- its entries names the drop (itself a ledger entry, mode 'drop') that
-- removed what it wrote. Null while the table the load wrote still stands.
alter table idem.loads add column dropped_by uuid;
create index loads_by_table_live on idem.loads (table_name) where dropped_by is null;
