//! An RFC 4180 record reader that keeps what the `csv` crate throws away:
//! whether a field was quoted. Postgres's CSV (and idem's `GET ?format=csv`)
//! writes NULL as an unquoted empty field and an empty string as `""`, so
//! reading its own export back needs the difference.
//!
//! It parses straight from the `BufRead`'s buffer, a run of plain bytes at a
//! time, counts physical lines whatever the line endings (`\n`, `\r\n`, `\r`),
//! and never holds more than one record (bounded by `max`).

use std::io::BufRead;

use super::record::ReadError;
use crate::ingest::RowError;

/// Where the reader stands within a record.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum At {
    /// Before a record: blank lines are skipped here.
    RecordStart,
    FieldStart,
    /// In a field's plain bytes (also after a quoted part, as `"ab"cd`).
    Unquoted,
    Quoted,
    /// Just after a `"` inside a quoted field: a second `"` is a quote,
    /// anything else ends the quoted part.
    QuoteInQuoted,
}

/// One record's fields, unescaped, end to end in one buffer.
#[derive(Default)]
struct Record {
    data: Vec<u8>,
    /// Each field's end in `data`, and whether it was quoted.
    ends: Vec<(usize, bool)>,
    quoted: bool,
    /// The physical line the record starts on.
    line: u64,
    /// The body's bytes the record has taken so far, as sent (quotes and
    /// line ends included; blank lines before it not).
    raw: Vec<u8>,
}

impl Record {
    fn end_field(&mut self) {
        self.ends.push((self.data.len(), self.quoted));
        self.quoted = false;
    }
}

pub struct CsvReader<R> {
    reader: R,
    max: usize,
    /// Line terminators read so far.
    lines: u64,
    /// The last byte read was `\r`: a `\n` right after it ends no new line.
    after_cr: bool,
    record: Record,
}

/// One field of the record last read: its bytes, and whether it was quoted.
pub struct Field<'a> {
    pub bytes: &'a [u8],
    pub quoted: bool,
}

impl<R: BufRead> CsvReader<R> {
    pub fn new(reader: R, max: usize) -> Self {
        CsvReader {
            reader,
            max,
            lines: 0,
            after_cr: false,
            record: Record::default(),
        }
    }

    /// The line the record last read starts on.
    pub fn line(&self) -> u64 {
        self.record.line
    }

    /// The record last read as it was sent, byte for byte, without the
    /// line end that closed it.
    pub fn raw(&self) -> &[u8] {
        let raw = &self.record.raw[..];
        raw.strip_suffix(b"\n")
            .or_else(|| raw.strip_suffix(b"\r"))
            .unwrap_or(raw)
    }

    pub fn field_count(&self) -> usize {
        self.record.ends.len()
    }

    /// The fields of the record last read.
    pub fn fields(&self) -> impl Iterator<Item = Field<'_>> {
        let r = &self.record;
        let starts = std::iter::once(0).chain(r.ends.iter().map(|&(end, _)| end));
        starts.zip(&r.ends).map(|(start, &(end, quoted))| Field {
            bytes: &r.data[start..end],
            quoted,
        })
    }

    /// Reads the next record; `false` at the end of the body. Blank lines
    /// are no records.
    pub fn next_record(&mut self) -> Result<bool, ReadError> {
        self.record.data.clear();
        self.record.ends.clear();
        self.record.quoted = false;
        self.record.raw.clear();
        let mut at = At::RecordStart;
        loop {
            let chunk = self.reader.fill_buf()?;
            if chunk.is_empty() {
                return self.at_end(at);
            }
            let (taken, done) = scan(
                chunk,
                &mut at,
                &mut self.record,
                &mut self.lines,
                &mut self.after_cr,
            );
            self.record.raw.extend_from_slice(&chunk[taken.clone()]);
            self.reader.consume(taken.end);
            if self.record.raw.len() > self.max {
                return Err(ReadError::RecordTooLarge {
                    line: self.record.line,
                    max: self.max,
                });
            }
            if done {
                return Ok(true);
            }
        }
    }

    fn at_end(&mut self, at: At) -> Result<bool, ReadError> {
        match at {
            At::RecordStart => Ok(false),
            At::Quoted => Err(ReadError::Malformed(RowError {
                line: self.record.line,
                record: 0,
                column: None,
                message: "the CSV body ends inside a quoted field".into(),
            })),
            At::FieldStart | At::Unquoted | At::QuoteInQuoted => {
                self.record.end_field();
                Ok(true)
            }
        }
    }
}

/// Counts the line terminators in `bytes` (`\r\n` is one).
fn count_lines(bytes: &[u8], lines: &mut u64, after_cr: &mut bool) {
    if memchr::memchr2(b'\n', b'\r', bytes).is_none() {
        *after_cr &= bytes.is_empty();
        return;
    }
    for &b in bytes {
        count_line(b, lines, after_cr);
    }
}

/// Takes one byte's part in the line count.
#[inline]
fn count_line(b: u8, lines: &mut u64, after_cr: &mut bool) {
    match b {
        b'\n' if !*after_cr => *lines += 1,
        b'\r' => *lines += 1,
        _ => {}
    }
    *after_cr = b == b'\r';
}

