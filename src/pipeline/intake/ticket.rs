//! A load as the ledger knows it, kept outside the write's transaction so
//! that a refusal or a failure can be recorded after that transaction is
//! gone.

use chrono::{DateTime, Utc};

use crate::access::Actor;
use crate::ids::LoadId;
use crate::ingest::reject_spool::RejectSource;
use crate::ingest::BodyFormat;
use crate::names::TableName;
use crate::period::Period;
use crate::pipeline::error::WriteError;
use crate::store::ledger::{LoadEntry, LoadStatus};
use crate::store::Store;

/// A load as the ledger will know it: its id and start, what it writes to.
/// Kept outside the write's transaction, so that a refusal or failure can
/// be recorded after that transaction is gone.
#[derive(Clone)]
pub struct LoadTicket {
    pub load_id: LoadId,
    pub table: TableName,
    pub ds: Option<Period>,
    pub mode: &'static str,
    pub idempotency_key: Option<String>,
    pub started_at: DateTime<Utc>,
    pub actor: Actor,
}

impl LoadTicket {
    /// A new load: its id (UUIDv7) and start time.
    pub fn new(
        table: &TableName,
        ds: Option<Period>,
        mode: &'static str,
        idempotency_key: Option<&str>,
        actor: &Actor,
    ) -> Self {
        LoadTicket {
            load_id: LoadId::new(),
            table: table.clone(),
            ds,
            mode,
            idempotency_key: idempotency_key.map(str::to_string),
            started_at: Utc::now(),
            actor: actor.clone(),
        }
    }

    /// Where this load's rejects come from (under `bad_rows: quarantine`).
    pub fn reject_source(
        &self,
        origin: &'static str,
        mode: Option<&'static str>,
        format: BodyFormat,
    ) -> RejectSource {
        RejectSource {
            table: self.table.clone(),
            load_id: self.load_id,
            origin,
            mode,
            format: format.of_raw_records().name(),
            ds: self.ds,
            idempotency_key: self.idempotency_key.clone(),
            received_at: self.started_at,
        }
    }

    /// The ledger entry of this load, with nothing written yet.
    pub fn entry(&self) -> LoadEntry<'_> {
        LoadEntry::new(
            self.load_id,
            &self.table,
            self.ds,
            self.mode,
            self.idempotency_key.as_deref(),
            self.started_at,
            &self.actor,
        )
    }

    /// Records the load as refused or failed, with what was wrong and how
    /// much of the body was read before it was.
    pub async fn record_refusal(&self, store: &Store, error: &WriteError) {
        let (status, detail) = match error {
            WriteError::BadRows { errors, .. } => (
                LoadStatus::Rejected,
                serde_json::json!({"code": error.code(), "errors": errors}),
            ),
            e if e.is_refusal() => (
                LoadStatus::Rejected,
                serde_json::json!({"code": e.code(), "detail": e.to_string()}),
            ),
            e => (LoadStatus::Failed, serde_json::json!({"code": e.code()})),
        };
        let entry = LoadEntry {
            status,
            rows_received: error.rows_received(),
            rejected: error.rejected(),
            error: Some(detail),
            ..self.entry()
        };
        if let Err(e) = store.record_load(&entry).await {
            tracing::warn!(error = ?e, "could not record a refused load");
        }
    }
}
