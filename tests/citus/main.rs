//! The Citus suite: `scripts/test` runs it on a coordinator and two workers
//! (`scripts/citus.sh`), each test on a database of its own made on every
//! node with the extension, the workers registered. Not run on a plain
//! Postgres (`test = false`; `scripts/test` says SKIPPED when there is no
//! Citus to run it on).

// This suite uses a part of the shared support, as each suite does.
#[allow(unused_imports)]
#[path = "../support/mod.rs"]
mod support;

mod connect;
