//! Columnar bodies: an Arrow IPC stream, read batch by batch as it arrives,
//! and a Parquet file, spooled to a temporary file first (its footer, which
//! says where its rows are, comes last) and read a batch at a time, no row
//! group over a bound. Each row reaches the sink as a record of text fields
//! (`arrow_text`), numbered from 1 in the body's order, so its values are
//! typed and checked as a CSV record's are; its raw form (a bad row's, kept
//! under quarantine) is the row as one JSON object, an NDJSON line.

use std::borrow::Cow;
use std::fs::File;
use std::io::{Read, Seek, SeekFrom, Write};
use std::ops::ControlFlow;

use chrono::Datelike;

use arrow_array::cast::AsArray;
use arrow_array::types::{
    Date32Type, Int16Type, Int32Type, Int64Type, Int8Type, TimestampMicrosecondType, UInt16Type,
    UInt32Type, UInt8Type,
};
use arrow_array::{Array, ArrayRef, RecordBatch};
use arrow_ipc::reader::StreamReader;
use arrow_schema::{ArrowError, DataType, Schema, TimeUnit};
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;

use super::arrow_frames::ArrowStream;
use super::arrow_text::{
    field_column_type, holds_json_text, is_nested, unsupported, write_json, write_text,
};
use super::columnar_errors::{arrow_error, broken, parquet_error};
use super::record::{Chunk, RawField, RawRecord, ReadError, ReadLimits, RecordSink};
use crate::ingest::{in_row_group, RowError};
use crate::schema::arrow_fields::TIMESTAMP_INFINITY;
use crate::schema::ColumnType;

/// Rows a batch read from Parquet holds (an Arrow stream's batches are the
/// ones it was written in).
const PARQUET_BATCH_ROWS: usize = 8192;

/// An Arrow IPC stream, a batch at a time, each message checked against
/// `limits` before arrow-rs decodes (and unpacks) it (see `arrow_frames`).
pub(super) fn read_arrow_stream<R: Read>(
    reader: R,
    sink: &mut impl RecordSink,
    limits: &ReadLimits,
) -> Result<(), ReadError> {
    let mut stream = ArrowStream::start(reader, limits.max_row_group_bytes)?;
    let mut rows = Rows::default();
    rows.start(stream.schema(), sink)?;
    while let Some(batch) = stream.next_batch(rows.next())? {
        if rows.feed(&batch, sink)?.is_break() {
            break;
        }
    }
    Ok(())
}

pub(super) fn read_parquet<R: Read>(
    mut reader: R,
    sink: &mut impl RecordSink,
    limits: &ReadLimits,
) -> Result<(), ReadError> {
    let mut file = spool(&mut reader, limits)?;
    check_footer(&mut file)?;
    let builder = ParquetRecordBatchReaderBuilder::try_new(file).map_err(|e| {
        parquet_error(
            e,
            1,
            "the body is not a Parquet file, or its footer is broken",
        )
    })?;
    let largest = builder
        .metadata()
        .row_groups()
        .iter()
        .enumerate()
        .find_map(|(i, group)| {
            let bytes = u64::try_from(group.total_byte_size()).unwrap_or(u64::MAX);
            (bytes > limits.max_row_group_bytes).then_some((i + 1, bytes))
        });
    if let Some((row_group, bytes)) = largest {
        return Err(ReadError::ChunkTooLarge {
            chunk: Chunk::RowGroup(row_group),
            bytes,
            max: limits.max_row_group_bytes,
        });
    }
    let counts = builder.metadata().row_groups().iter().map(|g| g.num_rows());
    let mut rows = Rows::in_row_groups(counts);
    rows.start(builder.schema(), sink)?;
    let batches = builder
        .with_batch_size(PARQUET_BATCH_ROWS)
        .build()
        .map_err(|e| parquet_error(e, 1, "the Parquet file cannot be read"))?;
    for batch in batches {
        let batch = batch.map_err(|e| arrow_error(e, rows.next(), "the Parquet file is broken"))?;
        if rows.feed(&batch, sink)?.is_break() {
            break;
        }
    }
    Ok(())
}

