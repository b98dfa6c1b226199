//! idem: an HTTP server that lands data in Postgres idempotently.
//!
//! HTTP (`http`) → decode and validate (`ingest`) → stage and publish
//! (`pipeline`, `store`). `client` is the other side: the commands that
//! send files to a server.

pub mod access;
pub mod app;
pub mod binary_copy;
pub mod client;
pub mod config;
pub mod error;
pub mod http;
pub mod ingest;
pub mod log_writer;
pub mod metrics;
pub mod names;
pub mod period;
pub mod pipeline;
pub mod schema;
pub mod store;
