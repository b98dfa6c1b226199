//! Spool files: a body kept on disk (`IDEM_SPOOL_DIR`) to be read again, as
//! an unnamed temporary file that is gone once closed. A spool disk that is
//! full is the server's transient condition, not the client's mistake nor a
//! bug: the write answers `503 spool_full` with `Retry-After`.

use std::io;
use std::path::Path;

use sha2::{Digest, Sha256};
use tokio::io::{AsyncReadExt, AsyncSeekExt, AsyncWriteExt};

use super::body::BodyReader;
use super::body::{classify_read_error, CHUNK_BYTES};
use crate::pipeline::error::{WriteError, WriteResult};

/// What became of a body sent to the spool.
pub(crate) enum Spooled {
    /// All of it is in the file, rewound.
    Kept(tokio::fs::File),
    /// The spool's disk is full: the body is left where the spool stopped,
    /// what was read of it hashed (see `hash_rest`).
    Full { error: io::Error, rest: BodyReader },
}

/// Whether a spool failed for want of room (a full disk, a quota, a file
/// size limit): a condition that passes, unlike a broken disk.
pub fn is_full(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::StorageFull | io::ErrorKind::QuotaExceeded | io::ErrorKind::FileTooLarge
    )
}

/// The error a failed spool gives the write: `spool_full` for want of room,
/// otherwise idem's own failure.
pub fn spool_failed(e: io::Error) -> WriteError {
    if is_full(&e) {
        WriteError::SpoolFull(e)
    } else {
        WriteError::Internal(anyhow::Error::new(e).context("the spool file failed"))
    }
}

/// Copies the body to an unnamed temporary file in `dir` (the system's
/// temporary folder when `None`), feeding every byte read to `hash`, and
/// returns the file rewound; or, when the disk is full, what is left of
/// the body.
pub(crate) async fn spool_body(
    mut body: BodyReader,
    hash: &mut Sha256,
    dir: Option<&Path>,
) -> WriteResult<Spooled> {
    let file = match dir {
        Some(dir) => tempfile::tempfile_in(dir),
        None => tempfile::tempfile(),
    };
    let mut file = match file {
        Ok(file) => tokio::fs::File::from_std(file),
        Err(error) if is_full(&error) => return Ok(Spooled::Full { error, rest: body }),
        Err(e) => return Err(spool_failed(e)),
    };
    let mut buf = vec![0u8; CHUNK_BYTES];
    loop {
        let n = body
            .read(&mut buf)
            .await
            .map_err(|e| classify_read_error(&e))?;
        if n == 0 {
            break;
        }
        hash.update(&buf[..n]);
        if let Err(error) = file.write_all(&buf[..n]).await {
            return full_or_failed(error, body);
        }
    }
    let ended = async {
        file.flush().await?;
        file.rewind().await
    };
    match ended.await {
        Ok(_) => Ok(Spooled::Kept(file)),
        Err(error) => full_or_failed(error, body),
    }
}

fn full_or_failed(error: io::Error, rest: BodyReader) -> WriteResult<Spooled> {
    if is_full(&error) {
        Ok(Spooled::Full { error, rest })
    } else {
        Err(spool_failed(error))
    }
}

/// Feeds the rest of the body to `hash`, keeping none of it.
pub(crate) async fn hash_rest(mut rest: BodyReader, hash: &mut Sha256) -> WriteResult<()> {
    let mut buf = vec![0u8; CHUNK_BYTES];
    loop {
        let n = rest
            .read(&mut buf)
            .await
            .map_err(|e| classify_read_error(&e))?;
        if n == 0 {
            return Ok(());
        }
        hash.update(&buf[..n]);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn want_of_room_is_told_from_a_broken_disk() {
        // ENOSPC, EDQUOT, EFBIG (Linux's numbers)
        for code in [28, 122, 27] {
            let e = io::Error::from_raw_os_error(code);
            assert!(is_full(&e), "{e}");
            assert_eq!(spool_failed(e).code().as_str(), "spool_full");
        }
        let eio = io::Error::from_raw_os_error(5);
        assert!(!is_full(&eio));
        assert_eq!(spool_failed(eio).code().as_str(), "internal");
    }
}
