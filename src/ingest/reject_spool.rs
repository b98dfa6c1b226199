//! A load's rejects before they are kept: each bad record encoded, while
//! its body is decoded, as a binary COPY tuple of `idem.rejects` into a
//! spool (memory, then a temporary file past `SPOOL_MEMORY_BYTES`, so a
//! body of many bad rows stays in bounded memory), or only listed (a
//! replay's). No database here: `store::rejects::keep` COPYs the tuples in
//! the load's own transaction.

use std::fs::File;
use std::io::{self, Seek, Write};
use std::path::PathBuf;

use chrono::{DateTime, Utc};
use serde::Serialize;

use super::temporal::PG_EPOCH_UNIX_MICROS;
use super::BadRow;
use crate::binary_copy::TupleWriter;
use crate::ids::LoadId;
use crate::names::TableName;
use crate::period::Period;

/// A spool keeps this much in memory before it moves to a file.
const SPOOL_MEMORY_BYTES: usize = 1 << 20;

/// The columns of `idem.rejects` a spool's tuples fill, in order (the
/// COPY that keeps them is `store::rejects::keep`).
pub const COPY_COLUMNS: &str = "table_name, load_id, record, line, ds, origin, mode, format, raw, \
                            csv_header, errors, idempotency_key, received_at, last_tried_at";

/// What is the same for every reject of one load.
#[derive(Clone, Debug)]
pub struct RejectSource {
    pub table: TableName,
    pub load_id: LoadId,
    /// `put` or `post`.
    pub origin: &'static str,
    /// A POST's mode (`MergeMode::as_str`), which a replay writes by.
    pub mode: Option<&'static str>,
    /// `ndjson`, `json` or `csv`.
    pub format: &'static str,
    /// A PUT's partition (a POST row's own is read from the row, if it can be).
    pub ds: Option<Period>,
    pub idempotency_key: Option<String>,
    pub received_at: DateTime<Utc>,
}

/// One bad record, as the decoder saw it.
pub struct Reject<'a> {
    pub record: u64,
    pub line: u64,
    pub ds: Option<Period>,
    /// The record byte for byte; `None` when it was too large to keep.
    pub raw: Option<&'a [u8]>,
    pub csv_header: Option<&'a [u8]>,
    pub problems: &'a BadRow,
}

/// A load's rejects: as binary COPY tuples (in memory, then in a file) to
/// be kept, or only listed (a replay's, which updates the rejects it tried).
pub struct RejectSpool {
    target: SpoolTarget,
    count: u64,
}

enum SpoolTarget {
    Copy {
        source: RejectSource,
        memory: Vec<u8>,
        file: Option<File>,
        spool_dir: Option<PathBuf>,
    },
    List(Vec<ListedReject>),
}

/// A bad record of a replay: its number in the replay's body, and why.
#[derive(Clone, Debug)]
pub struct ListedReject {
    pub record: u64,
    pub problems: Vec<Problem>,
}

impl RejectSpool {
    /// Rejects to be kept (`keep`) as coming from `source`.
    pub fn copying(source: RejectSource, spool_dir: Option<PathBuf>) -> Self {
        RejectSpool {
            target: SpoolTarget::Copy {
                source,
                memory: Vec::new(),
                file: None,
                spool_dir,
            },
            count: 0,
        }
    }

    /// Rejects only listed, with their problems.
    pub fn listing() -> Self {
        RejectSpool {
            target: SpoolTarget::List(Vec::new()),
            count: 0,
        }
    }

    /// Rejects spooled.
    pub fn count(&self) -> u64 {
        self.count
    }

    /// The rejects listed (none when they were spooled to be kept).
    pub fn listed(&self) -> &[ListedReject] {
        match &self.target {
            SpoolTarget::List(listed) => listed,
            SpoolTarget::Copy { .. } => &[],
        }
    }

    /// The tuples to be kept; `None` for a spool that only lists.
    pub fn into_tuples(self) -> Option<SpooledTuples> {
        match self.target {
            SpoolTarget::Copy { memory, file, .. } => Some(SpooledTuples {
                count: self.count,
                file,
                memory,
            }),
            SpoolTarget::List(_) => None,
        }
    }

