//! The JSON forms of idem's answers, one type each, which the server
//! serializes and the client (`src/client/`) deserializes: the field names,
//! their order on the wire and the fields left out when zero, false or
//! none are written here once, and both sides are checked by the compiler.
//!
//! An answer that goes out as a JSON value (a keyed write's, stored and
//! given again; a staged load's view; a key's record) has its members in
//! name order, whatever order its type declares. The types only ever
//! answered that way declare their fields in name order too, so that both
//! serializations agree (their tests hold them to it).
//!
//! The statuses read back from idem's own tables (`status`) are here too,
//! since the answers carry them.

/// A channel and the offset it committed.
pub mod channels;
/// What became of an Idempotency-Key.
pub mod keys;
/// Loads of several partitions: the requests that open and publish one, a
/// staged load's view, a part's receipt, a load's receipt, the ledger's
/// loads.
pub mod loads;
/// Problem bodies (`application/problem+json`).
pub mod problem;
/// The receipts of writes: a day's PUT, a POST of rows, a replay of
/// rejects, a table's drop.
pub mod receipts;
/// A reject a `quarantine` policy kept.
pub mod rejects;
/// The statuses of loads, staged loads, rejects and keys: as the wire says
/// them and as idem's tables keep them.
pub mod status;
/// Tables and their partitions, as listed.
pub mod tables;

/// For counts shown only when there is something to count.
fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// For flags shown only when they are set.
fn is_false(flag: &bool) -> bool {
    !flag
}
