//! Turns to write: a write holds database connections only while its
//! client keeps up. The start of a body is read before the write asks for
//! its turn, so a client that trickles its body waits without one.

use tokio::io::AsyncReadExt;

use super::body::classify_read_error;
use super::body::BodyReader;
use crate::pipeline::error::WriteResult;

/// How much of a body must have arrived (or all of it, if less) before its
/// write takes a turn: enough that a client too slow to send it holds no
/// turn, little enough to hold in memory for every waiting request.
pub const ARRIVAL_BYTES: u64 = 64 * 1024;

/// `body` once its first `ARRIVAL_BYTES` (or all of it) have arrived, the
/// bytes read put back in front. The body's own limits hold meanwhile: a
/// client too slow for its minimum rate is refused here, holding nothing.
pub async fn arrived(mut body: BodyReader) -> WriteResult<BodyReader> {
    let mut head = Vec::new();
    (&mut body)
        .take(ARRIVAL_BYTES)
        .read_to_end(&mut head)
        .await
        .map_err(|e| classify_read_error(&e))?;
    Ok(Box::new(std::io::Cursor::new(head).chain(body)))
}