    /// Spools one reject (a file write past the memory bound).
    pub fn push(&mut self, reject: &Reject<'_>) -> io::Result<()> {
        self.count += 1;
        match &mut self.target {
            SpoolTarget::List(listed) => listed.push(ListedReject {
                record: reject.record,
                problems: problem_list(reject.problems),
            }),
            SpoolTarget::Copy {
                source,
                memory,
                file,
                spool_dir,
            } => {
                encode_tuple(source, reject, memory)?;
                if memory.len() >= SPOOL_MEMORY_BYTES {
                    spill(memory, file, spool_dir.as_deref())?;
                }
            }
        }
        Ok(())
    }
}

/// A spool's tuples, to be sent in order: its file's (when it spilled to
/// one), then those still in memory.
pub struct SpooledTuples {
    pub count: u64,
    file: Option<File>,
    memory: Vec<u8>,
}

impl SpooledTuples {
    /// The file of tuples spilled, rewound to be read from its start.
    pub fn file(&mut self) -> io::Result<Option<&mut File>> {
        if let Some(file) = &mut self.file {
            file.rewind()?;
        }
        Ok(self.file.as_mut())
    }

    /// The tuples after the file's.
    pub fn memory(&self) -> &[u8] {
        &self.memory
    }
}

/// Moves the tuples in memory to the spool's file (made on first use).
fn spill(
    memory: &mut Vec<u8>,
    file: &mut Option<File>,
    spool_dir: Option<&std::path::Path>,
) -> io::Result<()> {
    let file = match file {
        Some(file) => file,
        None => file.insert(match spool_dir {
            Some(dir) => tempfile::tempfile_in(dir)?,
            None => tempfile::tempfile()?,
        }),
    };
    file.write_all(memory)?;
    memory.clear();
    Ok(())
}

/// One tuple: every column of `COPY_COLUMNS`, as Postgres's binary COPY
/// reads it (a 32-bit length, -1 for null, then the bytes).
fn encode_tuple(source: &RejectSource, reject: &Reject<'_>, out: &mut Vec<u8>) -> io::Result<()> {
    let too_large = || io::Error::other("a rejected record is too large to keep");
    let record = i64::try_from(reject.record).map_err(|_| too_large())?;
    let line = i64::try_from(reject.line).map_err(|_| too_large())?;
    // A PUT's rejects belong to its partition, whatever day a row named.
    let ds = source.ds.or(reject.ds).map(|p| p.label());
    let mut errors = vec![1u8]; // jsonb's binary form: a version byte, then text
    serde_json::to_writer(&mut errors, &problem_list(reject.problems))?;
    // Postgres's timestamps count microseconds from 2000-01-01 UTC.
    let received = source.received_at.timestamp_micros() - PG_EPOCH_UNIX_MICROS;
    let fields: [Option<&[u8]>; 14] = [
        Some(source.table.as_str().as_bytes()),
        Some(source.load_id.as_bytes()),
        Some(&record.to_be_bytes()),
        Some(&line.to_be_bytes()),
        ds.as_deref().map(str::as_bytes),
        Some(source.origin.as_bytes()),
        source.mode.map(str::as_bytes),
        Some(source.format.as_bytes()),
        reject.raw,
        reject.csv_header,
        Some(&errors),
        source.idempotency_key.as_deref().map(str::as_bytes),
        Some(&received.to_be_bytes()),
        Some(&received.to_be_bytes()),
    ];
    let mut w = TupleWriter::new(out);
    w.tuple(14);
    for field in fields {
        w.field(field).map_err(|_| too_large())?;
    }
    Ok(())
}

/// One problem of a reject, as stored and listed.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct Problem {
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub column: Option<String>,
    pub message: String,
}

/// Every problem of a bad row: those naming a column, or its one without.
pub fn problem_list(row: &BadRow) -> Vec<Problem> {
    if row.columns.is_empty() {
        return vec![Problem {
            column: row.column.clone(),
            message: row.message.clone(),
        }];
    }
    row.columns
        .iter()
        .map(|p| Problem {
            column: Some(p.column.clone()),
            message: p.message.clone(),
        })
        .collect()
}
