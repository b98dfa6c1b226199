//! The way of a write: body → decode → validate → stage → publish (a PUT)
//! or merge (a POST).
//!
//! `Pipeline`'s whole API is the one `impl Pipeline` in this file: an entry
//! point per kind of write (`run_keyed`, `put_partition_unkeyed`,
//! `drop_table`), each delegating to the file that holds its steps, and the
//! steps the write paths share. The files: `partition` replaces a day (`PUT
//! /partitions`), `rows` appends or merges (`POST /rows`), `batch` writes
//! small POSTs together (`batch_queue`: what waits for it), `keyed` runs any of them under an
//! Idempotency-Key, `channel` a POST on a channel (with or without a key), `replay` writes a table's rejects again, `evolve` fits
//! a table to a body under `schema: evolve`, `drop` drops a table; `body`
//! reads a request body within its limits, `turns` and `slots` hand out
//! turns to write, `decode` is the blocking half every write shares and
//! `spool` keeps a body that is read twice; `ticket` is a load as the
//! ledger knows it. Loads of several partitions: `load` (a load that
//! outlives a request: its target, opening, abandonment), `load_part` (its
//! parts), `staged` (its audit and publish), `put_many` (a range or a whole
//! table in one request), and `load_publish`, the end they share.
//!
//! Nothing here knows HTTP: it takes a body stream and the store, and
//! answers domain receipts or a `WriteError`; `http/receipts.rs` gives the
//! receipts their JSON form (handed in as an `answer::AnswerForm` where a
//! keyed answer is stored).

pub mod answer;
pub mod batch;
mod batch_queue;
pub mod body;
pub mod channel;
pub mod decode;
mod decode_blocks;
pub mod drop;
mod encoding;
pub mod error;
pub mod evolve;
pub mod keyed;
pub mod load;
pub mod load_part;
pub mod load_publish;
pub mod partition;
pub mod put_many;
pub mod replay;
pub mod rows;
pub mod slots;
pub mod spool;
pub mod staged;
pub mod ticket;
pub mod turns;

use std::sync::Arc;

use sqlx::PgConnection;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncSeekExt};

pub use error::{WriteError, WriteResult};
pub use ticket::LoadTicket;

use sha2::Sha256;

use crate::access::Actor;
use crate::config::Settings;
use crate::idempotency::KeyedRequest;
use crate::ingest::formats::{arrow_stream_columns, parquet_columns, ReadError};
use crate::ingest::infer::{infer_table, table_of_columns};
use crate::ingest::EncodeOptions;
use crate::ingest::{BadRow, BodyFormat};
use crate::metrics::Metrics;
use crate::names::{ColumnName, TableName};
use crate::schema::{ColumnType, TableDef, DEFAULT_PARTITION_COLUMN};
use crate::store::catalog::{self, Declared, Origin};
use crate::store::Store;
use crate::wire::loads::{LoadReceipt, PartReceipt};
use answer::{AnswerForm, KeyedAnswer};
use body::classify_read_error;
use decode::{DecodeJob, RepeatCheck};
use keyed::KeyedWrite;
use load::{LoadView, OpenLoad};
use load_part::PartUpload;
use partition::{PutPartition, Receipt};
use put_many::PutMany;
use slots::{LoadSlot, LoadSlots, NoSlot};
use staged::{RunAnswer, RunLoad};

/// How much of a body is sampled, at least, to infer an undeclared table's
/// columns; never less than one whole record (`max_record_bytes`).
const INFER_SAMPLE_BYTES: u64 = 1 << 20;

pub type BodyReader = Box<dyn AsyncRead + Send + Unpin>;

/// A columnar body whose schema cannot be read: refused as broken (a
/// spool's disk failing is idem's).
fn refused_sample(e: ReadError) -> WriteError {
    match e {
        ReadError::Malformed(error) => WriteError::Malformed {
            error: Box::new(BadRow::from(error)),
            rows_received: 0,
        },
        ReadError::Io(e) | ReadError::Spool(e) => spool::spool_failed(e),
        other => WriteError::Internal(anyhow::anyhow!("reading a schema: {other:?}")),
    }
}

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

/// The pipeline's whole API: what `http/` calls. Each entry point is a
/// short delegation to the file that holds its steps; below them, the
/// steps the write paths share.
impl Pipeline {
    /// Runs `write` under the request's Idempotency-Key (`keyed`): a replay
    /// when the key is completed, otherwise the write in the transaction
    /// that claims the key, which stores its answer in `form`.
    pub async fn run_keyed(
        &self,
        req: KeyedRequest,
        write: KeyedWrite,
        form: &'static dyn AnswerForm,
    ) -> WriteResult<KeyedAnswer> {
        self.write_keyed(req, write, form).await
    }

    /// A POST on a channel without an Idempotency-Key (`channel`): its
    /// offset checked and committed in the rows' own transaction.
    pub async fn post_on_channel(
        &self,
        rows: rows::PostRows,
        form: &'static dyn AnswerForm,
    ) -> WriteResult<KeyedAnswer> {
        self.write_unkeyed_on_channel(rows, form).await
    }

    /// Replaces a day without an Idempotency-Key (`partition`): its own
    /// connection, its refusals recorded in the ledger.
    pub async fn put_partition_unkeyed(&self, req: PutPartition) -> WriteResult<Receipt> {
        self.write_unkeyed_put(req).await
    }

    /// Drops `table` with everything idem keeps of it but its ledger
    /// (`drop`); `None` when there was no such table.
    pub async fn drop_table(
        &self,
        table: &TableName,
        actor: &Actor,
    ) -> WriteResult<Option<drop::DropReceipt>> {
        self.drop_and_record(table, actor).await
    }

