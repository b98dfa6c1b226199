//! Stored rows to bytes, the mirror of `ingest`: the values of a binary
//! COPY written as a GET sends them (JSON byte for byte as `row_to_json`
//! writes them, Parquet and Arrow as typed arrays). Pure: `store` runs the
//! COPY and hands its tuples here; Postgres's own CSV needs no rendering.

pub mod columnar;
pub mod json;

/// The formats rows are read in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RowFormat {
    Ndjson,
    /// One JSON array of the rows.
    Json,
    Csv,
    /// A Parquet file (zstd), written by `columnar`.
    Parquet,
    /// An Arrow IPC stream, written by `columnar`.
    ArrowStream,
}

impl RowFormat {
    /// The `Content-Type` of rows read in this format.
    pub fn media_type(self) -> &'static str {
        match self {
            RowFormat::Csv => "text/csv; charset=utf-8",
            RowFormat::Ndjson => "application/x-ndjson",
            RowFormat::Json => "application/json",
            RowFormat::Parquet => "application/vnd.apache.parquet",
            RowFormat::ArrowStream => "application/vnd.apache.arrow.stream",
        }
    }

    pub fn is_columnar(self) -> bool {
        matches!(self, RowFormat::Parquet | RowFormat::ArrowStream)
    }
}
