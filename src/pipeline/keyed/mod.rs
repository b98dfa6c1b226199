//! A write made once by its key: an Idempotency-Key around a day's PUT, a
//! POST or a replay (`key`), a channel's offset around a POST (`channel`);
//! small POSTs written together in one transaction, their keys or offsets
//! claimed together (`batch`; what waits for it: `batch_queue`; a POST
//! made ready for it, its body decoded before any transaction:
//! `predecode`); and the answer a keyed write stores and gives (`answer`).
//!
//! Each file imports only those before it in this order: `answer`,
//! `batch_queue`, `predecode`, `batch`, `channel`, `key`.

pub mod answer;
pub mod batch;
pub mod batch_queue;
pub mod channel;
pub mod key;
pub mod predecode;