    /// Replaces a range of partitions or the whole table in one
    /// transaction (`put_many`), or with `dry_run` tells what it would do.
    pub async fn put_many(&self, req: PutMany) -> WriteResult<LoadReceipt> {
        self.write_many(req).await
    }

    /// Opens a load that outlives the request (`load`), or answers the one
    /// its Idempotency-Key opened (false: not new).
    pub async fn open_load(&self, req: OpenLoad) -> WriteResult<(LoadView, bool)> {
        self.open(req).await
    }

    /// A staged load with its parts.
    pub async fn load_view(&self, load_id: uuid::Uuid) -> WriteResult<Option<LoadView>> {
        self.view(load_id).await
    }

    /// Stages a part of a load (`load_part`).
    pub async fn put_part(&self, req: PartUpload) -> WriteResult<PartReceipt> {
        self.stage_part(req).await
    }

    /// Audits or publishes a staged load (`staged`).
    pub async fn run_load(&self, req: RunLoad) -> WriteResult<RunAnswer> {
        self.run_staged(req).await
    }

    /// Abandons a staged load (`load`).
    pub async fn abandon_load(&self, load_id: uuid::Uuid) -> WriteResult<LoadView> {
        self.abandon(load_id).await
    }

    /// Waits (bounded) for a turn to write, counted toward `principals`
    /// (the tokens whose writes it does); past the wait, the write is
    /// refused as busy, and the client retries later.
    pub(super) async fn load_slot(&self, principals: &[&str]) -> WriteResult<LoadSlot> {
        let wait = self.settings.load_wait();
        self.load_slots
            .acquire(principals, wait)
            .await
            .map_err(|no| match no {
                NoSlot::ShareTaken => WriteError::ShareTaken,
                NoSlot::AllTaken => WriteError::Busy,
            })
    }

    /// What a load's body is decoded as, within the settings' bounds.
    pub(super) fn decode_job(
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
            max_row_group_bytes: self.settings.max_row_group_bytes,
            quarantine: None,
            spool_dir: self.settings.spool_dir.clone(),
            collect_wants: false,
        }
    }

    /// The table a write goes to. An undeclared one (unless switched off,
    /// or the request says `create` false: `?create=false`) takes the
    /// columns of a columnar body's schema, or is guessed from the first
    /// records of a text body; the sample is put back in front of the rest
    /// of the body.
    pub(super) async fn resolve_table(
        &self,
        conn: &mut PgConnection,
        table: &TableName,
        format: BodyFormat,
        create: bool,
        mut body: BodyReader,
    ) -> WriteResult<(Target, BodyReader)> {
        if let Some(def) = catalog::table_def(&mut *conn, table).await? {
            return Ok((Target::Stored(def), body));
        }
        if !(create && self.settings.auto_create_tables) {
            return Err(WriteError::TableNotFound(table.clone()));
        }
        let partition_by =
            ColumnName::parse(DEFAULT_PARTITION_COLUMN).expect("the default is a valid name");
        if format == BodyFormat::Parquet {
            let (columns, body) = self.parquet_columns(body).await?;
            let def = table_of_columns(table, &partition_by, columns)?;
            return Ok((Target::Inferred(def), body));
        }
        let mut head = Vec::with_capacity(64 * 1024);
        (&mut body)
            .take(INFER_SAMPLE_BYTES.max(self.settings.max_record_bytes.saturating_add(1)))
            .read_to_end(&mut head)
            .await
            .map_err(|e| classify_read_error(&e))?;
        let def = match format {
            // An Arrow stream's schema comes first: its types, not guesses.
            BodyFormat::ArrowStream => {
                let columns = arrow_stream_columns(&head).map_err(refused_sample)?;
                table_of_columns(table, &partition_by, columns)?
            }
            _ => infer_table(table, &partition_by, format, &head)?,
        };
        let body: BodyReader = Box::new(std::io::Cursor::new(head).chain(body));
        Ok((Target::Inferred(def), body))
    }

    /// A Parquet body's columns, from its footer: the body is spooled whole
    /// first (the footer comes last) and handed back as the spool, rewound.
    async fn parquet_columns(
        &self,
        body: BodyReader,
    ) -> WriteResult<(Vec<(String, Option<ColumnType>)>, BodyReader)> {
        let dir = self.settings.spool_dir.as_deref();
        let mut file = match spool::spool_body(body, &mut Sha256::default(), dir).await? {
            spool::Spooled::Kept(file) => file,
            spool::Spooled::Full { error, .. } => return Err(spool::spool_failed(error)),
        };
        let footer = file.try_clone().await.map_err(spool::spool_failed)?;
        let footer = footer.into_std().await;
        let columns = tokio::task::spawn_blocking(move || parquet_columns(footer))
            .await?
            .map_err(refused_sample)?;
        // The footer's reader moved the offset the two handles share.
        file.seek(std::io::SeekFrom::Start(0))
            .await
            .map_err(spool::spool_failed)?;
        Ok((columns, Box::new(file)))
    }

    /// The table, created in transaction `tx` when it is new (it goes with
    /// the transaction if the write fails), and whether this write created
    /// it (not a write that raced it there).
    pub(super) async fn create_if_new(
        &self,
        tx: &mut PgConnection,
        target: Target,
    ) -> WriteResult<(TableDef, bool)> {
        Ok(match target {
            Target::Stored(def) => (def, false),
            Target::Inferred(def) => {
                let declared = catalog::declare(tx, &def, Origin::Inferred).await?;
                let created = matches!(declared, Declared::Created(_));
                (declared.into_def(), created)
            }
        })
    }
}
