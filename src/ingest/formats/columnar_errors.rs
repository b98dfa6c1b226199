//! How a columnar body's failures are told: an I/O failure of the body
//! stays one (a body over its limit, a client gone); anything else arrow-rs
//! or the Parquet reader says is a broken body, at a row.

use std::io;

use arrow_schema::ArrowError;
use parquet::errors::ParquetError;

use super::record::ReadError;
use crate::ingest::RowError;

/// `e` as a body's failure, at row `line`; `what` says what broke.
pub(super) fn arrow_error(e: ArrowError, line: u64, what: &str) -> ReadError {
    match e {
        // The body ended inside a message: it was sent short.
        ArrowError::IoError(_, e) if e.kind() == io::ErrorKind::UnexpectedEof => {
            broken(line, what, &e.to_string())
        }
        ArrowError::IoError(_, e) => ReadError::Io(e),
        ArrowError::ExternalError(e) => match e.downcast::<io::Error>() {
            Ok(e) => ReadError::Io(*e),
            Err(e) => broken(line, what, &e.to_string()),
        },
        other => broken(line, what, &other.to_string()),
    }
}

pub(super) fn parquet_error(e: ParquetError, line: u64, what: &str) -> ReadError {
    match e {
        ParquetError::External(e) => match e.downcast::<io::Error>() {
            Ok(e) => ReadError::Io(*e),
            Err(e) => broken(line, what, &e.to_string()),
        },
        other => broken(line, what, &other.to_string()),
    }
}

pub(super) fn broken(line: u64, what: &str, detail: &str) -> ReadError {
    ReadError::Malformed(RowError {
        line,
        record: line.saturating_sub(1),
        column: None,
        message: format!("{what}: {detail}"),
    })
}
