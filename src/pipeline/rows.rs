//! `POST /rows?table=`: rows appended or merged by key, in the transaction
//! that also records the request's Idempotency-Key.

use chrono::{NaiveDate, Utc};
use serde::Serialize;
use sha2::Sha256;
use sqlx::PgConnection;
use tokio_stream::wrappers::ReceiverStream;
use uuid::Uuid;

use super::{blank_entry, decode, resolve_table};
use crate::app::AppState;
use crate::error::{ApiError, ApiResult};
use crate::http::body::BodySource;
use crate::ingest::EncodeOptions;
use crate::schema::TableDef;
use crate::store::ledger::{record_load, LoadEntry, LoadStatus};
use crate::store::merge::{apply_incoming, copy_incoming, Incoming, MergeMode, PartitionAfter};

/// The answer to an accepted POST.
#[derive(Clone, Debug, Serialize)]
pub struct RowsReceipt {
    pub load_id: Uuid,
    pub table: String,
    pub mode: MergeMode,
    /// The partition written, when there was exactly one.
    pub ds: Option<NaiveDate>,
    /// Every partition written, with its row count and content hash after.
    pub partitions: Vec<PartitionAfter>,
    pub rows_received: u64,
    /// Inserted + updated + deleted.
    pub rows_written: u64,
    pub inserted: u64,
    pub updated: u64,
    pub deleted: u64,
    /// Rows that changed nothing: the same as stored, an older cursor, an
    /// existing key under `insert_missing`, a tombstone for nothing.
    pub unchanged: u64,
    pub duplicates: u64,
    pub rejected: u64,
    pub changed: bool,
    pub replayed: bool,
}

pub struct PostRows {
    pub table: String,
    pub mode: Option<MergeMode>,
    pub body: BodySource,
    pub principal: String,
    pub idempotency_key: String,
}

/// The mode asked for, or the table's default: merge with a key, append without.
fn choose_mode(def: &TableDef, asked: Option<MergeMode>) -> ApiResult<MergeMode> {
    let keyed = !def.primary_key.is_empty();
    match asked {
        None if keyed => Ok(MergeMode::Merge),
        None => Ok(MergeMode::Append),
        Some(MergeMode::Append) if keyed => Err(ApiError::InvalidRequest(format!(
            "table {:?} has a primary key; use mode=merge or mode=insert_missing",
            def.name
        ))),
        Some(mode @ (MergeMode::Merge | MergeMode::InsertMissing)) if !keyed => {
            Err(ApiError::InvalidRequest(format!(
                "mode={} needs a primary key, and table {:?} has none; use mode=append",
                mode.as_str(),
                def.name
            )))
        }
        Some(mode) => Ok(mode),
    }
}

/// Writes the body's rows in `tx`, and nothing else: every statement of
/// the write runs in that transaction (the caller commits, and records a
/// refusal after rolling back).
#[tracing::instrument(skip_all, fields(table = %req.table, %load_id))]
pub async fn post_rows(
    state: &AppState,
    req: PostRows,
    load_id: Uuid,
    tx: &mut PgConnection,
) -> ApiResult<RowsReceipt> {
    let started_at = Utc::now();
    let PostRows {
        table,
        mode,
        body,
        principal,
        idempotency_key,
    } = req;
    write(
        state,
        &table,
        mode,
        body,
        &principal,
        &idempotency_key,
        load_id,
        tx,
        started_at,
    )
    .await
}

impl PostRows {
    /// The mode named in the ledger for a refusal: the one asked for, if any.
    pub fn mode_name(&self) -> &'static str {
        self.mode.map(MergeMode::as_str).unwrap_or("default")
    }
}

#[allow(clippy::too_many_arguments)]
async fn write(
    state: &AppState,
    table: &str,
    mode: Option<MergeMode>,
    body: BodySource,
    principal: &str,
    key: &str,
    load_id: Uuid,
    tx: &mut PgConnection,
    started_at: chrono::DateTime<Utc>,
) -> ApiResult<RowsReceipt> {
    let format = body.format;
    let (def, body) = resolve_table(state, &mut *tx, table, format, body.reader).await?;
    let mode = choose_mode(&def, mode)?;
    let options = EncodeOptions {
        ds: None,
        // Without a key, a row's id is its content and its occurrence in
        // this request; the request's key keeps other requests' rows apart.
        row_id_scope: def
            .primary_key
            .is_empty()
            .then(|| format!("{principal}\0{key}").into_bytes()),
        tombstones: mode == MergeMode::Merge,
    };
    let decoding = decode::spawn_decoder(
        def.clone(),
        options,
        true,
        load_id,
        format,
        body,
        Sha256::default(),
    );
    let copied = copy_incoming(tx, &def, mode, ReceiverStream::new(decoding.chunks)).await;
    let decoded = decode::finish(decoding.decoder).await?;
    let rows = decode::copy_result(copied)?;
    let incoming = Incoming {
        rows,
        content: decoded.input_hash,
        tombstones: decoded.tombstones,
        maybe_repeated: decoded.maybe_repeated,
    };
    let merged = apply_incoming(tx, &def, mode, load_id, incoming).await?;

    let rows_written = merged.inserted + merged.updated + merged.deleted;
    let receipt = RowsReceipt {
        load_id,
        table: def.name.clone(),
        mode,
        ds: match merged.partitions.as_slice() {
            [one] => Some(one.ds),
            _ => None,
        },
        rows_received: decoded.rows_received,
        rows_written,
        inserted: merged.inserted,
        updated: merged.updated,
        deleted: merged.deleted,
        unchanged: merged.rows_after_dedup - rows_written,
        duplicates: merged.duplicates,
        rejected: 0,
        changed: rows_written > 0,
        replayed: false,
        partitions: merged.partitions,
    };
    let entry = LoadEntry {
        status: if receipt.changed {
            LoadStatus::Published
        } else {
            LoadStatus::Unchanged
        },
        rows_received: receipt.rows_received,
        rows_written,
        duplicates: receipt.duplicates,
        changed: receipt.changed,
        ..blank_entry(
            load_id,
            &receipt.table,
            receipt.ds,
            mode.as_str(),
            Some(key),
            started_at,
        )
    };
    record_load(tx, &entry).await?;
    Ok(receipt)
}
