//! Body formats (NDJSON, a JSON array, CSV; Parquet and Arrow IPC streams)
//! split into raw records, streaming from any `BufRead`. A record keeps its
//! line number (a columnar body's: its row number) so that every error can
//! name where it is; a record that cannot be read is reported and skipped, so
//! one request can list all of its bad rows.

mod arrow_frames;
mod arrow_text;
mod columnar;
mod columnar_errors;
mod csv;
mod csv_reader;
mod json_array;
mod line_blocks;
mod ndjson;
mod record;

use std::io::{self, BufRead, Read};

pub use line_blocks::{LineBlock, LineBlocks};
pub use ndjson::{parse_object, read_ndjson_block};
pub use record::{
    Chunk, RawField, RawRecord, ReadError, ReadLimits, RecordSink, DEFAULT_MAX_ROW_GROUP_BYTES,
    DELETED_FIELD,
};

pub(crate) use arrow_text::micros_text;
pub use columnar::{arrow_stream_columns, parquet_columns};
use columnar::{read_arrow_stream, read_parquet};
use csv::read_csv;
use json_array::read_json_array;
use ndjson::read_ndjson;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BodyFormat {
    Ndjson,
    JsonArray,
    Csv,
    Parquet,
    /// An Arrow IPC stream.
    ArrowStream,
}

impl BodyFormat {
    /// The format `name` names.
    pub fn from_name(name: &str) -> Option<Self> {
        [
            Self::Ndjson,
            Self::JsonArray,
            Self::Csv,
            Self::Parquet,
            Self::ArrowStream,
        ]
        .into_iter()
        .find(|f| f.name() == name)
    }

    /// The format's short name, as the rejects store keeps it.
    pub fn name(self) -> &'static str {
        match self {
            Self::Ndjson => "ndjson",
            Self::JsonArray => "json",
            Self::Csv => "csv",
            Self::Parquet => "parquet",
            Self::ArrowStream => "arrow",
        }
    }

    /// The format a bad row's raw form is kept in (and replayed from): a
    /// columnar body's row is kept as an NDJSON line.
    pub fn of_raw_records(self) -> Self {
        match self {
            Self::Parquet | Self::ArrowStream => Self::Ndjson,
            text => text,
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
            "application/vnd.apache.parquet" | "application/x-parquet" => Some(Self::Parquet),
            "application/vnd.apache.arrow.stream" => Some(Self::ArrowStream),
            _ => None,
        }
    }
}

/// Reads every record of the body into `sink`. No record is held in memory
/// past `max_record` bytes: a larger NDJSON line or JSON array element is a
/// bad row (skipped, reading goes on); a larger CSV record ends the body.
/// A Parquet body is spooled whole to a temporary file (gone when read) and
/// refused whole if a row group is larger than `max_row_group_bytes`; an
/// Arrow stream's record batch larger than that is refused when it comes.
pub fn read_records<R: BufRead>(
    format: BodyFormat,
    reader: R,
    sink: &mut impl RecordSink,
    limits: &ReadLimits,
) -> Result<(), ReadError> {
    let max_record = limits.max_record;
    match format {
        BodyFormat::Ndjson => read_ndjson(without_byte_order_mark(reader)?, sink, max_record),
        BodyFormat::JsonArray => {
            read_json_array(without_byte_order_mark(reader)?, sink, max_record)
        }
        BodyFormat::Csv => read_csv(without_byte_order_mark(reader)?, sink, max_record),
        BodyFormat::Parquet => read_parquet(reader, sink, limits),
        BodyFormat::ArrowStream => read_arrow_stream(reader, sink, limits),
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

#[cfg(test)]
mod tests {
    use std::ops::ControlFlow;

    use super::*;
    use crate::ingest::RowError;

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
                                RawField::Int(v) | RawField::Micros(v) => v.to_string(),
                                RawField::Date(d) => d.to_string(),
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
        let r = read_records(
            format,
            body.as_bytes(),
            &mut c,
            &ReadLimits::records_up_to(1 << 20),
        );
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
        assert!(read_records(
            BodyFormat::Ndjson,
            ndjson.as_bytes(),
            &mut c,
            &ReadLimits::records_up_to(1000)
        )
        .is_ok());
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
        assert!(read_records(
            BodyFormat::JsonArray,
            array.as_bytes(),
            &mut c,
            &ReadLimits::records_up_to(1000)
        )
        .is_ok());
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
        let r = read_records(
            BodyFormat::Csv,
            body.as_bytes(),
            &mut c,
            &ReadLimits::records_up_to(max),
        );
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
            &ReadLimits::records_up_to(max),
        );
        assert!(matches!(r, Err(ReadError::RecordTooLarge { .. })), "{r:?}");
        // Records within the limit pass, however many there are.
        let many: String = std::iter::once("a\n".to_string())
            .chain((0..20_000).map(|i| format!("{i}\n")))
            .collect();
        let mut c = Collect::default();
        assert!(read_records(
            BodyFormat::Csv,
            many.as_bytes(),
            &mut c,
            &ReadLimits::records_up_to(10)
        )
        .is_ok());
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
