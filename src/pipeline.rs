//! The way of one `PUT /partitions/{table}/{ds}`: decode → validate → stage
//! → publish.
//!
//! Decoding runs on a blocking thread and hands binary COPY data to the async
//! side in chunks through a small channel, so memory stays bounded whatever
//! the body's size, and COPY runs while the body is still being decoded.
//!
//! When the partition exists already, the body may well be a re-send of the
//! one it was built from (a retried job), so the body is first spooled to a
//! temporary file while its SHA-256 is taken: if it is the same body (same
//! bytes, format and table definition), nothing is decoded or staged. Bodies
//! that differ in bytes but hold the same rows are found out at publish time,
//! by the order-independent content hash, and change nothing either.

use std::io::{self, BufReader};
use std::ops::ControlFlow;

use bytes::Bytes;
use chrono::{NaiveDate, Utc};
use serde::Serialize;
use sha2::{Digest, Sha256};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncSeekExt, AsyncWriteExt};
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tokio_util::io::SyncIoBridge;
use uuid::Uuid;

use crate::app::AppState;
use crate::error::{ApiError, ApiResult};
use crate::http::body::{classify_read_error, BodySource};
use crate::ingest::encode::{COPY_BINARY_HEADER, COPY_BINARY_TRAILER};
use crate::ingest::formats::ReadError;
use crate::ingest::infer::infer_table;
use crate::ingest::{
    read_records, BodyFormat, ContentHash, ErrorLog, RawRecord, RecordSink, RowEncoder, RowError,
};
use crate::schema::{TableDef, DEFAULT_PARTITION_COLUMN};
use crate::store::catalog::Declared;
use crate::store::ledger::{LoadEntry, LoadStatus};
use crate::store::publish::{publish, BodyFacts, Conditions, Current, Published};
use crate::store::stage::{self, StageError, Staged};

/// COPY text is handed over in chunks of about this size.
const CHUNK_BYTES: usize = 256 * 1024;
/// Chunks in flight between the decoder and COPY (bounds memory).
const CHUNKS_IN_FLIGHT: usize = 8;
/// How much of a body is sampled to infer an undeclared table's columns.
const INFER_SAMPLE_BYTES: usize = 1 << 20;

/// The answer to an accepted write (API.md "A write's answer").
#[derive(Clone, Debug, Serialize)]
pub struct Receipt {
    pub load_id: Uuid,
    pub table: String,
    pub ds: NaiveDate,
    pub mode: &'static str,
    pub rows_received: u64,
    pub rows_written: u64,
    pub duplicates: u64,
    pub rejected: u64,
    /// Rows in the partition after this write.
    pub row_count: u64,
    pub content_sha256: String,
    pub changed: bool,
    pub replayed: bool,
}

pub struct PutPartition {
    pub table: String,
    pub ds: NaiveDate,
    pub body: BodySource,
    pub conditions: Conditions,
}

/// What the decoder saw of the whole body.
struct Decoded {
    rows_received: u64,
    /// The content hash of the rows as received (before duplicates collapse).
    input_hash: ContentHash,
    /// SHA-256 of the body (see `body_hash_prefix`).
    body_sha256: String,
    errors: ErrorLog,
    read_error: Option<ReadError>,
}

