//! Black-box tests: the real server on a random port, over real TCP, each
//! test against a fresh database on a real Postgres (`DATABASE_URL`, which
//! `scripts/test` provides).

mod audits;
mod auth;
mod cdc;
mod channels;
mod cli;
mod cli_backfill_get;
mod cli_channels;
mod cli_commands;
mod cli_loads;
mod cli_put_post;
mod columnar;
mod columnar_out;
mod concurrency;
mod container;
mod drop_table;
mod duplicates;
mod encoding;
mod evolve;
mod exact_values;
mod examples;
mod golden_answers;
mod grains;
mod helpers;
mod history;
mod layout;
mod ledger;
mod limits;
mod load_races;
mod loads;
mod many_tables;
mod numeric_limits;
mod ops;
mod partitions;
mod patch;
mod plain_tables;
mod policies;
mod processes;
mod quarantine;
mod readme;
mod refusals;
mod rejects_replay;
mod reports;
mod reserved_names;
mod reverts;
mod round_trip;
mod rows;
#[path = "../support/mod.rs"]
mod support;
mod tables;
mod versions;
mod wide_tables;
mod wire;
