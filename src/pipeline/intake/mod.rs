//! What every write does with its body before it writes: read it within its
//! limits (`body`), wait for it to arrive and for a turn to write (`turns`,
//! `slots`), keep it on disk when it is read twice (`spool`), find or guess
//! the table it goes to (`target`), decode it to COPY data (`decode`, its
//! record sink `encoding`, a large NDJSON body on two threads
//! `decode_blocks`); and the load's ticket in the ledger (`ticket`).
//!
//! Each file imports only those before it in this order: `body`, `slots`,
//! `turns`, `spool`, `ticket`, `encoding`, `decode_blocks`, `decode`,
//! `target`. Nothing here is a write: no `impl Pipeline`.

pub mod body;
pub mod decode;
mod decode_blocks;
mod encoding;
pub mod slots;
pub mod spool;
pub mod target;
pub mod ticket;
pub mod turns;
