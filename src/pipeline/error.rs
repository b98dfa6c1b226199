//! The pipeline's one error type: why a write was refused or failed. Each
//! has a stable code (the same one the HTTP answer and the ledger carry);
//! the HTTP status is the edge's business (`crate::http::error`).

use crate::channel::ChannelError;
use crate::ids::LoadId;
use crate::ingest::BadRow;
use crate::names::TableName;
use crate::period::{Grain, Period};
use crate::pipeline::intake::body::BodyError;
use crate::pipeline::intake::slots::NoSlot;
use crate::problem::ProblemCode;
use crate::schema::AuditReport;
use crate::schema::Retention;
use crate::schema::SchemaError;
use crate::store::StoreError;
use crate::versions::Unmet;

#[derive(Debug, thiserror::Error)]
pub enum WriteError {
    #[error(transparent)]
    Body(#[from] BodyError),
    /// The body's structure is broken at one place; `rows_received` records
    /// were read before it.
    #[error("{error}")]
    Malformed {
        error: Box<BadRow>,
        rows_received: u64,
    },
    /// A CSV record past the record limit (an NDJSON line or JSON element
    /// past it is a bad row instead).
    #[error(
        "line {line}: the CSV record is larger than the limit of {max} bytes; nothing was written"
    )]
    RecordTooLarge {
        line: u64,
        max: usize,
        rows_received: u64,
    },
    /// A Parquet row group or an Arrow record batch past
    /// `IDEM_MAX_ROW_GROUP_BYTES`.
    #[error(
        "{chunk} holds {bytes} bytes uncompressed, more than the limit of {max} (IDEM_MAX_ROW_GROUP_BYTES); nothing was written"
    )]
    ChunkTooLarge {
        chunk: crate::ingest::formats::Chunk,
        bytes: u64,
        max: u64,
    },
    /// `count` of the `rows_received` rows were bad; `errors` lists the first of them.
    #[error("{count} row(s) were refused; nothing was written")]
    BadRows {
        count: u64,
        rows_received: u64,
        errors: Vec<BadRow>,
    },
    #[error("table {0:?} is not declared")]
    TableNotFound(TableName),
    /// The mode asked for does not fit the table.
    #[error("{0}")]
    Mode(String),
    /// A body for an undeclared table whose fields make no table (a field
    /// that is no column name, too many of them).
    #[error(transparent)]
    Inferred(#[from] SchemaError),
    /// The partitions a load names are not the table's.
    #[error(transparent)]
    Target(#[from] TargetError),
    #[error("the Idempotency-Key was used for a different request (method, path, content type or body differ)")]
    KeyReused,
    /// The spool's disk (`IDEM_SPOOL_DIR`) has no room for what the write
    /// must keep there.
    #[error("the spool has no room for this write; retry later")]
    SpoolFull(#[source] std::io::Error),
    /// Every turn to write is taken, for longer than a write waits.
    #[error("too many writes are running; retry later")]
    Busy,
    /// The token's own writes hold its share of the turns
    /// (`IDEM_LOAD_SLOTS_PER_TOKEN`), for longer than a write waits.
    #[error("this token's writes already hold its share of the turns to write (IDEM_LOAD_SLOTS_PER_TOKEN); retry later")]
    ShareTaken,
    #[error("no load {0}")]
    LoadNotFound(LoadId),
    /// The load takes no parts and no publish any more.
    #[error("load {load_id} is {status}; it takes no parts and no publish")]
    LoadNotOpen {
        load_id: LoadId,
        status: &'static str,
    },
    #[error("load {0} is published; it can no longer be abandoned")]
    LoadPublished(LoadId),
    /// One or more audits failed; nothing was published.
    #[error("{} of the load's audits failed; nothing was published", .0.audits.iter().filter(|a| !a.passed).count())]
    AuditFailed(AuditReport),
    /// A channel offset that is not the channel's kind.
    #[error(transparent)]
    Channel(#[from] ChannelError),
    #[error(transparent)]
    Store(#[from] StoreError),
    /// idem's own machinery failed (a decoder task, a spool file).
    /// A write to a period already past its table's retention: it would
    /// be dropped by the next expire round.
    #[error("partition {} of table {table:?} is past the table's retention ({retention}): the oldest partition kept is {}", period.label(), oldest_kept.label())]
    PartitionExpired {
        table: TableName,
        period: Period,
        retention: Retention,
        oldest_kept: Period,
    },
    #[error("internal error")]
    Internal(#[source] anyhow::Error),
}

impl WriteError {
    /// The stable, machine-readable code.
    pub fn code(&self) -> ProblemCode {
        match self {
            WriteError::Body(e) => e.code(),
            WriteError::Malformed { .. } => ProblemCode::MalformedBody,
            WriteError::BadRows { .. } => ProblemCode::BadRows,
            WriteError::RecordTooLarge { .. } | WriteError::ChunkTooLarge { .. } => {
                ProblemCode::RecordTooLarge
            }
            WriteError::TableNotFound(_) => ProblemCode::TableNotFound,
            WriteError::Mode(_) => ProblemCode::InvalidRequest,
            WriteError::Inferred(e) => e.code(),
            WriteError::Target(e) => e.code(),
            WriteError::KeyReused => ProblemCode::IdempotencyKeyReused,
            WriteError::Busy | WriteError::ShareTaken => ProblemCode::Busy,
            WriteError::SpoolFull(_) => ProblemCode::SpoolFull,
            WriteError::LoadNotFound(_) => ProblemCode::NotFound,
            WriteError::LoadNotOpen { .. } => ProblemCode::LoadNotOpen,
            WriteError::LoadPublished(_) => ProblemCode::LoadPublished,
            WriteError::AuditFailed(_) => ProblemCode::AuditFailed,
            WriteError::PartitionExpired { .. } => ProblemCode::PartitionExpired,
            WriteError::Channel(e) => e.code(),
            WriteError::Store(e) => e.code(),
            WriteError::Internal(_) => ProblemCode::Internal,
        }
    }

    /// How many records the decoder read before it refused the body (0 when
    /// the refusal came before any was read).
    pub fn rows_received(&self) -> u64 {
        match self {
            WriteError::Malformed { rows_received, .. }
            | WriteError::RecordTooLarge { rows_received, .. }
            | WriteError::BadRows { rows_received, .. } => *rows_received,
            _ => 0,
        }
    }

    /// How many rows were bad.
    pub fn rejected(&self) -> u64 {
        match self {
            WriteError::BadRows { count, .. } => *count,
            _ => 0,
        }
    }

    /// Whether the request was at fault (a refusal), rather than idem or
    /// its database (a failure).
    pub fn is_refusal(&self) -> bool {
        match self {
            WriteError::Store(e) => e.is_refusal(),
            WriteError::Internal(_)
            | WriteError::Busy
            | WriteError::ShareTaken
            | WriteError::SpoolFull(_) => false,
            _ => true,
        }
    }
}

/// A version expectation not met is the store's refusal, wherever it was
/// checked.
impl From<Unmet> for WriteError {
    fn from(unmet: Unmet) -> Self {
        WriteError::Store(StoreError::PreconditionFailed(unmet))
    }
}

/// No turn to write within the wait: refused as busy, and the client
/// retries later.
impl From<NoSlot> for WriteError {
    fn from(no: NoSlot) -> Self {
        match no {
            NoSlot::ShareTaken => WriteError::ShareTaken,
            NoSlot::AllTaken => WriteError::Busy,
        }
    }
}

impl From<tokio::task::JoinError> for WriteError {
    fn from(e: tokio::task::JoinError) -> Self {
        WriteError::Internal(anyhow::Error::new(e).context("a write task failed"))
    }
}

pub type WriteResult<T> = Result<T, WriteError>;

/// The most partitions one load may target (`loads/target.rs` keeps to it;
/// its error tells it).
pub const MAX_TARGET_PARTITIONS: usize = 1000;

/// What is wrong with the partitions a load names (a range PUT's
/// `?from=&to=`, a `POST /loads` target): the request's, never the table
/// declaration's.
#[derive(Debug, thiserror::Error)]
pub enum TargetError {
    #[error("table {0:?} has no partitions; PUT /tables/{0}/rows replaces it whole, and a load of it targets {{\"table\": true}}")]
    NotPartitioned(TableName),
    #[error("{label:?} is not a partition of table {table:?}: its grain is {} ({})", grain.as_str(), grain.form())]
    NotAPeriod {
        label: String,
        table: TableName,
        grain: Grain,
    },
    #[error("the range starts at {from}, after its end {to}: ?from= names its first partition, ?to= its last")]
    Backward { from: Period, to: Period },
    #[error("a load targets at most {MAX_TARGET_PARTITIONS} partitions; this one {0}")]
    TooMany(usize),
    #[error("target.partitions is empty")]
    Empty,
    #[error("target is one of {{\"partitions\": [ds, …]}}, {{\"range\": {{\"from\": ds, \"to\": ds}}}}, {{\"table\": true}}")]
    Malformed,
}
