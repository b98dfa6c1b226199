//! The blocking half of every write: a body read record by record, each good
//! row encoded as binary COPY data and handed to the async side in chunks
//! through a small channel (so memory stays bounded), each bad row counted
//! and, up to a limit, listed.

use std::io::{self, BufReader};

use bytes::Bytes;
use sha2::{Digest, Sha256};
use tokio::io::AsyncReadExt;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio_util::io::SyncIoBridge;

use super::body::BodyReader;
use super::body::{classify_read_error, CHUNK_BYTES};
use super::decode_blocks;
use super::encoding::Encoding;
pub use super::encoding::{DecodeJob, Decoded, Quarantine, RepeatCheck};
use crate::ingest::formats::ReadError;
use crate::ingest::BadRow;
use crate::pipeline::error::{WriteError, WriteResult};
use crate::store::{StoreError, StoreResult};

/// Chunks in flight between the decoder and COPY (bounds memory).
const CHUNKS_IN_FLIGHT: usize = 8;

pub struct Decoding {
    pub decoder: JoinHandle<Decoded>,
    /// Binary COPY data; ends with an error item when the body is refused,
    /// so that a COPY reading it aborts instead of committing half a body.
    pub chunks: mpsc::Receiver<io::Result<Bytes>>,
}

/// Starts decoding `body` on a blocking thread.
pub fn spawn_decoder(job: DecodeJob, body: BodyReader) -> Decoding {
    let (tx, chunks) = mpsc::channel(CHUNKS_IN_FLIGHT);
    let reader = HashingReader {
        inner: SyncIoBridge::new(body),
        hash: job.hash_prefix.clone(),
    };
    let decoder = tokio::task::spawn_blocking(move || {
        let reader = BufReader::with_capacity(CHUNK_BYTES, reader);
        decode(&job, reader, Some(tx), CHUNK_BYTES + 4096).0
    });
    Decoding { decoder, chunks }
}

/// A body decoded whole on the calling task, or being decoded on a
/// blocking thread.
pub enum Decode {
    /// The whole body's verdict, and its COPY data if it was good.
    Whole(Box<Decoded>, Option<Bytes>),
    Streaming(Decoding),
}

/// Decodes a body of at most `whole_up_to` bytes (after gunzip) on this
/// task, all at once: a few hundred rows take less than handing them to
/// another thread would. A larger body goes to `spawn_decoder`, the bytes
/// read so far first.
pub async fn decode_small_or_spawn(
    job: DecodeJob,
    body: BodyReader,
    whole_up_to: usize,
) -> WriteResult<Decode> {
    Ok(match read_small(body, whole_up_to).await? {
        BodyRead::Whole(body) => {
            let (decoded, copy) = decode_whole(&job, &body);
            Decode::Whole(Box::new(decoded), copy)
        }
        BodyRead::Large(body) => Decode::Streaming(spawn_decoder(job, body)),
    })
}

/// A body read whole, or too large for that.
pub enum BodyRead {
    Whole(Vec<u8>),
    /// The body still to read (the bytes read so far first).
    Large(BodyReader),
}

/// Reads `body` whole when it is at most `whole_up_to` bytes.
pub async fn read_small(mut body: BodyReader, whole_up_to: usize) -> WriteResult<BodyRead> {
    let mut head = Vec::new();
    let limit = u64::try_from(whole_up_to)
        .unwrap_or(u64::MAX)
        .saturating_add(1);
    (&mut body)
        .take(limit)
        .read_to_end(&mut head)
        .await
        .map_err(|e| classify_read_error(&e))?;
    if head.len() > whole_up_to {
        return Ok(BodyRead::Large(Box::new(
            std::io::Cursor::new(head).chain(body),
        )));
    }
    Ok(BodyRead::Whole(head))
}

/// Decodes a whole (small) body on this task: its verdict, and its COPY
/// data if it was good.
pub fn decode_whole(job: &DecodeJob, body: &[u8]) -> (Decoded, Option<Bytes>) {
    let reader = HashingReader {
        inner: body,
        hash: job.hash_prefix.clone(),
    };
    // The rows' binary form is about the size of their text, plus the
    // system columns (about a hundred bytes a row).
    let out_capacity = body.len() + body.len() / 2 + 4096;
    decode(job, BufReader::new(reader), None, out_capacity)
}

