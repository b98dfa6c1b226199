//! Body formats (NDJSON, a JSON array, CSV) split into raw records, streaming
//! from any `BufRead`. A record keeps its line number so that every error can
//! name where it is; a record that cannot be read is reported and skipped, so
//! one request can list all of its bad rows.

use std::borrow::Cow;
use std::io::{self, BufRead, Read};
use std::ops::ControlFlow;

use serde::de::{Deserializer, MapAccess, Visitor};
use serde_json::value::RawValue;

use super::csv_reader::CsvReader;
use super::RowError;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BodyFormat {
    Ndjson,
    JsonArray,
    Csv,
}

impl BodyFormat {
    /// The format `name` names.
    pub fn from_name(name: &str) -> Option<Self> {
        [Self::Ndjson, Self::JsonArray, Self::Csv]
            .into_iter()
            .find(|f| f.name() == name)
    }

    /// The format's short name, as the rejects store keeps it.
    pub fn name(self) -> &'static str {
        match self {
            Self::Ndjson => "ndjson",
            Self::JsonArray => "json",
            Self::Csv => "csv",
        }
    }

    /// From a `Content-Type` value, parameters ignored.
    pub fn from_content_type(value: &str) -> Option<Self> {
        let mime = value
            .split(';')
            .next()
            .unwrap_or("")
            .trim()
            .to_ascii_lowercase();
        match mime.as_str() {
            "application/x-ndjson"
            | "application/ndjson"
            | "application/jsonl"
            | "application/x-jsonl"
            | "application/jsonlines" => Some(Self::Ndjson),
            "application/json" => Some(Self::JsonArray),
            "text/csv" => Some(Self::Csv),
            _ => None,
        }
    }
}

/// One field's value before typing: a JSON value, or CSV text (`None` for an
/// empty field, which means NULL).
#[derive(Clone, Copy, Debug)]
pub enum RawField<'a> {
    Json(&'a RawValue),
    Text(Option<&'a str>),
}

pub struct RawRecord<'a> {
    pub line: u64,
    pub record: u64,
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
    fn record(
        &mut self,
        raw: Option<&[u8]>,
        record: Result<RawRecord<'_>, RowError>,
    ) -> ControlFlow<()>;
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
    Io(io::Error),
}

/// The message of a record refused for its size.
fn too_large(max: usize) -> String {
    format!("the record is larger than the limit of {max} bytes")
}

impl From<io::Error> for ReadError {
    fn from(e: io::Error) -> Self {
        ReadError::Io(e)
    }
}

/// Reads every record of the body into `sink`. No record is held in memory
/// past `max_record` bytes: a larger NDJSON line or JSON array element is a
/// bad row (skipped, reading goes on); a larger CSV record ends the body.
pub fn read_records<R: BufRead>(
    format: BodyFormat,
    reader: R,
    sink: &mut impl RecordSink,
    max_record: usize,
) -> Result<(), ReadError> {
    let reader = without_byte_order_mark(reader)?;
    match format {
        BodyFormat::Ndjson => read_ndjson(reader, sink, max_record),
        BodyFormat::JsonArray => read_json_array(reader, sink, max_record),
        BodyFormat::Csv => read_csv(reader, sink, max_record),
    }
}

/// The UTF-8 byte order mark that some tools (Excel, PowerShell, Notepad)
/// write before any text: no part of the body, in any format.
const BYTE_ORDER_MARK: [u8; 3] = [0xEF, 0xBB, 0xBF];

/// `reader` past a byte order mark at its start, if there is one.
fn without_byte_order_mark<R: BufRead>(
    mut reader: R,
) -> io::Result<io::Chain<io::Cursor<Vec<u8>>, R>> {
    let mut head = Vec::with_capacity(BYTE_ORDER_MARK.len());
    (&mut reader).take(3).read_to_end(&mut head)?;
    if head == BYTE_ORDER_MARK {
        head.clear();
    }
    Ok(io::Cursor::new(head).chain(reader))
}