/// The columns of an Arrow stream and the idem type of each (`None`: a
/// type idem cannot hold), from the stream's head: its schema comes first.
pub fn arrow_stream_columns(head: &[u8]) -> Result<Vec<(String, Option<ColumnType>)>, ReadError> {
    let stream = StreamReader::try_new(head, None)
        .map_err(|e| arrow_error(e, 1, "the body is not an Arrow IPC stream"))?;
    Ok(columns(&stream.schema()))
}

/// The columns of a Parquet file, from its footer.
pub fn parquet_columns(mut file: File) -> Result<Vec<(String, Option<ColumnType>)>, ReadError> {
    check_footer(&mut file)?;
    let builder = ParquetRecordBatchReaderBuilder::try_new(file).map_err(|e| {
        parquet_error(
            e,
            1,
            "the body is not a Parquet file, or its footer is broken",
        )
    })?;
    Ok(columns(builder.schema()))
}

/// The most metadata a Parquet footer may declare: the reader holds it
/// whole, so a body cannot make it hold more than this.
const MAX_FOOTER_BYTES: u64 = 64 << 20;

/// Refuses a Parquet file whose footer declares more than
/// `MAX_FOOTER_BYTES` of metadata (anything else wrong with it is the
/// Parquet reader's to say).
fn check_footer(file: &mut File) -> Result<(), ReadError> {
    let mut tail = [0u8; 8];
    if file.seek(SeekFrom::End(-8)).is_err() || file.read_exact(&mut tail).is_err() {
        return Ok(());
    }
    let declared = u64::from(u32::from_le_bytes([tail[0], tail[1], tail[2], tail[3]]));
    if &tail[4..] == b"PAR1" && declared > MAX_FOOTER_BYTES {
        return Err(broken(
            1,
            "the Parquet footer is too large",
            &format!("it declares {declared} bytes of metadata, more than {MAX_FOOTER_BYTES}"),
        ));
    }
    Ok(())
}

fn columns(schema: &Schema) -> Vec<(String, Option<ColumnType>)> {
    schema
        .fields()
        .iter()
        .map(|f| (f.name().clone(), field_column_type(f)))
        .collect()
}

/// The body copied to an unnamed temporary file (gone once closed): a
/// failure to read is the body's (`Io`), one to write the spool's.
fn spool(reader: &mut impl Read, limits: &ReadLimits) -> Result<File, ReadError> {
    let mut file = match &limits.spool_dir {
        Some(dir) => tempfile::tempfile_in(dir),
        None => tempfile::tempfile(),
    }
    .map_err(ReadError::Spool)?;
    let mut chunk = vec![0u8; 256 * 1024];
    loop {
        let n = reader.read(&mut chunk)?;
        if n == 0 {
            return Ok(file);
        }
        file.write_all(&chunk[..n]).map_err(ReadError::Spool)?;
    }
}

/// The rows of one body, fed batch after batch.
#[derive(Default)]
struct Rows {
    /// Rows fed so far.
    fed: u64,
    /// A Parquet file's rows through the end of each row group, counted
    /// from its first (an Arrow stream has none): a bad row's error names
    /// its row group.
    row_group_ends: Vec<u64>,
}

impl Rows {
    /// The rows of a Parquet file whose row groups hold `counts` rows.
    fn in_row_groups(counts: impl Iterator<Item = i64>) -> Self {
        let mut end = 0u64;
        let row_group_ends = counts
            .map(|n| {
                end = end.saturating_add(u64::try_from(n).unwrap_or(0));
                end
            })
            .collect();
        Rows {
            fed: 0,
            row_group_ends,
        }
    }

    /// The row group (from 1) of row `line` (from 1), if the rows are a
    /// Parquet file's.
    fn row_group_of(&self, line: u64) -> Option<u64> {
        let i = self.row_group_ends.iter().position(|end| line <= *end)?;
        u64::try_from(i).ok().map(|i| i + 1)
    }

    /// The number of the next row.
    fn next(&self) -> u64 {
        self.fed + 1
    }

