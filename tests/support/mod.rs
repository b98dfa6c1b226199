//! What both test binaries share (`tests/api` and `tests/faults` include it
//! with `#[path = "../support/mod.rs"] mod support;`; it is no target of its
//! own): one Postgres starter, one spawner of `idem` processes, one set of
//! fixtures and the HTTP helpers. What only one binary needs stays in it.
//! Each binary uses a part of it, so the rest is dead code there.
#![allow(dead_code)]

mod citus;
mod fixtures;
mod http;
mod postgres;
mod process;
mod python;

// Only the Citus suite starts a cluster of a test's own.
#[allow(unused_imports)]
pub use citus::*;
pub use fixtures::*;
pub use http::*;
pub use postgres::*;
pub use process::*;
// Only the API suite writes columnar files.
#[allow(unused_imports)]
pub use python::*;
