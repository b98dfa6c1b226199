//! A day's PUT.

pub mod put;
