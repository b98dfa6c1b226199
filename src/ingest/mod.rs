//! Request bodies to typed rows, with no database in sight: the body formats,
//! per-type validation, the canonical encoding, row ids and content hashes.
//!
//! The way through: `formats` splits a body into raw records (each with its
//! line number), `encode` checks a record against the table and writes its
//! COPY line, `hash` folds row digests into an order-independent content hash.

pub mod cell;
pub mod encode;
pub mod formats;
pub mod hash;
pub mod infer;
mod json;

use serde::Serialize;

pub use encode::{EncodeOptions, EncodedRow, RowEncoder};
pub use formats::{read_records, BodyFormat, RawField, RawRecord, RecordSink};
pub use hash::ContentHash;

/// What is wrong with one row (or with the body at one place): the line it
/// starts on, the record number (1-based, CSV header excluded), and the column.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct RowError {
    pub line: u64,
    pub record: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub column: Option<String>,
    pub message: String,
}

impl std::fmt::Display for RowError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "line {}", self.line)?;
        if let Some(c) = &self.column {
            write!(f, ", column {c:?}")?;
        }
        write!(f, ": {}", self.message)
    }
}

/// The bad rows of one request: every one counted, the first `MAX_LISTED`
/// kept for the answer.
#[derive(Debug, Default)]
pub struct ErrorLog {
    pub count: u64,
    pub listed: Vec<RowError>,
}

impl ErrorLog {
    pub const MAX_LISTED: usize = 100;

    pub fn push(&mut self, error: RowError) {
        self.count += 1;
        if self.listed.len() < Self::MAX_LISTED {
            self.listed.push(error);
        }
    }

    pub fn is_empty(&self) -> bool {
        self.count == 0
    }
}