    /// Checks the schema once, before any row: every column's type has an
    /// idem column type, and its names pass the sink's header check (as a
    /// CSV header's do).
    fn start(&self, schema: &Schema, sink: &mut impl RecordSink) -> Result<(), ReadError> {
        for field in schema.fields() {
            if let Some(why) = unsupported(field.data_type()) {
                return Err(ReadError::Malformed(RowError {
                    line: 1,
                    record: 0,
                    column: Some(field.name().clone()),
                    message: format!("column of type {}: {why}", field.data_type()),
                }));
            }
        }
        let names: Vec<&str> = schema.fields().iter().map(|f| f.name().as_str()).collect();
        sink.header(b"", &names).map_err(ReadError::Malformed)?;
        let types: Vec<Option<ColumnType>> = schema
            .fields()
            .iter()
            .map(|f| field_column_type(f))
            .collect();
        sink.field_types(&names, &types);
        Ok(())
    }

    /// Feeds each row of `batch` to `sink` as a record (its cells as `Slot`s).
    fn feed(
        &mut self,
        batch: &RecordBatch,
        sink: &mut impl RecordSink,
    ) -> Result<ControlFlow<()>, ReadError> {
        let columns = batch
            .columns()
            .iter()
            .map(unpack)
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| arrow_error(e, self.next(), "a dictionary column cannot be read"))?;
        let schema = batch.schema();
        let names: Vec<&str> = schema.fields().iter().map(|f| f.name().as_str()).collect();
        let json_text: Vec<bool> = schema.fields().iter().map(|f| holds_json_text(f)).collect();
        let wants_raw = sink.wants_raw();
        let (mut text, mut slots, mut raw) = (String::new(), Vec::new(), String::new());
        for row in 0..batch.num_rows() {
            self.fed += 1;
            let cells = write_cells(&columns, row, &mut text, &mut slots);
            // A row that cannot be written out cannot be kept either: its
            // reject has no raw form (as a record over the size limit).
            let raw = (wants_raw
                && cells.is_ok()
                && row_as_json((&names, &json_text), &columns, row, &mut raw))
            .then_some(raw.as_bytes());
            let flow = match cells {
                Ok(()) => {
                    let fields: Vec<(Cow<'_, str>, RawField<'_>)> = (names.iter().zip(&slots))
                        .map(|(name, slot)| (Cow::Borrowed(*name), slot.field(&text)))
                        .collect();
                    let record = RawRecord {
                        line: self.fed,
                        record: self.fed,
                        row_group: self.row_group_of(self.fed),
                        fields: &fields,
                    };
                    sink.record(raw, Ok(record))
                }
                Err((column, message)) => {
                    let error = RowError {
                        line: self.fed,
                        record: self.fed,
                        column: Some(names[column].to_string()),
                        message: match self.row_group_of(self.fed) {
                            Some(row_group) => in_row_group(message, row_group),
                            None => message,
                        },
                    };
                    sink.record(None, Err(error))
                }
            };
            if flow.is_break() {
                return Ok(ControlFlow::Break(()));
            }
        }
        Ok(ControlFlow::Continue(()))
    }
}

/// A cell of a row: its text, at a span of the row's text (`None`: null),
/// or a value the typing takes as it is (a string, an integer, an instant
/// in microseconds), with no text written and read again.
#[derive(Clone, Copy)]
enum Slot<'a> {
    Span(Option<(usize, usize)>),
    Str(&'a str),
    Int(i64),
    Micros(i64),
    Date(chrono::NaiveDate),
}

/// Days from the first day of the common era to the Unix epoch.
const UNIX_EPOCH_DAYS_FROM_CE: i32 = 719_163;

impl<'a> Slot<'a> {
    /// The value as it is, if its array's type has such a form.
    fn direct(array: &'a dyn Array, row: usize) -> Option<Self> {
        Some(match array.data_type() {
            DataType::Utf8 => Slot::Str(array.as_string::<i32>().value(row)),
            DataType::LargeUtf8 => Slot::Str(array.as_string::<i64>().value(row)),
            DataType::Utf8View => Slot::Str(array.as_string_view().value(row)),
            DataType::Int64 => Slot::Int(array.as_primitive::<Int64Type>().value(row)),
            DataType::Int32 => Slot::Int(array.as_primitive::<Int32Type>().value(row).into()),
            DataType::Int16 => Slot::Int(array.as_primitive::<Int16Type>().value(row).into()),
            DataType::Int8 => Slot::Int(array.as_primitive::<Int8Type>().value(row).into()),
            DataType::UInt32 => Slot::Int(array.as_primitive::<UInt32Type>().value(row).into()),
            DataType::UInt16 => Slot::Int(array.as_primitive::<UInt16Type>().value(row).into()),
            DataType::UInt8 => Slot::Int(array.as_primitive::<UInt8Type>().value(row).into()),
            DataType::Timestamp(TimeUnit::Microsecond, _) => {
                let micros = array.as_primitive::<TimestampMicrosecondType>().value(row);
                // An infinity, or an instant chrono cannot hold, goes as text.
                let finite = micros.checked_abs() != Some(TIMESTAMP_INFINITY);
                (finite && chrono::DateTime::from_timestamp_micros(micros).is_some())
                    .then_some(Slot::Micros(micros))?
            }
            DataType::Date32 => {
                // An infinity, or a date `YYYY-MM-DD` cannot write, goes as text.
                let days = array.as_primitive::<Date32Type>().value(row);
                let date = days
                    .checked_add(UNIX_EPOCH_DAYS_FROM_CE)
                    .and_then(chrono::NaiveDate::from_num_days_from_ce_opt)
                    .filter(|d| (1..=9999).contains(&d.year()))?;
                Slot::Date(date)
            }
            _ => return None,
        })
    }

