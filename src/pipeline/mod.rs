//! The way of a write: HTTP body → decode → validate → stage → publish.
//!
//! `partition` replaces a day (`PUT /partitions`), `rows` appends or merges
//! (`POST /rows`), `keyed` wraps either in an Idempotency-Key; `decode` is the
//! blocking half they share.

pub mod decode;
pub mod keyed;
pub mod partition;
pub mod rows;

use chrono::{DateTime, NaiveDate, Utc};
use sqlx::PgConnection;
use tokio::io::{AsyncRead, AsyncReadExt};
use uuid::Uuid;

use crate::app::AppState;
use crate::error::{ApiError, ApiResult};
use crate::http::body::classify_read_error;
use crate::ingest::infer::infer_table;
use crate::ingest::BodyFormat;
use crate::schema::{TableDef, DEFAULT_PARTITION_COLUMN};
use crate::store::catalog::{self, Declared};
use crate::store::ledger::{LoadEntry, LoadStatus};

/// How much of a body is sampled to infer an undeclared table's columns.
const INFER_SAMPLE_BYTES: u64 = 1 << 20;

pub type BodyReader = Box<dyn AsyncRead + Send + Unpin>;

/// The table a write goes to. An undeclared one is created from the first
/// records of the body (unless switched off); the sample is put back in
/// front of the rest of the body.
pub async fn resolve_table(
    state: &AppState,
    conn: &mut PgConnection,
    table: &str,
    format: BodyFormat,
    mut body: BodyReader,
) -> ApiResult<(TableDef, BodyReader)> {
    if let Some(def) = catalog::table_def(&mut *conn, table).await? {
        return Ok((def, body));
    }
    if !state.settings.auto_create_tables {
        return Err(ApiError::TableNotFound(table.to_string()));
    }
    let mut head = Vec::with_capacity(64 * 1024);
    (&mut body)
        .take(INFER_SAMPLE_BYTES)
        .read_to_end(&mut head)
        .await
        .map_err(|e| classify_read_error(&e))?;
    let def = infer_table(table, DEFAULT_PARTITION_COLUMN, format, &head)?;
    let body: BodyReader = Box::new(std::io::Cursor::new(head).chain(body));
    let def = match catalog::declare(conn, &def, true).await? {
        Declared::Created(d) | Declared::Unchanged(d) | Declared::Changed(d, _) => d,
    };
    Ok((def, body))
}

/// What the ledger keeps of a write that was refused or failed: enough to
/// record it after its transaction is gone.
pub struct Refusal {
    pub load_id: Uuid,
    pub table: String,
    pub ds: Option<NaiveDate>,
    pub mode: String,
    pub idempotency_key: Option<String>,
    pub started_at: DateTime<Utc>,
}

impl Refusal {
    /// A new load: its id (UUIDv7) and start time.
    pub fn new(
        table: &str,
        ds: Option<NaiveDate>,
        mode: &str,
        idempotency_key: Option<&str>,
    ) -> Self {
        Refusal {
            load_id: Uuid::now_v7(),
            table: table.to_string(),
            ds,
            mode: mode.to_string(),
            idempotency_key: idempotency_key.map(str::to_string),
            started_at: Utc::now(),
        }
    }

    /// Records the load as refused (4xx) or failed (5xx), with what was wrong.
    pub async fn record(&self, state: &AppState, error: &ApiError) {
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
            status,
            rejected,
            error: Some(detail),
            ..blank_entry(
                self.load_id,
                &self.table,
                self.ds,
                &self.mode,
                self.idempotency_key.as_deref(),
                self.started_at,
            )
        };
        if let Err(e) = state.store.record_load(&entry).await {
            tracing::warn!(error = ?e, "could not record a refused load");
        }
    }
}

/// A ledger entry with nothing written yet.
pub fn blank_entry<'a>(
    load_id: Uuid,
    table: &'a str,
    ds: Option<NaiveDate>,
    mode: &'a str,
    idempotency_key: Option<&'a str>,
    started_at: DateTime<Utc>,
) -> LoadEntry<'a> {
    LoadEntry {
        load_id,
        table,
        ds,
        mode,
        status: LoadStatus::Failed,
        rows_received: 0,
        rows_written: 0,
        duplicates: 0,
        rejected: 0,
        content_sha256: None,
        changed: false,
        idempotency_key,
        error: None,
        started_at,
    }
}
