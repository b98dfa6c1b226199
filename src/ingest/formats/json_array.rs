//! JSON array bodies: an array of objects, read one element at a time.

use std::io::{self, BufRead};
use std::ops::ControlFlow;

use super::ndjson::feed_object;
use super::record::{too_large, ReadError, RecordSink};
use crate::ingest::RowError;

/// A JSON array of objects, read one element at a time: a small scanner finds
/// where each element ends (minding strings and nesting), and the element is
/// parsed on its own. The array as a whole is never in memory.
pub(super) fn read_json_array<R: BufRead>(
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
