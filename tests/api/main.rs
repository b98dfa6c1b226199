//! Black-box tests: the real server on a random port, over real TCP, each
//! test against a fresh database on a real Postgres (`DATABASE_URL`, which
//! `scripts/test` provides).

mod auth;
mod cli;
mod concurrency;
mod duplicates;
mod encoding;
mod evolve;
mod grains;
mod helpers;
mod ledger;
mod limits;
mod numeric_limits;
mod ops;
mod partitions;
mod patch;
mod policies;
mod processes;
mod quarantine;
mod refusals;
mod reports;
mod round_trip;
mod rows;
mod tables;
mod wire;