#[tracing::instrument(skip_all, fields(table = %req.table, ds = %req.ds, load_id))]
pub async fn put_partition(state: AppState, req: PutPartition) -> ApiResult<Receipt> {
    let load_id = Uuid::now_v7();
    tracing::Span::current().record("load_id", tracing::field::display(load_id));
    let started_at = Utc::now();
    let PutPartition {
        table,
        ds,
        body,
        conditions,
    } = req;
    let store = &state.store;

    let live = store.current_partition(&table, ds).await?;
    conditions.check(live.as_ref().map(|c| c.content_sha256.as_str()))?;

    let mut reader = body.reader;
    let def = match store.table(&table).await? {
        Some(def) => def,
        None if state.settings.auto_create_tables => {
            let mut head = Vec::with_capacity(64 * 1024);
            (&mut reader)
                .take(INFER_SAMPLE_BYTES as u64)
                .read_to_end(&mut head)
                .await
                .map_err(|e| classify_read_error(&e))?;
            let def = infer_table(&table, DEFAULT_PARTITION_COLUMN, body.format, &head)?;
            reader = Box::new(std::io::Cursor::new(head).chain(reader));
            match store.declare(&def, true).await? {
                Declared::Created(d) | Declared::Unchanged(d) | Declared::Changed(d, _) => d,
            }
        }
        None => return Err(ApiError::TableNotFound(table)),
    };

    let format = body.format;
    let body_hash = body_hash_prefix(format, &def);
    let source: Box<dyn AsyncRead + Send + Unpin> = match &live {
        None => reader,
        Some(live) => {
            let (spooled, body_sha256) = spool_body(reader, body_hash.clone(), &state).await?;
            if body_sha256 == live.body_sha256 {
                return same_body(&state, load_id, &def.name, ds, live, started_at).await;
            }
            Box::new(spooled)
        }
    };

    let (chunks_tx, chunks_rx) = mpsc::channel::<io::Result<Bytes>>(CHUNKS_IN_FLIGHT);
    let bridge = HashingReader {
        inner: SyncIoBridge::new(source),
        hash: body_hash,
    };
    let decode_def = def.clone();
    let decoder = tokio::task::spawn_blocking(move || {
        decode(
            &decode_def,
            ds,
            load_id,
            format,
            BufReader::with_capacity(CHUNK_BYTES, bridge),
            chunks_tx,
        )
    });

    let mut conn = store.pool().acquire().await?;
    let stage_name = stage::staging_name(load_id);
    stage::claim(&mut conn, &stage_name).await?;
    let result = async {
        let staged = stage::stage_rows(
            &mut conn,
            &def,
            ds,
            &stage_name,
            ReceiverStream::new(chunks_rx),
        )
        .await;
        let decoded = join_decoder(decoder).await?;
        check_decoded(&decoded)?;
        Ok::<_, ApiError>((staged_or_error(staged)?, decoded))
    }
    .await;

    let receipt = match result {
        Ok((staged, decoded)) => {
            let mut content = decoded.input_hash;
            for dropped in &staged.dropped_row_hashes {
                content.remove(dropped);
            }
            let mut receipt = Receipt {
                load_id,
                table: def.name.clone(),
                ds,
                mode: "replace",
                rows_received: decoded.rows_received,
                rows_written: staged.rows,
                duplicates: staged.dropped_row_hashes.len() as u64,
                rejected: 0,
                row_count: staged.rows,
                content_sha256: content.hex(),
                changed: true,
                replayed: false,
            };
            let mut entry = ledger_entry(&receipt, LoadStatus::Published, started_at);
            let body = BodyFacts {
                sha256: &decoded.body_sha256,
                rows_received: decoded.rows_received,
            };
            match publish(
                &mut conn,
                &def,
                ds,
                &stage_name,
                body,
                &conditions,
                &mut entry,
            )
            .await
            {
                Ok(Published::Swapped) => Ok(receipt),
                Ok(Published::Unchanged) => {
                    receipt.changed = false;
                    receipt.rows_written = 0;
                    Ok(receipt)
                }
                Err(e) => Err(e),
            }
        }
        Err(e) => Err(e),
    };

    // The stage is gone after a swap; otherwise it is dropped here. Either
    // way the claim ends, and a connection that cannot say so is closed.
    if let Err(e) = stage::release(&mut conn, &stage_name).await {
        tracing::warn!(error = %e, "could not release the stage; closing its connection");
        let _ = conn.close().await;
    }

    if let Err(e) = &receipt {
        record_refusal(&state, load_id, &def.name, ds, started_at, e).await;
    }
    receipt
}

fn ledger_entry<'a>(
    receipt: &'a Receipt,
    status: LoadStatus,
    started_at: chrono::DateTime<Utc>,
) -> LoadEntry<'a> {
    LoadEntry {
        load_id: receipt.load_id,
        table: &receipt.table,
        ds: Some(receipt.ds),
        mode: receipt.mode,
        status,
        rows_received: receipt.rows_received,
        rows_written: receipt.rows_written,
        duplicates: receipt.duplicates,
        rejected: receipt.rejected,
        content_sha256: Some(&receipt.content_sha256),
        changed: receipt.changed,
        error: None,
        started_at,
    }
}

/// Refused and failed loads go to the ledger too, with what was wrong.
async fn record_refusal(
    state: &AppState,
    load_id: Uuid,
    table: &str,
    ds: NaiveDate,
    started_at: chrono::DateTime<Utc>,
    error: &ApiError,
) {
    let (status, rejected, detail) = match error {
        ApiError::BadRows { count, errors } => (
            LoadStatus::Rejected,
            *count,
            serde_json::json!({"code": error.code(), "errors": errors}),
        ),
        e if e.status().is_client_error() => (
            LoadStatus::Rejected,
            0,
            serde_json::json!({"code": e.code(), "detail": e.to_string()}),
        ),
        e => (LoadStatus::Failed, 0, serde_json::json!({"code": e.code()})),
    };
    let entry = LoadEntry {
        load_id,
        table,
        ds: Some(ds),
        mode: "replace",
        status,
        rows_received: 0,
        rows_written: 0,
        duplicates: 0,
        rejected,
        content_sha256: None,
        changed: false,
        error: Some(detail),
        started_at,
    };
    if let Err(e) = state.store.record_load(&entry).await {
        tracing::warn!(error = ?e, "could not record a refused load");
    }
}

