//! idem: an HTTP server that lands data in Postgres idempotently.
//!
//! The layers, from the top down; each module imports only its own layer
//! and the ones below it, and no import circle closes anywhere (both
//! checked by `tests/api/layout.rs`, which reads this order as `LAYERS`):
//!
//! ```text
//! main, cli, client   the binary: the command line, the client's commands
//! app        settings -> Store, Pipeline, AppState -> Router; serve
//! http       one module per resource: headers in, problem+json out
//! pipeline   the way of a write: body -> decode -> stage -> publish | merge
//! config, metrics, log_writer
//!            the settings (they name ingest's limits), the counters http
//!            and pipeline count into, the log's writer thread
//! store      every SQL statement: idem's own tables, and write/ for a write's steps
//! wire       the JSON forms of answers and statuses, which http serializes
//!            and the client deserializes
//! ingest, render
//!            pure: body formats -> checked values -> COPY tuples and hashes;
//!            render, its mirror: stored rows (COPY tuples) -> JSON, Parquet, Arrow
//! schema     table definitions, policies and safe changes
//! names, ids, period, access, problem, idempotency, channel, versions, binary_copy
//!            validated names, load and token ids and principals, grains,
//!            grants, error codes, the Idempotency-Key, channel offsets, the
//!            expected version, COPY framing
//! ```
//!
//! The client commands that send files to a server are the binary's
//! (`src/cli.rs`, `src/client/`), not this library's: no part of the server
//! can reach them.

/// Scopes, table patterns, grants; token secrets and their hashes.
pub mod access;
/// Wiring and serving: the router, graceful shutdown, background tasks.
pub mod app;
/// Postgres's binary COPY framing: header, tuples, trailer.
pub mod binary_copy;
/// Channels: their names, offset kinds and the order of offsets.
pub mod channel;
/// The server's settings, from flags and environment, validated once.
pub mod config;
/// The HTTP edge: one module per resource, errors as problem+json.
pub mod http;
/// The Idempotency-Key, the request it binds and the answer it keeps.
pub mod idempotency;
/// LoadId, TokenId and Principal: what loads, tokens and callers are known by.
pub mod ids;
/// Bodies to checked values: formats, cells, encodings, hashes, inference.
pub mod ingest;
/// Log lines written by a thread of their own.
pub mod log_writer;
/// The Prometheus registry http and pipeline count into.
pub mod metrics;
/// TableName and ColumnName: validated once, quoted in one place.
pub mod names;
/// Grains and the period a partition holds.
pub mod period;
/// The way of a write, from body to published partition or merged rows.
pub mod pipeline;
/// ProblemCode: every stable error code.
pub mod problem;
/// Stored rows to bytes: a GET's JSON, Parquet and Arrow (ingest's mirror).
pub mod render;
/// Table definitions, policies and safe schema changes.
pub mod schema;
/// Every SQL statement: idem's tables and the write path's steps.
pub mod store;
/// What a writer expects of a day's version (If-Match, If-None-Match).
pub mod versions;
/// The JSON forms of idem's answers and its statuses: one type each, for
/// the server and the client alike.
pub mod wire;
