//! NDJSON bodies: one JSON object a line, each read on its own.

use std::borrow::Cow;
use std::io::{self, BufRead};
use std::ops::ControlFlow;

use serde::de::{Deserializer, MapAccess, Visitor};
use serde_json::value::RawValue;

use super::line_blocks::{drop_rest_of_line, LineBlock};
use super::record::{too_large, RawField, RawRecord, ReadError, RecordSink};
use crate::ingest::RowError;

pub(super) fn read_ndjson<R: BufRead>(
    reader: R,
    sink: &mut impl RecordSink,
    max_record: usize,
) -> Result<(), ReadError> {
    read_ndjson_from(reader, sink, max_record, 0)
}

/// Reads the records of one block of a body cut by `LineBlocks` (its line
/// numbers those of the body; its records counted from 1 again).
pub fn read_ndjson_block(
    block: &LineBlock,
    sink: &mut impl RecordSink,
    max_record: usize,
) -> Result<(), ReadError> {
    let lines_before = block.first_line.saturating_sub(1);
    read_ndjson_from(&block.bytes[..], sink, max_record, lines_before)
}

fn read_ndjson_from<R: BufRead>(
    mut reader: R,
    sink: &mut impl RecordSink,
    max_record: usize,
    lines_before: u64,
) -> Result<(), ReadError> {
    let mut buf = Vec::with_capacity(1024);
    let (mut line, mut record) = (lines_before, 0u64);
    loop {
        buf.clear();
        let whole = match read_line_within(&mut reader, &mut buf, max_record)? {
            None => return Ok(()),
            Some(whole) => whole,
        };
        line += 1;
        let text = buf.trim_ascii();
        if whole && text.is_empty() {
            continue;
        }
        record += 1;
        let fed = if whole {
            let raw = buf.strip_suffix(b"\n").unwrap_or(&buf);
            let raw = raw.strip_suffix(b"\r").unwrap_or(raw);
            feed_object(raw, text, line, record, sink)
        } else {
            sink.record(
                None,
                Err(RowError {
                    line,
                    record,
                    column: None,
                    message: too_large(max_record),
                }),
            )
        };
        if fed.is_break() {
            return Ok(());
        }
    }
}

/// Reads one line into `buf`, but never more than `max` bytes of it: the
/// rest of a longer line is read and dropped. `None` at the end of the
/// body; otherwise whether the line fitted.
fn read_line_within<R: BufRead>(
    reader: &mut R,
    buf: &mut Vec<u8>,
    max: usize,
) -> io::Result<Option<bool>> {
    let limit = u64::try_from(max).unwrap_or(u64::MAX).saturating_add(1);
    if io::Read::take(&mut *reader, limit).read_until(b'\n', buf)? == 0 {
        return Ok(None);
    }
    if buf.len() <= max || buf.ends_with(b"\n") {
        return Ok(Some(true));
    }
    buf.clear();
    drop_rest_of_line(reader)?;
    Ok(Some(false))
}

/// One JSON object (`text`, within the record's bytes `raw`) to the sink.
pub(super) fn feed_object(
    raw: &[u8],
    text: &[u8],
    line: u64,
    record: u64,
    sink: &mut impl RecordSink,
) -> ControlFlow<()> {
    match parse_object(text) {
        Ok(fields) => sink.record(
            Some(raw),
            Ok(RawRecord {
                line,
                record,
                row_group: None,
                fields: &fields,
            }),
        ),
        Err(message) => sink.record(
            Some(raw),
            Err(RowError {
                line,
                record,
                column: None,
                message,
            }),
        ),
    }
}

/// A JSON object's fields in order, values left raw (borrowed, not parsed).
pub fn parse_object(text: &[u8]) -> Result<Vec<(Cow<'_, str>, RawField<'_>)>, String> {
    // Text checked as UTF-8 once, whole, spares the parser checking each
    // key and value on its own; other bytes get the parser's own answer.
    match std::str::from_utf8(text) {
        Ok(text) => parse_object_from(serde_json::Deserializer::from_str(text)),
        Err(_) => parse_object_from(serde_json::Deserializer::from_slice(text)),
    }
}

fn parse_object_from<'de, R: serde_json::de::Read<'de>>(
    mut de: serde_json::Deserializer<R>,
) -> Result<Vec<(Cow<'de, str>, RawField<'de>)>, String> {
    let fields = de.deserialize_any(ObjectVisitor).map_err(|e| {
        let msg = e.to_string();
        if e.is_data() {
            msg
        } else {
            format!("invalid JSON: {msg}")
        }
    })?;
    de.end().map_err(|e| format!("invalid JSON: {e}"))?;
    Ok(fields)
}

struct ObjectVisitor;

impl<'de> Visitor<'de> for ObjectVisitor {
    type Value = Vec<(Cow<'de, str>, RawField<'de>)>;

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("a JSON object (one row)")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let mut fields: Self::Value = Vec::with_capacity(16);
        while let Some(Key(key)) = map.next_key::<Key<'de>>()? {
            if fields.iter().any(|(k, _)| *k == key) {
                return Err(serde::de::Error::custom(format!(
                    "field {key:?} appears twice"
                )));
            }
            let value: &'de RawValue = map.next_value()?;
            fields.push((key, RawField::Json(value)));
        }
        Ok(fields)
    }
}

/// A key borrowed from the input when it has no escapes.
struct Key<'a>(Cow<'a, str>);

impl<'de> serde::Deserialize<'de> for Key<'de> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Key<'de>;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a string")
            }
            fn visit_borrowed_str<E>(self, v: &'de str) -> Result<Key<'de>, E> {
                Ok(Key(Cow::Borrowed(v)))
            }
            fn visit_str<E>(self, v: &str) -> Result<Key<'de>, E> {
                Ok(Key(Cow::Owned(v.to_owned())))
            }
        }
        d.deserialize_str(V)
    }
}