    fn field(self, text: &'a str) -> RawField<'a> {
        match self {
            Slot::Span(span) => RawField::Text(span.map(|(start, end)| &text[start..end])),
            Slot::Str(s) => RawField::Text(Some(s)),
            Slot::Int(v) => RawField::Int(v),
            Slot::Micros(v) => RawField::Micros(v),
            Slot::Date(d) => RawField::Date(d),
        }
    }
}

/// Each cell of `row` into `slots`, written into `text` where it goes as
/// text; or the first column whose value no column can hold, and why.
fn write_cells<'a>(
    columns: &'a [ArrayRef],
    row: usize,
    text: &mut String,
    slots: &mut Vec<Slot<'a>>,
) -> Result<(), (usize, String)> {
    text.clear();
    slots.clear();
    for (i, column) in columns.iter().enumerate() {
        let array = column.as_ref();
        if array.is_null(row) {
            slots.push(Slot::Span(None));
        } else if let Some(slot) = Slot::direct(array, row) {
            slots.push(slot);
        } else {
            let start = text.len();
            let present = write_text(array, row, text).map_err(|why| (i, why))?;
            slots.push(Slot::Span(present.then_some((start, text.len()))));
        }
    }
    Ok(())
}

/// A dictionary-encoded column as its values, once a batch (a cell at a
/// time would look its key up through the whole key array).
fn unpack(column: &ArrayRef) -> Result<ArrayRef, ArrowError> {
    if !matches!(column.data_type(), DataType::Dictionary(..)) {
        return Ok(column.clone());
    }
    let dictionary = column.as_any_dictionary();
    arrow_select::take::take(dictionary.values().as_ref(), dictionary.keys(), None)
}

/// The row as one JSON object, its columns in the body's order, into `out`
/// (emptied first); `false` when a value could not be written. A column of
/// JSON text (`json_text`) is written as its JSON where it is JSON.
fn row_as_json(
    (names, json_text): (&[&str], &[bool]),
    columns: &[ArrayRef],
    row: usize,
    out: &mut String,
) -> bool {
    out.clear();
    out.push('{');
    for ((name, column), json_text) in names.iter().zip(columns).zip(json_text) {
        // A nested column can only fill a jsonb column, whose SQL NULL an
        // NDJSON line writes by leaving the field out (`null` is jsonb's).
        if column.is_null(row) && is_nested(column.data_type()) {
            continue;
        }
        if out.len() > 1 {
            out.push(',');
        }
        out.push_str(&serde_json::to_string(name).unwrap_or_default());
        out.push(':');
        if *json_text && write_json_text(column.as_ref(), row, out) {
            continue;
        }
        if write_json(column.as_ref(), row, out).is_err() {
            return false;
        }
    }
    out.push('}');
    true
}

/// Writes a JSON-text value as the JSON it is; `false` (nothing written)
/// when it is null or not JSON.
fn write_json_text(column: &dyn Array, row: usize, out: &mut String) -> bool {
    let mut text = String::new();
    let is_json = matches!(write_text(column, row, &mut text), Ok(true))
        && serde_json::from_str::<serde::de::IgnoredAny>(&text).is_ok();
    if is_json {
        out.push_str(&text);
    }
    is_json
}
