//! CSV bodies: a header of column names, then records by those names.

use std::borrow::Cow;
use std::io::BufRead;
use std::ops::ControlFlow;

use super::csv_reader::CsvReader;
use super::record::{RawField, RawRecord, ReadError, RecordSink};
use crate::ingest::RowError;

pub(super) fn read_csv<R: BufRead>(
    reader: R,
    sink: &mut impl RecordSink,
    max_record: usize,
) -> Result<(), ReadError> {
    let mut csv = CsvReader::new(reader, max_record);
    let Some(names) = read_csv_header(&mut csv)? else {
        return Ok(()); // an empty body: no header, no rows
    };
    let name_refs: Vec<&str> = names.iter().map(String::as_str).collect();
    sink.header(csv.raw(), &name_refs)
        .map_err(ReadError::Malformed)?;
    let mut record = 0u64;
    while csv.next_record()? {
        record += 1;
        if feed_csv_row(&names, &csv, record, sink).is_break() {
            break;
        }
    }
    Ok(())
}

/// The header's column names, trimmed; `None` for an empty body.
fn read_csv_header<R: BufRead>(csv: &mut CsvReader<R>) -> Result<Option<Vec<String>>, ReadError> {
    if !csv.next_record()? {
        return Ok(None);
    }
    let mut names: Vec<String> = Vec::with_capacity(csv.field_count());
    for (i, field) in csv.fields().enumerate() {
        let raw = field.bytes;
        let name = std::str::from_utf8(raw).map_err(|_| {
            ReadError::Malformed(RowError {
                line: csv.line(),
                record: 0,
                column: None,
                message: format!("header field {} is not valid UTF-8", i + 1),
            })
        })?;
        names.push(name.trim().to_string());
    }
    Ok(Some(names))
}

/// One CSV row to the sink: its fields by header name, or why it cannot be
/// read (a wrong field count, a field not in UTF-8). An unquoted empty field
/// is NULL and a quoted one (`""`) the empty string, as in Postgres's CSV.
fn feed_csv_row<R: BufRead>(
    names: &[String],
    csv: &CsvReader<R>,
    record: u64,
    sink: &mut impl RecordSink,
) -> ControlFlow<()> {
    let line = csv.line();
    let refused = |column: Option<&str>, message: String| RowError {
        line,
        record,
        column: column.map(str::to_string),
        message,
    };
    if csv.field_count() != names.len() {
        let message = format!(
            "has {} fields; the header has {}",
            csv.field_count(),
            names.len()
        );
        return sink.record(Some(csv.raw()), Err(refused(None, message)));
    }
    let mut fields: Vec<(Cow<str>, RawField)> = Vec::with_capacity(names.len());
    for (name, field) in names.iter().zip(csv.fields()) {
        let Ok(text) = std::str::from_utf8(field.bytes) else {
            let refusal = refused(Some(name), "is not valid UTF-8".into());
            return sink.record(Some(csv.raw()), Err(refusal));
        };
        let null = text.is_empty() && !field.quoted;
        fields.push((
            Cow::Borrowed(name.as_str()),
            RawField::Text((!null).then_some(text)),
        ));
    }
    sink.record(
        Some(csv.raw()),
        Ok(RawRecord {
            line,
            record,
            row_group: None,
            fields: &fields,
        }),
    )
}
