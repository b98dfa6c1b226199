//! The way of one `PUT /partitions/{table}/{ds}`: decode → validate → stage
//! → publish.
//!
//! Decoding runs on a blocking thread and hands COPY text to the async side
//! in chunks through a small channel, so memory stays bounded whatever the
//! body's size. When the partition does not exist yet, the chunks go straight
//! into COPY while the body is still arriving. When it does exist, the body
//! may well be a re-send of the same content (a retried job), so the chunks
//! are spooled to a temporary file first: if the rows as received hash equal
//! to what the live partition was built from, nothing is staged at all.

use std::io::{self, BufReader};
use std::ops::ControlFlow;

use bytes::Bytes;
use chrono::{NaiveDate, Utc};
use serde::Serialize;
use tokio::io::{AsyncReadExt, AsyncSeekExt, AsyncWriteExt};
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tokio_util::io::{ReaderStream, SyncIoBridge};
use uuid::Uuid;

use crate::app::AppState;
use crate::error::{ApiError, ApiResult};
use crate::http::body::{classify_read_error, BodySource};
use crate::ingest::formats::ReadError;
use crate::ingest::infer::infer_table;
use crate::ingest::{
    read_records, ContentHash, ErrorLog, RawRecord, RecordSink, RowEncoder, RowError,
};
use crate::schema::{TableDef, DEFAULT_PARTITION_COLUMN};
use crate::store::catalog::Declared;
use crate::store::ledger::{LoadEntry, LoadStatus};
use crate::store::publish::{publish, Conditions, Published};
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
    input_hash: ContentHash,
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

    let (chunks_tx, chunks_rx) = mpsc::channel::<io::Result<Bytes>>(CHUNKS_IN_FLIGHT);
    let bridge = SyncIoBridge::new(reader);
    let format = body.format;
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
        let staged = match &live {
            None => {
                // Nothing to compare with: COPY while the body arrives.
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
                (staged_or_error(staged)?, decoded)
            }
            Some(live) => {
                let (spool, decoded) = spool(chunks_rx, decoder, &state).await?;
                check_decoded(&decoded)?;
                let input_sha256 = decoded.input_hash.hex();
                if input_sha256 == live.input_sha256 {
                    return Ok(Outcome::SameInput {
                        decoded,
                        live: live.clone(),
                    });
                }
                let rows = ReaderStream::with_capacity(spool, CHUNK_BYTES);
                let staged = stage::stage_rows(&mut conn, &def, ds, &stage_name, rows).await;
                (staged_or_error(staged)?, decoded)
            }
        };
        Ok(Outcome::Staged {
            staged: staged.0,
            decoded: staged.1,
        })
    }
    .await;

    let receipt = match result {
        Ok(Outcome::SameInput { decoded, live }) => {
            let row_count = live.row_count as u64;
            let receipt = Receipt {
                load_id,
                table: def.name.clone(),
                ds,
                mode: "replace",
                rows_received: decoded.rows_received,
                rows_written: 0,
                duplicates: decoded.rows_received.saturating_sub(row_count),
                rejected: 0,
                row_count,
                content_sha256: live.content_sha256.clone(),
                changed: false,
                replayed: false,
            };
            let entry = ledger_entry(&receipt, LoadStatus::Unchanged, started_at);
            let recorded = crate::store::ledger::record_load(&mut conn, &entry).await;
            recorded.map(|_| receipt).map_err(ApiError::from)
        }
        Ok(Outcome::Staged { staged, decoded }) => {
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
            let input_sha256 = decoded.input_hash.hex();
            let mut entry = ledger_entry(&receipt, LoadStatus::Published, started_at);
            match publish(
                &mut conn,
                &def,
                ds,
                &stage_name,
                &input_sha256,
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

enum Outcome {
    SameInput {
        decoded: Decoded,
        live: crate::store::publish::Current,
    },
    Staged {
        staged: Staged,
        decoded: Decoded,
    },
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

/// Writes the chunks to an unnamed temporary file (gone when closed) and
/// returns it rewound, with the decoder's verdict.
async fn spool(
    mut chunks: mpsc::Receiver<io::Result<Bytes>>,
    decoder: tokio::task::JoinHandle<Decoded>,
    state: &AppState,
) -> ApiResult<(tokio::fs::File, Decoded)> {
    let file = match &state.settings.spool_dir {
        Some(dir) => tempfile::tempfile_in(dir),
        None => tempfile::tempfile(),
    }
    .map_err(|e| ApiError::Internal(anyhow::anyhow!("cannot create a spool file: {e}")))?;
    let mut file = tokio::fs::File::from_std(file);
    let spool_error = |e: io::Error| ApiError::Internal(anyhow::anyhow!("spool file: {e}"));
    let mut source_failed = false;
    while let Some(chunk) = chunks.recv().await {
        match chunk {
            Ok(bytes) => file.write_all(&bytes).await.map_err(spool_error)?,
            Err(_) => source_failed = true,
        }
    }
    let decoded = join_decoder(decoder).await?;
    check_decoded(&decoded)?;
    if source_failed {
        return Err(ApiError::Internal(anyhow::anyhow!(
            "the decoder failed without saying why"
        )));
    }
    file.flush().await.map_err(spool_error)?;
    file.rewind().await.map_err(spool_error)?;
    Ok((file, decoded))
}

/// The blocking half: reads every record, encodes the good ones into COPY
/// text chunks, counts and lists the bad ones. Once a row is bad nothing
/// more is sent (the load will be refused), but reading goes on so the
/// answer can list every bad row.
fn decode(
    def: &TableDef,
    ds: NaiveDate,
    load_id: Uuid,
    format: crate::ingest::BodyFormat,
    reader: impl io::BufRead,
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
    let read_error = read_records(format, reader, &mut sink).err();
    if read_error.is_none() && sink.errors.is_empty() && !sink.receiver_gone {
        if !sink.out.is_empty() {
            let _ = sink
                .chunks
                .blocking_send(Ok(Bytes::from(std::mem::take(&mut sink.out))));
        }
    } else {
        // Makes the COPY abort instead of committing a partial stage.
        let _ = sink
            .chunks
            .blocking_send(Err(io::Error::other("the body was refused")));
    }
    Decoded {
        rows_received: sink.rows_received,
        input_hash: sink.input_hash,
        errors: sink.errors,
        read_error,
    }
}
