//! A body's intake.

pub mod body;
pub mod decode;
mod decode_blocks;
mod encoding;
pub mod slots;
pub mod spool;
pub mod target;
pub mod ticket;
pub mod turns;
