//! The write path: the steps a write takes, one file each, in the order a
//! request meets them. The tables idem keeps for itself (catalog, ledger,
//! rejects, tokens, idempotency keys, partition contents, history tables)
//! live beside this folder, in `store/`. Imports go one way: files here use
//! their neighbours in `store/`, and nothing beside this folder imports it
//! (`store/mod.rs` only declares it).
//!
//! A `PUT` of a partition:
//! 1. `stage`: the body's rows COPYed into a table of their own, versions of
//!    one key resolved (`duplicates`), the unique index built;
//! 2. `publish`: the staged table swapped in for the live partition, its
//!    content hash (`store::contents`) and ledger row written in the same short
//!    transaction.
//!
//! A `POST` of rows, inside the transaction that also records its key:
//! 1. the rows arrive as arrays (`arrays`, small bodies) or are COPYed into
//!    an incoming table (large ones), versions of one key resolved
//!    (`duplicates`);
//! 2. `merge`: under each touched partition's lock, tombstones delete and
//!    one upsert writes the rows, each partition's delta counted
//!    (`store::contents`); a versions write's versions stored already with other
//!    content are refused or held (`versions`);
//! 3. `closing`: deltas, ledger row and key completion in one statement,
//!    just before the commit.
//!
//! `remove` drops a partition (`DELETE /partitions`, and the days a range's
//! load leaves empty); `janitor` removes stages a crashed process left
//! behind.

pub mod arrays;
pub mod assemble;
pub mod closing;
pub mod duplicates;
pub mod expire;
pub mod history;
mod history_citus;
pub mod incoming;
pub mod janitor;
pub mod merge;
pub mod merge_sql;
pub mod parts;
pub mod publish;
pub mod publish_many;
pub mod remove;
pub mod stage;
pub mod touched;
pub mod versions;
