//! A table's own changes, outside its rows: fitted to a body under `schema:
//! evolve` before the body is written (`evolve`, used by a day's PUT, a POST
//! and a replay), dropped (`drop`, `DELETE /tables/{table}`), its
//! partitions past retention refused and dropped (`retention`); and the
//! definitions this process remembers (`definitions`).
//!
//! Its files do not import each other; they import only `intake/`.

pub mod definitions;
pub mod drop;
pub mod evolve;
pub mod retention;
