//! Keyed writes.

pub mod answer;
pub mod batch;
pub mod batch_queue;
pub mod channel;
pub mod key;
