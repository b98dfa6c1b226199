//! What every body reader yields: raw records of raw fields, fed to a
//! `RecordSink`, and the errors that end a body.

use std::borrow::Cow;
use std::io;
use std::ops::ControlFlow;
use std::path::PathBuf;

use serde_json::value::RawValue;

use crate::ingest::RowError;
use crate::schema::ColumnType;

/// One field's value before typing: a JSON value, or CSV text (`None` for an
/// empty field, which means NULL).
#[derive(Clone, Copy, Debug)]
pub enum RawField<'a> {
    Json(&'a RawValue),
    Text(Option<&'a str>),
    /// A columnar body's integer, typed without a text round trip (as
    /// its text would be, else).
    Int(i64),
    /// A columnar body's instant in microseconds since the Unix epoch
    /// (one chrono can hold, not an infinity), typed as its text would be.
    Micros(i64),
    /// A columnar body's date of the years 1 to 9999, typed as its text
    /// (`YYYY-MM-DD`) would be.
    Date(chrono::NaiveDate),
}

pub struct RawRecord<'a> {
    pub line: u64,
    pub record: u64,
    /// A Parquet body's row group (from 1): the row's errors name it.
    pub row_group: Option<u64>,
    pub fields: &'a [(Cow<'a, str>, RawField<'a>)],
}

/// What the readers feed. `header` sees CSV's header once, before any
/// record: its names, and its bytes as sent (`raw`). `record` sees each record with its bytes as sent (`raw`: an NDJSON line
/// or a CSV record without the line end that closed it, a JSON array's
/// element), or `None` when the record was too large to keep.
pub trait RecordSink {
    fn header(&mut self, _raw: &[u8], _names: &[&str]) -> Result<(), RowError> {
        Ok(())
    }
    /// A columnar body's schema, after `header` and before any record: the
    /// column type each field's values have (`None`: none idem has).
    fn field_types(&mut self, _names: &[&str], _types: &[Option<ColumnType>]) {}
    fn record(
        &mut self,
        raw: Option<&[u8]>,
        record: Result<RawRecord<'_>, RowError>,
    ) -> ControlFlow<()>;
    /// Whether `record` needs each record's raw form: a reader that must
    /// write it (a columnar row as JSON) skips that work when not.
    fn wants_raw(&self) -> bool {
        true
    }
}

#[derive(Debug)]
pub enum ReadError {
    /// The body's structure is broken (an unterminated array, a bad header):
    /// nothing after this point can be read.
    Malformed(RowError),
    /// A CSV record (or header) past the record limit: where it ends cannot
    /// be told without reading it whole, so the body stops here.
    RecordTooLarge {
        line: u64,
        max: usize,
    },
    /// A Parquet row group or an Arrow record batch larger than the bound,
    /// uncompressed: it would be held in memory whole, so the body is
    /// refused (a Parquet body before any row).
    ChunkTooLarge {
        chunk: Chunk,
        bytes: u64,
        max: u64,
    },
    Io(io::Error),
    /// The temporary file a Parquet body is spooled to could not be written
    /// (a full disk is the server's condition, not the client's).
    Spool(io::Error),
}

/// The unit a columnar body is read in, each held in memory whole,
/// numbered from 1: the row groups of a Parquet file, the record batches
/// (and dictionary batches) of an Arrow stream, each counted apart.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Chunk {
    RowGroup(usize),
    RecordBatch(usize),
    DictionaryBatch(usize),
}

impl std::fmt::Display for Chunk {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Chunk::RowGroup(n) => write!(f, "row group {n} of the Parquet file"),
            Chunk::RecordBatch(n) => write!(f, "record batch {n} of the Arrow stream"),
            Chunk::DictionaryBatch(n) => write!(f, "dictionary batch {n} of the Arrow stream"),
        }
    }
}

/// The message of a record refused for its size.
pub(super) fn too_large(max: usize) -> String {
    format!("the record is larger than the limit of {max} bytes")
}

impl From<io::Error> for ReadError {
    fn from(e: io::Error) -> Self {
        ReadError::Io(e)
    }
}

/// The field that marks a tombstone in `POST /rows` merge mode: the one
/// field of idem's own a record may carry.
pub const DELETED_FIELD: &str = "_deleted";

/// What bounds the reading of one body.
#[derive(Clone, Debug)]
pub struct ReadLimits {
    /// No record is held in memory past this many bytes (see `read_records`).
    pub max_record: usize,
    /// A Parquet body's largest row group, and an Arrow stream's largest
    /// record batch, uncompressed.
    pub max_row_group_bytes: u64,
    /// Where a Parquet body is spooled (the system's temporary directory
    /// when `None`).
    pub spool_dir: Option<PathBuf>,
}

impl ReadLimits {
    /// Limits for text formats alone (a columnar body gets the defaults).
    pub fn records_up_to(max_record: usize) -> Self {
        ReadLimits {
            max_record,
            max_row_group_bytes: DEFAULT_MAX_ROW_GROUP_BYTES,
            spool_dir: None,
        }
    }
}

/// `IDEM_MAX_ROW_GROUP_BYTES`' default: 128 MiB.
pub const DEFAULT_MAX_ROW_GROUP_BYTES: u64 = 128 << 20;
