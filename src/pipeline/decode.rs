//! The blocking half of every write: a body read record by record, each good
//! row encoded as binary COPY data and handed to the async side in chunks
//! through a small channel (so memory stays bounded), each bad row counted
//! and, up to a limit, listed.

use std::io::{self, BufReader};
use std::ops::ControlFlow;

use bytes::Bytes;
use sha2::{Digest, Sha256};
use tokio::io::AsyncRead;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio_util::io::SyncIoBridge;
use uuid::Uuid;

use crate::error::{ApiError, ApiResult};
use crate::http::body::classify_read_error;
use crate::ingest::encode::{COPY_BINARY_HEADER, COPY_BINARY_TRAILER, DELETED_FIELD};
use crate::ingest::formats::ReadError;
use crate::ingest::{
    read_records, BodyFormat, ContentHash, EncodeOptions, ErrorLog, RawRecord, RecordSink,
    RowEncoder, RowError,
};
use crate::schema::TableDef;
use crate::store::stage::StageError;

/// COPY data is handed over in chunks of about this size.
pub const CHUNK_BYTES: usize = 256 * 1024;
/// Chunks in flight between the decoder and COPY (bounds memory).
const CHUNKS_IN_FLIGHT: usize = 8;

/// What the decoder saw of the whole body.
pub struct Decoded {
    pub rows_received: u64,
    /// Rows marked `"_deleted": true`.
    pub tombstones: u64,
    /// Whether two rows may share a row id (so duplicates must be resolved);
    /// always true when not watched.
    pub maybe_repeated: bool,
    /// The content hash of the rows as received (before duplicates collapse).
    pub input_hash: ContentHash,
    /// SHA-256 of `hash_prefix` and the body.
    pub body_sha256: String,
    pub errors: ErrorLog,
    pub read_error: Option<ReadError>,
}

pub struct Decoding {
    pub decoder: JoinHandle<Decoded>,
    /// Binary COPY data; ends with an error item when the body is refused,
    /// so that a COPY reading it aborts instead of committing half a body.
    pub chunks: mpsc::Receiver<io::Result<Bytes>>,
}

/// Starts decoding `body` on a blocking thread. With `watch_repeats`, it
/// also tells whether two rows may share a row id (see `Decoded`).
pub fn spawn_decoder(
    def: TableDef,
    options: EncodeOptions,
    watch_repeats: bool,
    load_id: Uuid,
    format: BodyFormat,
    body: Box<dyn AsyncRead + Send + Unpin>,
    hash_prefix: Sha256,
) -> Decoding {
    let (tx, chunks) = mpsc::channel(CHUNKS_IN_FLIGHT);
    let reader = HashingReader {
        inner: SyncIoBridge::new(body),
        hash: hash_prefix,
    };
    let decoder = tokio::task::spawn_blocking(move || {
        decode(
            &def,
            options,
            watch_repeats,
            load_id,
            format,
            BufReader::with_capacity(CHUNK_BYTES, reader),
            tx,
        )
    });
    Decoding { decoder, chunks }
}

/// Waits for the decoder and turns what it refused into the answer.
pub async fn finish(decoder: JoinHandle<Decoded>) -> ApiResult<Decoded> {
    let decoded = decoder
        .await
        .map_err(|e| ApiError::Internal(anyhow::anyhow!("the decoder failed: {e}")))?;
    match &decoded.read_error {
        Some(ReadError::Io(e)) => return Err(classify_read_error(e)),
        Some(ReadError::Malformed(e)) => return Err(ApiError::MalformedBody(Box::new(e.clone()))),
        None => {}
    }
    if !decoded.errors.is_empty() {
        return Err(ApiError::BadRows {
            count: decoded.errors.count,
            errors: decoded.errors.listed.clone(),
        });
    }
    Ok(decoded)
}

/// A COPY's failure, once the decoder's verdict is known: a source failure
/// was the decoder's doing and `finish` has reported it; anything else is the
/// database's.
pub fn copy_result<T>(copied: Result<T, StageError>) -> ApiResult<T> {
    match copied {
        Ok(t) => Ok(t),
        Err(StageError::Database(e)) => Err(ApiError::from_db(e)),
        Err(StageError::Source(e)) => Err(ApiError::Internal(anyhow::anyhow!(
            "row source failed: {e}"
        ))),
    }
}

/// Watches for two rows with one row id, in bounded memory: up to `LIMIT`
/// ids (by a 16-byte prefix) are remembered; past that, or on a prefix seen
/// twice, it answers "maybe", and the database resolves duplicates the
/// thorough way. A body of distinct rows under the limit skips that work.
struct RepeatWatch {
    seen: std::collections::HashSet<[u8; 16]>,
    maybe: bool,
    /// Off when the caller resolves duplicates in the database anyway.
    on: bool,
}

