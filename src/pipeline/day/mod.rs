//! A day replaced (`PUT /partitions/{table}/{ds}`, without or, through
//! `keyed/`, with an Idempotency-Key): what the PUT asks (`request`), what
//! it answers (`receipt`), and its way (`put`): the expected version
//! checked, the table found or guessed and fitted to the body, a re-sent
//! body told by its hash, otherwise the rows staged and swapped in.
//!
//! `put` imports `request` and `receipt`, which import neither.

pub mod put;
pub mod receipt;
pub mod request;
