//! Rows merged.

pub mod post;
pub mod receipt;
pub mod replay;
pub mod request;
