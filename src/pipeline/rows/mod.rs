//! Rows merged into a table: a `POST /rows` (`post`: its body decoded,
//! landed and merged in the caller's transaction) and a table's pending
//! rejects written again (`replay`, merged the same way). What they ask is
//! `request`'s, what they answer `receipt`'s. Which transaction, key,
//! channel or batch a POST is written in is `keyed/`'s.
//!
//! `request` and `receipt` import neither each other nor the rest; `post`
//! and `replay` import them (a replay runs `post`'s merge).

pub mod post;
pub mod receipt;
pub mod replay;
pub mod request;
