//! Rows merged.

pub mod post;
pub mod replay;
