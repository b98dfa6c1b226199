//! Multi-part loads.

pub mod many;
pub mod open;
pub mod part;
pub mod publish;
pub mod run;
pub mod target;
