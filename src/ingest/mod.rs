//! Request bodies to typed rows, with no database in sight: the body formats,
//! per-type validation, the canonical encoding, row ids and content hashes.
//!
//! The way through: `formats` splits a body into raw records (each with its
//! line number), `encode` checks a record against the table and writes its
//! binary COPY tuple, `hash` folds row digests into an order-independent content hash.

pub mod cell;
mod csv_reader;
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

/// The bad rows of one request: every one counted, the first `max_listed`
/// kept for the answer, each cut to a line's length (the answer and the
/// ledger quote no more of the input than that).
#[derive(Debug)]
pub struct ErrorLog {
    pub count: u64,
    pub listed: Vec<RowError>,
    max_listed: usize,
}

/// The most of a column name or message an error quotes, in bytes.
pub const MAX_QUOTED: usize = 200;

impl Default for ErrorLog {
    fn default() -> Self {
        ErrorLog::new(100)
    }
}

impl ErrorLog {
    pub fn new(max_listed: usize) -> Self {
        ErrorLog {
            count: 0,
            listed: Vec::new(),
            max_listed,
        }
    }

    pub fn push(&mut self, mut error: RowError) {
        self.count += 1;
        if self.listed.len() < self.max_listed {
            if let Some(column) = &mut error.column {
                cut(column, MAX_QUOTED);
            }
            cut(&mut error.message, MAX_QUOTED);
            self.listed.push(error);
        }
    }

    pub fn is_empty(&self) -> bool {
        self.count == 0
    }
}

/// Cuts `text` to at most `max` bytes, on a character boundary, marking the cut.
fn cut(text: &mut String, max: usize) {
    if text.len() <= max {
        return;
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    text.truncate(end);
    text.push('…');
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_refusal_lists_a_bounded_number_of_short_errors() {
        let mut log = ErrorLog::new(2);
        for line in 1..=5 {
            log.push(RowError {
                line,
                record: line,
                column: Some("é".repeat(1000)),
                message: "x".repeat(10_000),
            });
        }
        assert_eq!(log.count, 5);
        assert_eq!(log.listed.len(), 2);
        let first = &log.listed[0];
        assert!(first.column.as_ref().unwrap().len() <= MAX_QUOTED + '…'.len_utf8());
        assert!(first.message.len() <= MAX_QUOTED + '…'.len_utf8());
    }
}