/// Takes bytes of `chunk` into `record` until the record ends; returns the
/// bytes it read (blank lines before the record among them, then the
/// record's own) and whether the record is whole.
fn scan(
    chunk: &[u8],
    at: &mut At,
    record: &mut Record,
    lines: &mut u64,
    after_cr: &mut bool,
) -> (std::ops::Range<usize>, bool) {
    let mut i = 0;
    let mut start = 0;
    let done = loop {
        let Some(&b) = chunk.get(i) else {
            break false;
        };
        match *at {
            At::RecordStart if b == b'\n' || b == b'\r' => {
                count_line(b, lines, after_cr);
                i += 1;
                start = i;
            }
            At::RecordStart => {
                record.line = *lines + 1;
                *at = At::FieldStart;
            }
            At::FieldStart if b == b'"' => {
                record.quoted = true;
                *after_cr = false;
                *at = At::Quoted;
                i += 1;
            }
            At::FieldStart => *at = At::Unquoted,
            At::Unquoted => {
                let (taken, ended) = plain_run(&chunk[i..], record, lines, after_cr);
                i += taken;
                match ended {
                    Some(b',') => *at = At::FieldStart,
                    Some(_) => break true,
                    None => {}
                }
            }
            At::Quoted => {
                let (taken, closed) = quoted_run(&chunk[i..], record, lines, after_cr);
                i += taken;
                if closed {
                    *at = At::QuoteInQuoted;
                }
            }
            At::QuoteInQuoted if b == b'"' => {
                record.data.push(b'"');
                *at = At::Quoted;
                i += 1;
            }
            // What follows a closing quote is read as the csv crate read
            // it: a separator, or more plain bytes.
            At::QuoteInQuoted => *at = At::Unquoted,
        }
    };
    (start..i, done)
}

/// Quoted bytes up to the next `"` (taken too); returns the bytes taken and
/// whether a `"` was among them.
fn quoted_run(
    rest: &[u8],
    record: &mut Record,
    lines: &mut u64,
    after_cr: &mut bool,
) -> (usize, bool) {
    let run = memchr::memchr(b'"', rest).unwrap_or(rest.len());
    count_lines(&rest[..run], lines, after_cr);
    record.data.extend_from_slice(&rest[..run]);
    if run == rest.len() {
        return (run, false);
    }
    *after_cr = false;
    (run + 1, true)
}

/// Plain bytes up to a separator or a line end, which ends the field; returns
/// the bytes taken and the byte that ended the field, if one did.
fn plain_run(
    rest: &[u8],
    record: &mut Record,
    lines: &mut u64,
    after_cr: &mut bool,
) -> (usize, Option<u8>) {
    let run = memchr::memchr3(b',', b'\n', b'\r', rest).unwrap_or(rest.len());
    record.data.extend_from_slice(&rest[..run]);
    if run > 0 {
        *after_cr = false;
    }
    let Some(&end) = rest.get(run) else {
        return (run, None);
    };
    record.end_field();
    count_line(end, lines, after_cr);
    (run + 1, Some(end))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn records(body: &[u8], buffer: usize) -> Vec<(u64, Vec<(String, bool)>)> {
        let reader = std::io::BufReader::with_capacity(buffer, body);
        let mut csv = CsvReader::new(reader, 1 << 20);
        let mut out = Vec::new();
        while csv.next_record().unwrap() {
            let fields = csv
                .fields()
                .map(|f| (String::from_utf8(f.bytes.to_vec()).unwrap(), f.quoted))
                .collect();
            out.push((csv.line(), fields));
        }
        out
    }

    fn f(text: &str, quoted: bool) -> (String, bool) {
        (text.to_string(), quoted)
    }

    #[test]
    fn quoted_empty_differs_from_unquoted_empty() {
        for buffer in [1, 2, 3, 64] {
            let got = records(b"a,b,c\n,\"\",\"x\"\"y\"\n", buffer);
            assert_eq!(got[1].1, [f("", false), f("", true), f("x\"y", true)]);
        }
    }

    #[test]
    fn lines_are_physical_whatever_the_endings() {
        let body = b"a,b\r\n1,\"x\r\ny\"\r\n\r\n2,z\r3,w\n\n4,v";
        for buffer in [1, 2, 5, 64] {
            let got = records(body, buffer);
            let lines: Vec<u64> = got.iter().map(|r| r.0).collect();
            assert_eq!(lines, [1, 2, 5, 6, 8], "buffer {buffer}");
            assert_eq!(got[1].1[1], f("x\r\ny", true));
            assert_eq!(got[4].1, [f("4", false), f("v", false)]);
        }
    }

    #[test]
    fn a_trailing_separator_is_an_empty_field_and_quotes_end_where_they_end() {
        let got = records(b"a,\n\"ab\"cd,e", 64);
        assert_eq!(got[0].1, [f("a", false), f("", false)]);
        assert_eq!(got[1].1, [f("abcd", true), f("e", false)]);
    }

    #[test]
    fn an_unterminated_quote_and_a_long_record_are_refused_where_they_start() {
        let mut csv = CsvReader::new(&b"a\n\"b\n"[..], 100);
        assert!(csv.next_record().unwrap());
        let err = csv.next_record().unwrap_err();
        assert!(matches!(
            err,
            ReadError::Malformed(RowError { line: 2, .. })
        ));
        let mut csv = CsvReader::new(&b"a\r\nb\r\n\"ccccc\r\ncc\"\r\n"[..], 8);
        assert!(csv.next_record().unwrap() && csv.next_record().unwrap());
        let err = csv.next_record().unwrap_err();
        assert!(matches!(err, ReadError::RecordTooLarge { line: 3, max: 8 }));
    }
}