async fn join_decoder(decoder: tokio::task::JoinHandle<Decoded>) -> ApiResult<Decoded> {
    decoder
        .await
        .map_err(|e| ApiError::Internal(anyhow::anyhow!("the decoder failed: {e}")))
}

fn check_decoded(decoded: &Decoded) -> ApiResult<()> {
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
    Ok(())
}

/// After the decoder's verdict: a source failure was the decoder's doing
/// and has been reported by `check_decoded`; anything else is the database's.
fn staged_or_error(staged: Result<Staged, StageError>) -> ApiResult<Staged> {
    match staged {
        Ok(s) => Ok(s),
        Err(StageError::Database(e)) => Err(ApiError::from_db(e)),
        Err(StageError::Source(e)) => Err(ApiError::Internal(anyhow::anyhow!(
            "row source failed: {e}"
        ))),
    }
}

/// The body hash covers what the bytes mean too: their format and the
/// table definition they are read against.
fn body_hash_prefix(format: BodyFormat, def: &TableDef) -> Sha256 {
    let mut hash = Sha256::new();
    hash.update(b"idem-body-v1\0");
    hash.update(format!("{format:?}\0").as_bytes());
    hash.update(serde_json::to_vec(def).expect("a definition serializes"));
    hash.update(b"\0");
    hash
}

/// A body that is the very one the live partition was built from: nothing
/// to do but say so.
async fn same_body(
    state: &AppState,
    load_id: Uuid,
    table: &str,
    ds: NaiveDate,
    live: &Current,
    started_at: chrono::DateTime<Utc>,
) -> ApiResult<Receipt> {
    let row_count = live.row_count as u64;
    let rows_received = live.rows_received as u64;
    let receipt = Receipt {
        load_id,
        table: table.to_string(),
        ds,
        mode: "replace",
        rows_received,
        rows_written: 0,
        duplicates: rows_received.saturating_sub(row_count),
        rejected: 0,
        row_count,
        content_sha256: live.content_sha256.clone(),
        changed: false,
        replayed: false,
    };
    state
        .store
        .record_load(&ledger_entry(&receipt, LoadStatus::Unchanged, started_at))
        .await?;
    Ok(receipt)
}

/// Copies the body to an unnamed temporary file (gone when closed), taking
/// its SHA-256 on the way, and returns the file rewound.
async fn spool_body(
    mut body: Box<dyn AsyncRead + Send + Unpin>,
    mut hash: Sha256,
    state: &AppState,
) -> ApiResult<(tokio::fs::File, String)> {
    let file = match &state.settings.spool_dir {
        Some(dir) => tempfile::tempfile_in(dir),
        None => tempfile::tempfile(),
    }
    .map_err(|e| ApiError::Internal(anyhow::anyhow!("cannot create a spool file: {e}")))?;
    let mut file = tokio::fs::File::from_std(file);
    let spool_error = |e: io::Error| ApiError::Internal(anyhow::anyhow!("spool file: {e}"));
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
        file.write_all(&buf[..n]).await.map_err(spool_error)?;
    }
    file.flush().await.map_err(spool_error)?;
    file.rewind().await.map_err(spool_error)?;
    Ok((file, hex::encode(hash.finalize())))
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
    ds: NaiveDate,
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
        chunks: mpsc::Sender<io::Result<Bytes>>,
        receiver_gone: bool,
    }

    impl RecordSink for Encoding<'_> {
        fn header(&mut self, names: &[&str]) -> Result<(), RowError> {
            for (i, name) in names.iter().enumerate() {
                if self.def.column(name).is_none() {
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
        encoder: RowEncoder::new(def, ds, load_id),
        def,
        out: Vec::with_capacity(CHUNK_BYTES + 4096),
        errors: ErrorLog::default(),
        input_hash: ContentHash::default(),
        rows_received: 0,
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
        input_hash: sink.input_hash,
        body_sha256: hex::encode(reader.into_inner().hash.finalize()),
        errors: sink.errors,
        read_error,
    }
}
