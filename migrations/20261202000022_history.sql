-- Tables declared with "history": "scd2" keep every version of each key in
-- a companion table of the same name in this schema (see store/history.rs).
create schema if not exists idem_history;
