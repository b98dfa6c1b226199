//! The way of a write: body → decode → validate → stage → publish.
//!
//! `partition` replaces a day (`PUT /partitions`), `rows` appends or merges
//! (`POST /rows`), `keyed` wraps either in an Idempotency-Key; `body` reads a
//! request body within its limits and `decode` is the blocking half they
//! share. Nothing here knows HTTP: it takes a body stream and the store, and
//! answers receipts or a `WriteError`.

pub mod answer;
pub mod batch;
pub mod body;
pub mod decode;
pub mod drop;
pub mod error;
pub mod evolve;
pub mod keyed;
pub mod partition;
pub mod replay;
pub mod rows;
pub mod slots;
pub mod spool;
pub mod turns;

use std::sync::Arc;

use chrono::{DateTime, Utc};
use sqlx::PgConnection;
use tokio::io::{AsyncRead, AsyncReadExt};
use uuid::Uuid;

pub use error::{WriteError, WriteResult};

use sha2::Sha256;

use crate::access::Actor;
use crate::config::Settings;
use crate::ingest::infer::infer_table;
use crate::ingest::BodyFormat;
use crate::ingest::EncodeOptions;
use crate::metrics::Metrics;
use crate::names::{ColumnName, TableName};
use crate::period::Period;
use crate::schema::{TableDef, DEFAULT_PARTITION_COLUMN};
use crate::store::catalog::{self, Origin};
use crate::store::ledger::{LoadEntry, LoadStatus};
use crate::store::rejects::RejectSource;
use crate::store::Store;
use body::classify_read_error;
use decode::{DecodeJob, RepeatCheck};
use slots::{LoadSlot, LoadSlots, NoSlot};

/// How much of a body is sampled, at least, to infer an undeclared table's
/// columns; never less than one whole record (`max_record_bytes`).
const INFER_SAMPLE_BYTES: u64 = 1 << 20;

pub type BodyReader = Box<dyn AsyncRead + Send + Unpin>;

/// What a write needs of the application.
#[derive(Clone)]
pub struct Pipeline {
    pub store: Store,
    pub settings: Arc<Settings>,
    /// A write holds one while it holds database connections, so that
    /// writes never take the whole pool, nor one token all the turns.
    pub load_slots: Arc<LoadSlots>,
    pub metrics: Arc<Metrics>,
    /// Small POSTs waiting to be written together (see `batch`).
    pub batches: Arc<batch::Batches>,
    /// Table definitions read (see `batch::Definitions`).
    pub definitions: Arc<batch::Definitions>,
}

impl Pipeline {
    /// Waits (bounded) for a turn to write, counted toward `principals`
    /// (the tokens whose writes it does); past the wait, the write is
    /// refused as busy, and the client retries later.
    pub async fn load_slot(&self, principals: &[&str]) -> WriteResult<LoadSlot> {
        let wait = self.settings.load_wait();
        self.load_slots
            .acquire(principals, wait)
            .await
            .map_err(|no| match no {
                NoSlot::ShareTaken => WriteError::ShareTaken,
                NoSlot::AllTaken => WriteError::Busy,
            })
    }
}

impl Pipeline {
    /// What a load's body is decoded as, within the settings' bounds.
    pub fn decode_job(
        &self,
        def: TableDef,
        options: EncodeOptions,
        repeats: RepeatCheck,
        ticket: &LoadTicket,
        format: BodyFormat,
    ) -> DecodeJob {
        DecodeJob {
            def,
            options,
            repeats,
            load_id: ticket.load_id,
            format,
            hash_prefix: Sha256::default(),
            max_listed_errors: self.settings.max_listed_errors,
            max_record_bytes: self.settings.max_record_bytes(),
            quarantine: None,
            spool_dir: self.settings.spool_dir.clone(),
            collect_wants: false,
        }
    }
}

/// The table a write goes to, as found or as guessed.
pub enum Target {
    Stored(TableDef),
    /// Not declared yet: the write creates it in its own transaction, so a
    /// refused or failed first write leaves no table behind.
    Inferred(TableDef),
}

impl Target {
    pub fn def(&self) -> &TableDef {
        match self {
            Target::Stored(def) | Target::Inferred(def) => def,
        }
    }

    pub fn into_def(self) -> TableDef {
        match self {
            Target::Stored(def) | Target::Inferred(def) => def,
        }
    }
}

impl Pipeline {
    /// The table a write goes to. An undeclared one is guessed from the
    /// first records of the body (unless switched off); the sample is put
    /// back in front of the rest of the body.
    pub async fn resolve_table(
        &self,
        conn: &mut PgConnection,
        table: &TableName,
        format: BodyFormat,
        mut body: BodyReader,
    ) -> WriteResult<(Target, BodyReader)> {
        if let Some(def) = catalog::table_def(&mut *conn, table).await? {
            return Ok((Target::Stored(def), body));
        }
        if !self.settings.auto_create_tables {
            return Err(WriteError::TableNotFound(table.clone()));
        }
        let mut head = Vec::with_capacity(64 * 1024);
        (&mut body)
            .take(INFER_SAMPLE_BYTES.max(self.settings.max_record_bytes.saturating_add(1)))
            .read_to_end(&mut head)
            .await
            .map_err(|e| classify_read_error(&e))?;
        let partition_by =
            ColumnName::parse(DEFAULT_PARTITION_COLUMN).expect("the default is a valid name");
        let def = infer_table(table, &partition_by, format, &head)?;
        let body: BodyReader = Box::new(std::io::Cursor::new(head).chain(body));
        Ok((Target::Inferred(def), body))
    }

    /// The table a write in transaction `tx` goes to, created there when it
    /// is new (it goes with the transaction if the write fails).
    pub async fn resolve_table_in(
        &self,
        tx: &mut PgConnection,
        table: &TableName,
        format: BodyFormat,
        body: BodyReader,
    ) -> WriteResult<(TableDef, BodyReader)> {
        let (target, body) = self.resolve_table(&mut *tx, table, format, body).await?;
        Ok((self.create_if_new(tx, target).await?, body))
    }

    /// The table, created in transaction `tx` when it is new (it goes with
    /// the transaction if the write fails).
    pub async fn create_if_new(
        &self,
        tx: &mut PgConnection,
        target: Target,
    ) -> WriteResult<TableDef> {
        Ok(match target {
            Target::Stored(def) => def,
            Target::Inferred(def) => catalog::declare(tx, &def, Origin::Inferred)
                .await?
                .into_def(),
        })
    }
}

/// A load as the ledger will know it: its id and start, what it writes to.
/// Kept outside the write's transaction, so that a refusal or failure can
/// be recorded after that transaction is gone.
#[derive(Clone)]
pub struct LoadTicket {
    pub load_id: Uuid,
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
            load_id: Uuid::now_v7(),
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
            format: format.name(),
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