fn read_ndjson<R: BufRead>(
    mut reader: R,
    sink: &mut impl RecordSink,
    max_record: usize,
) -> Result<(), ReadError> {
    let mut buf = Vec::with_capacity(1024);
    let (mut line, mut record) = (0u64, 0u64);
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
    loop {
        let chunk = reader.fill_buf()?;
        if chunk.is_empty() {
            return Ok(Some(false));
        }
        match chunk.iter().position(|&b| b == b'\n') {
            Some(end) => {
                reader.consume(end + 1);
                return Ok(Some(false));
            }
            None => {
                let n = chunk.len();
                reader.consume(n);
            }
        }
    }
}

/// One JSON object (`text`, within the record's bytes `raw`) to the sink.
fn feed_object(
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
    let mut de = serde_json::Deserializer::from_slice(text);
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

/// A JSON array of objects, read one element at a time: a small scanner finds
/// where each element ends (minding strings and nesting), and the element is
/// parsed on its own. The array as a whole is never in memory.
fn read_json_array<R: BufRead>(
    mut reader: R,
    sink: &mut impl RecordSink,
    max_record: usize,
) -> Result<(), ReadError> {
    let mut scan = Scanner {
        line: 1,
        max: max_record,
        oversized: false,
    };
    match scan.next_non_ws(&mut reader)? {
        None => return Ok(()), // an empty body is an empty array
        Some(b'[') => {}
        Some(_) => return Err(malformed(scan.line, 0, "expected a JSON array of objects")),
    }
    let mut element = Vec::with_capacity(1024);
    let mut record = 0u64;
    loop {
        let Some(first) = scan.next_non_ws(&mut reader)? else {
            return Err(malformed(scan.line, record, "the JSON array is not closed"));
        };
        if first == b']' && record == 0 {
            break;
        }
        record += 1;
        let start_line = scan.line;
        element.clear();
        element.push(first);
        let end = scan.rest_of_value(&mut reader, first, &mut element)?;
        if scan
            .feed_element(&element, start_line, record, sink)
            .is_break()
        {
            return Ok(());
        }
        let next = match end {
            Some(b) => Some(b),
            None => scan.next_non_ws(&mut reader)?,
        };
        match next {
            Some(b',') => continue,
            Some(b']') => break,
            _ => {
                return Err(malformed(
                    scan.line,
                    record,
                    "expected ',' or ']' after an array element",
                ))
            }
        }
    }
    match scan.next_non_ws(&mut reader)? {
        None => Ok(()),
        Some(_) => Err(malformed(
            scan.line,
            record,
            "trailing data after the JSON array",
        )),
    }
}

/// The body's structure is broken at `line`.
fn malformed(line: u64, record: u64, message: &str) -> ReadError {
    ReadError::Malformed(RowError {
        line,
        record,
        column: None,
        message: message.into(),
    })
}

struct Scanner {
    line: u64,
    /// The most of one element kept; past it, the element is scanned to its
    /// end and dropped, and `oversized` says so.
    max: usize,
    oversized: bool,
}

impl Scanner {
    /// The element just scanned to the sink: its fields, or that it was
    /// too large to keep.
    fn feed_element(
        &mut self,
        element: &[u8],
        line: u64,
        record: u64,
        sink: &mut impl RecordSink,
    ) -> ControlFlow<()> {
        if std::mem::take(&mut self.oversized) {
            return sink.record(
                None,
                Err(RowError {
                    line,
                    record,
                    column: None,
                    message: too_large(self.max),
                }),
            );
        }
        feed_object(element, element, line, record, sink)
    }

    /// Keeps `bytes` of the current element, unless it has grown past the limit.
    fn keep(&mut self, out: &mut Vec<u8>, bytes: &[u8]) {
        if self.oversized {
            return;
        }
        if out.len() + bytes.len() > self.max {
            self.oversized = true;
            *out = Vec::new();
            return;
        }
        out.extend_from_slice(bytes);
    }

    fn next_byte<R: BufRead>(&mut self, reader: &mut R) -> io::Result<Option<u8>> {
        let buf = reader.fill_buf()?;
        let Some(&b) = buf.first() else {
            return Ok(None);
        };
        reader.consume(1);
        if b == b'\n' {
            self.line += 1;
        }
        Ok(Some(b))
    }

    fn next_non_ws<R: BufRead>(&mut self, reader: &mut R) -> io::Result<Option<u8>> {
        while let Some(b) = self.next_byte(reader)? {
            if !b.is_ascii_whitespace() {
                return Ok(Some(b));
            }
        }
        Ok(None)
    }

    /// Copies the rest of a value that began with `first` into `out`. A
    /// scalar ends at the delimiter after it, which is returned.
    fn rest_of_value<R: BufRead>(
        &mut self,
        reader: &mut R,
        first: u8,
        out: &mut Vec<u8>,
    ) -> Result<Option<u8>, ReadError> {
        let mut nesting = match first {
            b'{' | b'[' => Nesting {
                depth: 1,
                in_string: false,
                escaped: false,
            },
            b'"' => Nesting {
                depth: 0,
                in_string: true,
                escaped: false,
            },
            _ => return self.rest_of_scalar(reader, out),
        };
        loop {
            // Copy whole runs of ordinary bytes at once, not byte by byte
            // through the reader.
            let buf = reader.fill_buf()?;
            if buf.is_empty() {
                return Err(unterminated(self.line));
            }
            let mut taken = 0;
            let mut done = false;
            for &b in buf {
                taken += 1;
                if b == b'\n' {
                    self.line += 1;
                }
                if nesting.ends_with(b) {
                    done = true;
                    break;
                }
            }
            self.keep(out, &buf[..taken]);
            reader.consume(taken);
            if done {
                return Ok(None);
            }
        }
    }

    /// A scalar element runs until a delimiter, which is returned (unless
    /// it is whitespace).
    fn rest_of_scalar<R: BufRead>(
        &mut self,
        reader: &mut R,
        out: &mut Vec<u8>,
    ) -> Result<Option<u8>, ReadError> {
        while let Some(b) = self.next_byte(reader)? {
            if b == b',' || b == b']' || b.is_ascii_whitespace() {
                return Ok(Some(b).filter(|b| !b.is_ascii_whitespace()));
            }
            self.keep(out, &[b]);
        }
        Err(unterminated(self.line))
    }
}

fn unterminated(line: u64) -> ReadError {
    ReadError::Malformed(RowError {
        line,
        record: 0,
        column: None,
        message: "the JSON array ends inside an element".into(),
    })
}

/// How far into a JSON object, array or string a scan is: only quotes,
/// backslashes and brackets matter to where the value ends.
struct Nesting {
    depth: u32,
    in_string: bool,
    escaped: bool,
}

impl Nesting {
    /// Takes the next byte; whether it ends the value.
    #[inline]
    fn ends_with(&mut self, b: u8) -> bool {
        if self.in_string {
            if self.escaped {
                self.escaped = false;
            } else if b == b'\\' {
                self.escaped = true;
            } else if b == b'"' {
                self.in_string = false;
                return self.depth == 0;
            }
            return false;
        }
        match b {
            b'"' => self.in_string = true,
            b'{' | b'[' => self.depth += 1,
            b'}' | b']' => {
                self.depth -= 1;
                return self.depth == 0;
            }
            _ => {}
        }
        false
    }
}

fn read_csv<R: BufRead>(
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
            fields: &fields,
        }),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// line, record, and the fields as (name, raw text)
    type Row = (u64, u64, Vec<(String, String)>);

    #[derive(Default)]
    struct Collect {
        rows: Vec<Row>,
        errors: Vec<RowError>,
        /// Every record's bytes as the reader gave them.
        raws: Vec<Option<Vec<u8>>>,
        /// The CSV header's.
        header: Vec<u8>,
    }

    impl RecordSink for Collect {
        fn header(&mut self, raw: &[u8], _names: &[&str]) -> Result<(), RowError> {
            self.header = raw.to_vec();
            Ok(())
        }

        fn record(
            &mut self,
            raw: Option<&[u8]>,
            record: Result<RawRecord<'_>, RowError>,
        ) -> ControlFlow<()> {
            self.raws.push(raw.map(<[u8]>::to_vec));
            match record {
                Ok(r) => self.rows.push((
                    r.line,
                    r.record,
                    r.fields
                        .iter()
                        .map(|(k, v)| {
                            let v = match v {
                                RawField::Json(raw) => raw.get().to_string(),
                                RawField::Text(t) => t.unwrap_or("<null>").to_string(),
                            };
                            (k.to_string(), v)
                        })
                        .collect(),
                )),
                Err(e) => self.errors.push(e),
            }
            ControlFlow::Continue(())
        }
    }

    fn read(format: BodyFormat, body: &str) -> (Collect, Result<(), ReadError>) {
        let mut c = Collect::default();
        let r = read_records(format, body.as_bytes(), &mut c, 1 << 20);
        (c, r)
    }

    fn raws(c: &Collect) -> Vec<Option<&str>> {
        c.raws
            .iter()
            .map(|r| r.as_deref().map(|r| std::str::from_utf8(r).unwrap()))
            .collect()
    }

    #[test]
    fn every_record_comes_with_its_bytes_as_sent_good_or_bad() {
        let ndjson = "{\"a\": 1}\r\n\n  {\"a\":\"x\" }\n{\"a\":\nnot json\n{\"b\":2}";
        let (c, r) = read(BodyFormat::Ndjson, ndjson);
        assert!(r.is_ok());
        let expected = [
            "{\"a\": 1}",
            "  {\"a\":\"x\" }",
            "{\"a\":",
            "not json",
            "{\"b\":2}",
        ];
        assert_eq!(raws(&c), expected.map(Some));
        let json = "[ {\"a\": 1},\n  {\"a\" : [1, \"]\"]}, 7 ]";
        let (c, r) = read(BodyFormat::JsonArray, json);
        assert!(r.is_ok());
        let expected = ["{\"a\": 1}", "{\"a\" : [1, \"]\"]}", "7"];
        assert_eq!(raws(&c), expected.map(Some));
        // A quoted newline and quotes stay as sent; a line end of either
        // kind closes a record and is not part of it.
        let csv = "a,b\r\n1,\"x\r\ny \"\"q\"\"\"\r\n\n2,\"\"\n3\n\"4\",5";
        let (c, r) = read(BodyFormat::Csv, csv);
        assert!(r.is_ok());
        let expected = ["1,\"x\r\ny \"\"q\"\"\"", "2,\"\"", "3", "\"4\",5"];
        assert_eq!(raws(&c), expected.map(Some));
        assert_eq!(
            c.errors.len(),
            1,
            "the record of one field is refused, with its bytes"
        );
        assert_eq!(c.header, b"a,b");
    }

    #[test]
    fn a_record_past_the_limit_is_a_bad_row_and_reading_goes_on() {
        let long = format!("{{\"a\":\"{}\"}}", "x".repeat(5000));
        let ndjson = format!("{{\"a\":1}}\n{long}\n{{\"a\":2}}\n");
        let mut c = Collect::default();
        assert!(read_records(BodyFormat::Ndjson, ndjson.as_bytes(), &mut c, 1000).is_ok());
        assert_eq!(c.rows.len(), 2);
        assert_eq!(
            c.rows[1].0, 3,
            "the line after the long one keeps its number"
        );
        assert_eq!(c.errors.len(), 1);
        assert_eq!((c.errors[0].line, c.errors[0].record), (2, 2));
        assert!(c.errors[0].message.contains("larger than the limit"));

        let array = format!("[{{\"a\":1}},\n{long},\n{{\"a\":2}}]");
        let mut c = Collect::default();
        assert!(read_records(BodyFormat::JsonArray, array.as_bytes(), &mut c, 1000).is_ok());
        assert_eq!(c.rows.len(), 2);
        assert_eq!(c.errors.len(), 1);
        assert_eq!(c.errors[0].line, 2);
    }

    #[test]
    fn a_csv_record_past_the_limit_ends_the_body_where_it_starts() {
        let max = 1000;
        let field = "y".repeat(256 * 1024);
        let body = format!("a,b\n1,x\n2,{field}\n3,z\n");
        let mut c = Collect::default();
        let r = read_records(BodyFormat::Csv, body.as_bytes(), &mut c, max);
        assert!(
            matches!(r, Err(ReadError::RecordTooLarge { max: 1000, .. })),
            "{r:?}"
        );
        assert_eq!(c.rows.len(), 1);
        let header = format!("{field}\n1\n");
        let r = read_records(
            BodyFormat::Csv,
            header.as_bytes(),
            &mut Collect::default(),
            max,
        );
        assert!(matches!(r, Err(ReadError::RecordTooLarge { .. })), "{r:?}");
        // Records within the limit pass, however many there are.
        let many: String = std::iter::once("a\n".to_string())
            .chain((0..20_000).map(|i| format!("{i}\n")))
            .collect();
        let mut c = Collect::default();
        assert!(read_records(BodyFormat::Csv, many.as_bytes(), &mut c, 10).is_ok());
        assert_eq!(c.rows.len(), 20_000);
    }

    #[test]
    fn ndjson_skips_blank_lines_and_reports_bad_lines() {
        let (c, r) = read(
            BodyFormat::Ndjson,
            "{\"a\":1}\n\n[1]\n{\"a\":\"x\\ny\"}\r\n",
        );
        assert!(r.is_ok());
        assert_eq!(c.rows.len(), 2);
        assert_eq!(c.rows[1].0, 4);
        assert_eq!(c.errors.len(), 1);
        assert_eq!(c.errors[0].line, 3);
    }

    #[test]
    fn json_array_elements_are_found_across_lines_and_strings() {
        let body = "[\n {\"a\": \"]},\\\"\"},\n {\"a\": {\"b\": [1,2]}}\n]";
        let (c, r) = read(BodyFormat::JsonArray, body);
        assert!(r.is_ok(), "{r:?}");
        assert_eq!(c.rows.len(), 2);
        assert_eq!(c.rows[0].2[0].1, "\"]},\\\"\"");
        assert_eq!(c.rows[1].0, 3);
        let (_, r) = read(BodyFormat::JsonArray, "[{\"a\":1},");
        assert!(matches!(r, Err(ReadError::Malformed(_))));
        let (c, r) = read(BodyFormat::JsonArray, "[]");
        assert!(r.is_ok() && c.rows.is_empty());
    }

    #[test]
    fn csv_keeps_quoted_commas_and_newlines_and_reads_empty_as_null() {
        let body = "a,b\n\"x, \"\"y\"\"\nz\",\n3,4\n";
        let (c, r) = read(BodyFormat::Csv, body);
        assert!(r.is_ok());
        assert_eq!(c.rows[0].2[0].1, "x, \"y\"\nz");
        assert_eq!(c.rows[0].2[1].1, "<null>");
        assert_eq!(c.rows[1].0, 4);
        assert_eq!(c.rows[1].1, 2); // Postgres's convention: `""` is the empty string.
        let (c, r) = read(BodyFormat::Csv, "a,b,c\n\"\",,\"\"\"\"\n");
        assert!(r.is_ok());
        assert_eq!(c.rows[0].2[0].1, "");
        assert_eq!(c.rows[0].2[1].1, "<null>");
        assert_eq!(c.rows[0].2[2].1, "\"");
    }

    #[test]
    fn a_byte_order_mark_is_skipped_before_json_as_before_csv() {
        for (format, body) in [
            (BodyFormat::Ndjson, "\u{feff}{\"a\":1}\n"),
            (BodyFormat::JsonArray, "\u{feff}[{\"a\":1}]"),
            (BodyFormat::Csv, "\u{feff}a\n1\n"),
        ] {
            let (c, r) = read(format, body);
            assert!(
                r.is_ok() && c.errors.is_empty(),
                "{format:?}: {:?}",
                c.errors
            );
            assert_eq!(c.rows[0].2[0].0, "a", "{format:?}");
            assert_eq!(c.rows[0].0, if format == BodyFormat::Csv { 2 } else { 1 });
        }
        // Only at the start, and only whole: anything else is the body's.
        let (c, _) = read(BodyFormat::Ndjson, "{\"a\":1}\n\u{feff}{\"a\":2}\n");
        assert_eq!(c.errors.len(), 1);
        assert!(read(BodyFormat::Ndjson, "").1.is_ok());
    }

    #[test]
    fn csv_lines_are_physical_lines_with_crlf_and_bad_rows_name_them() {
        let body = "\u{feff}a,b\r\n1,2\r\n\r\n3\r\n\"x\r\ny\",4\r\n5,6,7\r\n";
        let (c, r) = read(BodyFormat::Csv, body);
        assert!(r.is_ok());
        assert_eq!(c.rows[0].2[0].0, "a");
        let rows: Vec<(u64, u64)> = c.rows.iter().map(|r| (r.0, r.1)).collect();
        assert_eq!(rows, [(2, 1), (5, 3)]);
        let errors: Vec<(u64, u64)> = c.errors.iter().map(|e| (e.line, e.record)).collect();
        assert_eq!(errors, [(4, 2), (7, 4)]);
    }
}
