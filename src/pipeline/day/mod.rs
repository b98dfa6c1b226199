//! A day replaced.

pub mod put;
pub mod receipt;
pub mod request;
