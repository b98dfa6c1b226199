//! A table's own changes.

pub mod drop;
pub mod evolve;
