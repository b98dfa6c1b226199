-- A ledger entry's finish is the wall-clock moment it is written, not the
-- start of the transaction that writes it (now()): that moment can come
-- before the load's own start, which idem takes once the request arrives.
alter table idem.loads alter column finished_at set default clock_timestamp();
