//! idem: an HTTP server that lands data in Postgres idempotently.
//!
//! HTTP (`http`) → decode and validate (`ingest`) → stage and publish
//! (`pipeline`, `store`). The client commands that send files to a server
//! are the binary's (`src/cli.rs`, `src/client/`), not this library's: no
//! part of the server can reach them.

pub mod access;
pub mod app;
pub mod binary_copy;
pub mod config;
pub mod http;
pub mod idempotency;
pub mod ingest;
pub mod log_writer;
pub mod metrics;
pub mod names;
pub mod period;
pub mod pipeline;
pub mod problem;
pub mod schema;
pub mod store;
pub mod versions;