/// Waits for the decoder and turns what it refused into the answer.
pub async fn finish(decoder: JoinHandle<Decoded>) -> WriteResult<Decoded> {
    verdict(decoder.await?)
}

/// The decoder's verdict: the body's refusal, if it was refused.
pub fn verdict(mut decoded: Decoded) -> WriteResult<Decoded> {
    let rows_received = decoded.rows_received;
    match &decoded.read_error {
        Some(ReadError::Io(e)) => return Err(classify_read_error(e).into()),
        Some(ReadError::Spool(e)) => {
            return Err(super::spool::spool_failed(io::Error::new(
                e.kind(),
                e.to_string(),
            )))
        }
        Some(ReadError::Malformed(e)) => {
            let error = decoded
                .header_refusal
                .clone()
                .unwrap_or_else(|| BadRow::from(e.clone()));
            return Err(WriteError::Malformed {
                error: Box::new(error),
                rows_received,
            });
        }
        Some(ReadError::RecordTooLarge { line, max }) => {
            return Err(WriteError::RecordTooLarge {
                line: *line,
                max: *max,
                rows_received,
            })
        }
        Some(ReadError::ChunkTooLarge { chunk, bytes, max }) => {
            return Err(WriteError::ChunkTooLarge {
                chunk: *chunk,
                bytes: *bytes,
                max: *max,
            })
        }
        None => {}
    }
    if !decoded.wants.is_empty() {
        return Err(WriteError::Internal(anyhow::anyhow!(
            "a body that needs the table changed was taken as decoded"
        )));
    }
    if let Some(e) = decoded.spool_error.take() {
        return Err(super::spool::spool_failed(e));
    }
    if !decoded.errors.is_empty() {
        return Err(WriteError::BadRows {
            count: decoded.errors.count,
            rows_received,
            errors: decoded.errors.listed.clone(),
        });
    }
    Ok(decoded)
}

/// A write to a table nobody declared that stores no row makes no table,
/// and rejects are kept only for a table that exists: its bad rows, set
/// aside by a quarantine, refuse it as under `bad_rows: reject`.
pub fn refuse_rejects_without_table(decoded: &Decoded) -> WriteResult<()> {
    match decoded.rejects.as_ref().filter(|r| r.count() > 0) {
        Some(rejects) => Err(WriteError::BadRows {
            count: rejects.count(),
            rows_received: decoded.rows_received,
            errors: decoded.set_aside.clone(),
        }),
        None => Ok(()),
    }
}

/// A COPY's failure, once the decoder's verdict is known: a source failure
/// was the decoder's doing and `finish` has reported it; anything else is the
/// database's.
pub fn copy_result<T>(copied: StoreResult<T>) -> WriteResult<T> {
    match copied {
        Err(StoreError::RowSource(e)) => Err(WriteError::Internal(
            anyhow::Error::new(e).context("the row source failed, yet the decoder did not say why"),
        )),
        other => Ok(other?),
    }
}

/// Takes the SHA-256 of everything read through it.
struct HashingReader<R> {
    inner: R,
    hash: Sha256,
}

impl<R: io::Read> io::Read for HashingReader<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.hash.update(&buf[..n]);
        Ok(n)
    }
}

/// The blocking half: reads every record through an `Encoding` sink, which
/// sends the COPY data to `chunks` or, without, keeps it whole (returned
/// when the body was good).
fn decode<R: io::Read>(
    job: &DecodeJob,
    mut reader: BufReader<HashingReader<R>>,
    chunks: Option<mpsc::Sender<io::Result<Bytes>>>,
    out_capacity: usize,
) -> (Decoded, Option<Bytes>) {
    let (mut sink, read_error) = match chunks {
        Some(chunks) if decode_blocks::can_split(job) => {
            decode_blocks::decode_on_two_threads(job, &mut reader, chunks)
        }
        chunks => Encoding::read_whole_body(job, chunks, out_capacity, &mut reader),
    };
    let whole = sink.close(read_error.as_ref());
    let body_sha256 = hex::encode(reader.into_inner().hash.finalize());
    let decoded = sink.into_decoded(read_error, body_sha256);
    (decoded, whole)
}
