//! Request bodies to typed rows, with no database in sight: the body formats,
//! per-type validation, the canonical encoding, row ids and content hashes.
//!
//! The way through: `formats` splits a body into raw records (each with its
//! line number), `encode` checks a record against the table and writes its
//! binary COPY tuple, `hash` folds row digests into an order-independent content hash.

pub mod cell;
mod column_hint;
pub mod encode;
pub mod formats;
pub mod hash;
pub mod infer;
mod json;
mod key_order;
mod numeric;
pub mod reject_spool;
pub(crate) mod temporal;
mod text;
mod tuple_size;

use serde::{Deserialize, Serialize};

pub use column_hint::not_a_column;
pub use encode::{EncodeOptions, EncodedRow, RowEncoder};
pub use formats::{
    read_ndjson_block, read_records, BodyFormat, LineBlock, LineBlocks, RawField, RawRecord,
    ReadLimits, RecordSink, DELETED_FIELD,
};
pub use hash::{ContentDelta, ContentHash};

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

/// A bad row's message with the Parquet row group (from 1) it is in named,
/// as every error of a Parquet body's row says it.
pub fn in_row_group(message: String, row_group: u64) -> String {
    format!("{message} (row group {row_group})")
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

/// One problem of a bad row: the column it is in, and what is wrong.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ColumnProblem {
    pub column: String,
    pub message: String,
}

/// One bad row as a refusal lists it: where it is, its first problem (as
/// `column` and `message`, the shape clients have always read), and every
/// problem that names a column, in the order they were found.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct BadRow {
    pub line: u64,
    pub record: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub column: Option<String>,
    pub message: String,
    pub columns: Vec<ColumnProblem>,
}

impl BadRow {
    /// Adds one more problem of this row, up to `MAX_LISTED_COLUMNS` of them.
    /// Whether it lists as many problems as a bad row lists: more add
    /// nothing.
    pub fn is_full(&self) -> bool {
        self.columns.len() >= MAX_LISTED_COLUMNS
    }

    pub fn add(&mut self, error: RowError) {
        let error = quoted(error);
        if let Some(column) = error.column {
            if self.columns.len() < MAX_LISTED_COLUMNS {
                self.columns.push(ColumnProblem {
                    column,
                    message: error.message,
                });
            }
        }
    }
}

impl From<RowError> for BadRow {
    fn from(error: RowError) -> Self {
        let error = quoted(error);
        let columns = match &error.column {
            Some(column) => vec![ColumnProblem {
                column: column.clone(),
                message: error.message.clone(),
            }],
            None => Vec::new(),
        };
        BadRow {
            line: error.line,
            record: error.record,
            column: error.column,
            message: error.message,
            columns,
        }
    }
}

/// `error` with its column name and message cut to what an answer quotes.
fn quoted(mut error: RowError) -> RowError {
    if let Some(column) = &mut error.column {
        cut(column, MAX_QUOTED);
    }
    cut(&mut error.message, MAX_QUOTED);
    error
}

impl std::fmt::Display for BadRow {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "line {}", self.line)?;
        if let Some(c) = &self.column {
            write!(f, ", column {c:?}")?;
        }
        write!(f, ": {}", self.message)?;
        for other in self.columns.iter().skip(usize::from(self.column.is_some())) {
            write!(f, "; column {:?}: {}", other.column, other.message)?;
        }
        Ok(())
    }
}

/// The bad rows of one request: every one counted once, however many of
/// its columns are bad; the first `max_listed` kept for the answer with their
/// problems, each cut to a line's length (the answer and the ledger quote no
/// more of the input than that).
#[derive(Debug)]
pub struct ErrorLog {
    /// Bad rows.
    pub count: u64,
    /// Problems found, one or more per bad row.
    pub problems: u64,
    pub listed: Vec<BadRow>,
    max_listed: usize,
    /// The line and record of the row the last problem was in: the problems
    /// of one row arrive together.
    last: Option<(u64, u64)>,
}

/// The most of a column name or message an error quotes, in bytes.
pub const MAX_QUOTED: usize = 200;
/// The most problems one listed row holds (a record can have thousands of
/// unknown fields; the answer stays small).
pub const MAX_LISTED_COLUMNS: usize = 64;

impl Default for ErrorLog {
    fn default() -> Self {
        ErrorLog::new(100)
    }
}

impl ErrorLog {
    pub fn new(max_listed: usize) -> Self {
        ErrorLog {
            count: 0,
            problems: 0,
            listed: Vec::new(),
            max_listed,
            last: None,
        }
    }

    /// Records one problem: the first of a new row counts the row and, room
    /// permitting, lists it; the next ones of that row join its entry.
    pub fn push(&mut self, error: RowError) {
        self.problems += 1;
        let row = (error.line, error.record);
        if self.last == Some(row) {
            if let Some(listed) = self.listed.last_mut() {
                if (listed.line, listed.record) == row {
                    listed.add(error);
                }
            }
            return;
        }
        self.last = Some(row);
        self.count += 1;
        if self.listed.len() < self.max_listed {
            self.listed.push(BadRow::from(error));
        }
    }

    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// Adds the bad rows of the next part of the body, logged on their own
    /// (their records counted from 1 again: `records_before` places them).
    pub fn append(&mut self, next: ErrorLog, records_before: u64) {
        self.count += next.count;
        self.problems += next.problems;
        let room = self.max_listed.saturating_sub(self.listed.len());
        self.listed
            .extend(next.listed.into_iter().take(room).map(|mut row| {
                row.record += records_before;
                row
            }));
        self.last = None;
    }

    /// The most rows it lists.
    pub fn max_listed(&self) -> usize {
        self.max_listed
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
        assert!(first.columns[0].column.len() <= MAX_QUOTED + '…'.len_utf8());
    }

    fn problem(line: u64, column: &str) -> RowError {
        RowError {
            line,
            record: line,
            column: Some(column.into()),
            message: format!("{column} is bad"),
        }
    }

    #[test]
    fn a_row_with_several_bad_columns_counts_once_and_lists_them_all() {
        let mut log = ErrorLog::new(1);
        for column in ["a", "b", "c"] {
            log.push(problem(4, column));
        }
        log.push(problem(5, "a"));
        log.push(problem(5, "b"));
        assert_eq!((log.count, log.problems), (2, 5));
        assert_eq!(log.listed.len(), 1, "bounded by rows, not problems");
        let row = &log.listed[0];
        assert_eq!(row.column.as_deref(), Some("a"));
        assert_eq!(row.message, "a is bad");
        let columns: Vec<_> = row.columns.iter().map(|c| c.column.as_str()).collect();
        assert_eq!(columns, ["a", "b", "c"]);
        assert_eq!(
            row.to_string(),
            "line 4, column \"a\": a is bad; column \"b\": b is bad; column \"c\": c is bad"
        );
    }

    #[test]
    fn a_row_lists_a_bounded_number_of_columns() {
        let mut log = ErrorLog::default();
        for i in 0..1000 {
            log.push(problem(1, &format!("c{i}")));
        }
        assert_eq!((log.count, log.problems), (1, 1000));
        assert_eq!(log.listed[0].columns.len(), MAX_LISTED_COLUMNS);
    }
}
