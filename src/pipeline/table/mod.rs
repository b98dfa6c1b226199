//! A table's own changes.

pub mod definitions;
pub mod drop;
pub mod evolve;