impl RepeatWatch {
    const LIMIT: usize = 200_000;

    fn new(on: bool) -> Self {
        RepeatWatch {
            seen: Default::default(),
            maybe: !on,
            on,
        }
    }

    fn see(&mut self, row_id: &[u8; 32]) {
        if self.maybe || !self.on {
            return;
        }
        let prefix: [u8; 16] = row_id[..16].try_into().expect("16 of 32 bytes");
        if self.seen.len() >= Self::LIMIT || !self.seen.insert(prefix) {
            self.maybe = true;
            self.seen = Default::default();
        }
    }

    fn maybe_repeated(&self) -> bool {
        self.maybe
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

/// The blocking half: reads every record, encodes the good ones into COPY
/// text chunks, counts and lists the bad ones. Once a row is bad nothing
/// more is sent (the load will be refused), but reading goes on so the
/// answer can list every bad row.
fn decode<R: io::Read>(
    def: &TableDef,
    options: EncodeOptions,
    watch_repeats: bool,
    load_id: Uuid,
    format: BodyFormat,
    mut reader: BufReader<HashingReader<R>>,
    chunks: mpsc::Sender<io::Result<Bytes>>,
) -> Decoded {
    struct Encoding<'d> {
        encoder: RowEncoder<'d>,
        def: &'d TableDef,
        out: Vec<u8>,
        errors: ErrorLog,
        input_hash: ContentHash,
        rows_received: u64,
        tombstones: u64,
        tombstones_allowed: bool,
        repeats: RepeatWatch,
        chunks: mpsc::Sender<io::Result<Bytes>>,
        receiver_gone: bool,
    }

    impl RecordSink for Encoding<'_> {
        fn header(&mut self, names: &[&str]) -> Result<(), RowError> {
            for (i, name) in names.iter().enumerate() {
                let tombstone = self.tombstones_allowed && *name == DELETED_FIELD;
                if self.def.column(name).is_none() && !tombstone {
                    return Err(RowError {
                        line: 1,
                        record: 0,
                        column: Some(name.to_string()),
                        message: "the header names a column this table does not have".into(),
                    });
                }
                if names[..i].contains(name) {
                    return Err(RowError {
                        line: 1,
                        record: 0,
                        column: Some(name.to_string()),
                        message: "the header names this column twice".into(),
                    });
                }
            }
            Ok(())
        }

        fn record(&mut self, record: Result<RawRecord<'_>, RowError>) -> ControlFlow<()> {
            self.rows_received += 1;
            match record {
                Err(e) => self.errors.push(e),
                Ok(record) => {
                    if let Some(row) = self
                        .encoder
                        .encode(&record, &mut self.out, &mut self.errors)
                    {
                        self.input_hash.add(&row.row_hash);
                        self.tombstones += row.deleted as u64;
                        self.repeats.see(&row.row_id);
                    }
                }
            }
            if !self.errors.is_empty() {
                self.out.clear();
            } else if self.out.len() >= CHUNK_BYTES {
                let chunk = Bytes::from(std::mem::replace(
                    &mut self.out,
                    Vec::with_capacity(CHUNK_BYTES + 4096),
                ));
                if self.chunks.blocking_send(Ok(chunk)).is_err() {
                    // COPY has failed; its error is the one to report.
                    self.receiver_gone = true;
                    return ControlFlow::Break(());
                }
            }
            ControlFlow::Continue(())
        }
    }

    let mut sink = Encoding {
        encoder: RowEncoder::new(def, options.clone(), load_id),
        def,
        out: Vec::with_capacity(CHUNK_BYTES + 4096),
        errors: ErrorLog::default(),
        input_hash: ContentHash::default(),
        rows_received: 0,
        tombstones: 0,
        tombstones_allowed: options.tombstones,
        repeats: RepeatWatch::new(watch_repeats),
        chunks,
        receiver_gone: false,
    };
    sink.out.extend_from_slice(COPY_BINARY_HEADER);
    let read_error = read_records(format, &mut reader, &mut sink).err();
    if read_error.is_none() && sink.errors.is_empty() && !sink.receiver_gone {
        sink.out.extend_from_slice(COPY_BINARY_TRAILER);
        let _ = sink
            .chunks
            .blocking_send(Ok(Bytes::from(std::mem::take(&mut sink.out))));
    } else {
        // Makes the COPY abort instead of committing a partial stage.
        let _ = sink
            .chunks
            .blocking_send(Err(io::Error::other("the body was refused")));
    }
    Decoded {
        rows_received: sink.rows_received,
        tombstones: sink.tombstones,
        maybe_repeated: sink.repeats.maybe_repeated(),
        input_hash: sink.input_hash,
        body_sha256: hex::encode(reader.into_inner().hash.finalize()),
        errors: sink.errors,
        read_error,
    }
}
