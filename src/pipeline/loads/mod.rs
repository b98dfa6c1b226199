//! Loads of several partitions: a load that outlives its requests, opened
//! (`open`), staged part by part (`part`), then audited or published
//! (`run`); or a range or a whole table in one request (`many`). What a
//! load replaces is `target`'s; the end they share, every target partition
//! assembled, audited and swapped in one transaction, is `publish`'s.
//!
//! Each file imports only those before it in this order: `target`,
//! `publish`, `open`, `part`, `run`, `many`.

pub mod many;
pub mod open;
pub mod part;
pub mod publish;
pub mod run;
pub mod target;
