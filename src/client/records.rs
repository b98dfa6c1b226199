//! A body file cut into batches of records, each record byte for byte as
//! the file has it: NDJSON lines, CSV records under the file's header
//! (repeated at the head of every batch), or a JSON array's elements (each
//! batch a JSON array of its own). Records are told apart as the server
//! reads them: blank lines are no records, a CSV record goes on past line
//! ends inside a quoted field and ends at `\n`, `\r\n` or `\r`.

use async_compression::tokio::bufread::GzipDecoder;
use bytes::Bytes;
use tokio::io::{AsyncBufRead, AsyncBufReadExt, BufReader};

use super::send::FileBody;

/// How a body's records are told apart.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Split {
    /// One record a line.
    Lines,
    /// CSV: a header, then records.
    Csv,
    /// The elements of one JSON array.
    JsonArray,
}

/// One batch: its body, where its records are in the file, and how many
/// bytes of the file it took (the header, counted in the first batch only).
pub struct Batch {
    pub body: Bytes,
    pub place: String,
    pub rows: u64,
    pub file_bytes: u64,
}

/// A body's records, batch by batch.
pub struct Records {
    reader: Box<dyn AsyncBufRead + Send + Unpin>,
    split: Split,
    /// The CSV header, which starts every batch.
    header: Vec<u8>,
    /// Records taken so far, lines passed (NDJSON and CSV), and bytes of
    /// the (unzipped) file read.
    taken: u64,
    lines: u64,
    read: u64,
    /// Bytes read when the last batch ended.
    read_before: u64,
    /// For a JSON array: its `[` was read, elements since, and its `]`.
    opened: bool,
    elements: u64,
    closed: bool,
}

impl Records {
    /// The records of `body`'s file, gunzipped (every member of a
    /// multi-member gzip, as the server reads it) when it is gzipped.
    pub async fn open(body: &FileBody) -> std::io::Result<Self> {
        let file = BufReader::new(body.reader().await?);
        let reader: Box<dyn AsyncBufRead + Send + Unpin> = if body.gzip {
            let mut gunzip = GzipDecoder::new(file);
            gunzip.multiple_members(true);
            Box::new(BufReader::new(gunzip))
        } else {
            Box::new(file)
        };
        let split = match body.content_type {
            "text/csv" => Split::Csv,
            "application/json" => Split::JsonArray,
            _ => Split::Lines,
        };
        Records::new(reader, split).await
    }

    async fn new(
        reader: Box<dyn AsyncBufRead + Send + Unpin>,
        split: Split,
    ) -> std::io::Result<Self> {
        let mut records = Records {
            reader,
            split,
            header: Vec::new(),
            taken: 0,
            lines: 0,
            read: 0,
            read_before: 0,
            opened: false,
            elements: 0,
            closed: false,
        };
        if split == Split::Csv {
            let mut header = Vec::new();
            records.next_csv_record_into(&mut header).await?;
            records.header = header;
        }
        Ok(records)
    }

    /// The next batch of up to `rows` records; `None` at the end.
    pub async fn batch(&mut self, rows: u32) -> std::io::Result<Option<Batch>> {
        let (first_record, first_line) = (self.taken + 1, self.lines + 1);
        let mut body = match self.split {
            Split::JsonArray => b"[".to_vec(),
            _ => self.header.clone(),
        };
        let mut taken = 0;
        while taken < rows && self.next_into(&mut body).await? {
            taken += 1;
        }
        if taken == 0 {
            return Ok(None);
        }
        self.taken += u64::from(taken);
        if self.split == Split::JsonArray {
            body.push(b']');
        }
        let place = match self.split {
            Split::JsonArray => format!("elements {first_record}-{}", self.taken),
            _ => format!("lines {first_line}-{} of the file", self.lines),
        };
        let file_bytes = self.read - self.read_before;
        self.read_before = self.read;
        Ok(Some(Batch {
            body: Bytes::from(body),
            place,
            rows: u64::from(taken),
            file_bytes,
        }))
    }

    /// Passes over the next `n` records (those a channel has committed);
    /// how many there were (fewer at the end of the file).
    pub async fn skip_records(&mut self, n: u64) -> std::io::Result<u64> {
        let mut record = Vec::new();
        let mut skipped = 0;
        while skipped < n {
            record.clear();
            if !self.next_into(&mut record).await? {
                break;
            }
            skipped += 1;
        }
        self.taken += skipped;
        Ok(skipped)
    }

    /// Records taken so far (skipped or batched): the number of the last
    /// batch's last record.
    pub fn taken(&self) -> u64 {
        self.taken
    }

    /// Appends the next record to `out` (a JSON element after a `,` when
    /// it is not the batch's first); false at the end.
    async fn next_into(&mut self, out: &mut Vec<u8>) -> std::io::Result<bool> {
        match self.split {
            Split::Lines => self.next_line_into(out).await,
            Split::Csv => self.next_csv_record_into(out).await,
            Split::JsonArray => {
                let comma = out.len() > 1;
                if comma {
                    out.push(b',');
                }
                let found = self.next_element_into(out).await?;
                if !found && comma {
                    out.pop();
                }
                Ok(found)
            }
        }
    }

    /// Appends the next line that is not blank (with the blank lines
    /// before it, and its line end) to `out`; false at the end.
    async fn next_line_into(&mut self, out: &mut Vec<u8>) -> std::io::Result<bool> {
        let start = out.len();
        loop {
            let line_start = out.len();
            let read = self.reader.read_until(b'\n', out).await?;
            self.count(&out[line_start..]);
            if read == 0 || out.last() != Some(&b'\n') {
                return Ok(self.end_record(out, start));
            }
            if !out[start..].iter().all(u8::is_ascii_whitespace) {
                return Ok(true);
            }
        }
    }

    /// Appends the next CSV record that is not a blank line (with the
    /// blank lines before it, and its line end) to `out`; false at the end.
    async fn next_csv_record_into(&mut self, out: &mut Vec<u8>) -> std::io::Result<bool> {
        let start = out.len();
        loop {
            let record_start = out.len();
            let ended = self.take_until(&mut CsvScan::default(), out).await?;
            if out.last() == Some(&b'\r') && self.peek().await? == Some(b'\n') {
                self.take(1, out).await?;
            }
            self.count(&out[record_start..]);
            if !ended {
                return Ok(self.end_record(out, start));
            }
            if !out[start..].iter().all(|b| matches!(b, b'\r' | b'\n')) {
                return Ok(true);
            }
        }
    }

    /// At the end of the file: whether a record is in `out` past `start`
    /// (given a line end if it lacks one); blank lines are none.
    fn end_record(&mut self, out: &mut Vec<u8>, start: usize) -> bool {
        if out[start..].iter().all(u8::is_ascii_whitespace) {
            return false;
        }
        if !matches!(out.last(), Some(b'\n' | b'\r')) {
            out.push(b'\n');
            self.lines += 1;
        }
        true
    }

    /// Counts the line ends of bytes just read (`\r\n` as one).
    fn count(&mut self, bytes: &[u8]) {
        let ends = bytes
            .iter()
            .enumerate()
            .filter(|(i, b)| **b == b'\n' || (**b == b'\r' && bytes.get(i + 1) != Some(&b'\n')))
            .count();
        self.lines += u64::try_from(ends).unwrap_or(u64::MAX);
    }

    /// Appends the array's next element to `out`, as sent; false after the
    /// closing `]`. What is not an array is an error: the server would
    /// refuse it whole.
    async fn next_element_into(&mut self, out: &mut Vec<u8>) -> std::io::Result<bool> {
        if !self.before_element().await? {
            return Ok(false);
        }
        if !self.take_until(&mut JsonScan::default(), out).await? {
            return Err(not_an_array(
                "the JSON array ends in the middle of an element",
            ));
        }
        self.elements += 1;
        Ok(true)
    }

    /// Reads up to the next element: the `[` or the `,` before it, and
    /// white space; false at the closing `]`.
    async fn before_element(&mut self) -> std::io::Result<bool> {
        if self.closed {
            return Ok(false);
        }
        let mut separated = self.elements == 0;
        loop {
            let Some(byte) = self.peek().await? else {
                return match self.opened {
                    false => Ok(false),
                    true => Err(not_an_array("the JSON array has no closing ]")),
                };
            };
            match byte {
                b' ' | b'\t' | b'\r' | b'\n' => {}
                b'[' if !self.opened => self.opened = true,
                b']' if self.opened => {
                    self.skip(1);
                    self.closed = true;
                    return Ok(false);
                }
                b',' if self.opened && !separated => separated = true,
                _ if self.opened && separated => return Ok(true),
                _ => return Err(not_an_array("a JSON body must be an array of rows")),
            }
            self.skip(1);
        }
    }

    /// Moves bytes to `out` until `scan` ends the record (true), or the
    /// file ends (false).
    async fn take_until(
        &mut self,
        scan: &mut impl Scan,
        out: &mut Vec<u8>,
    ) -> std::io::Result<bool> {
        loop {
            let buffer = self.reader.fill_buf().await?;
            if buffer.is_empty() {
                return Ok(false);
            }
            let end = buffer
                .iter()
                .enumerate()
                .find_map(|(i, byte)| match scan.step(*byte) {
                    Step::Go => None,
                    Step::EndBefore => Some(i),
                    Step::EndWith => Some(i + 1),
                });
            let taken = end.unwrap_or(buffer.len());
            out.extend_from_slice(&buffer[..taken]);
            self.skip(taken);
            if end.is_some() {
                return Ok(true);
            }
        }
    }

    /// Moves the next `n` bytes (already buffered) to `out`.
    async fn take(&mut self, n: usize, out: &mut Vec<u8>) -> std::io::Result<()> {
        let buffer = self.reader.fill_buf().await?;
        let n = n.min(buffer.len());
        out.extend_from_slice(&buffer[..n]);
        self.skip(n);
        Ok(())
    }

    fn skip(&mut self, n: usize) {
        self.reader.consume(n);
        self.read += u64::try_from(n).unwrap_or(u64::MAX);
    }

    async fn peek(&mut self) -> std::io::Result<Option<u8>> {
        Ok(self.reader.fill_buf().await?.first().copied())
    }
}

fn not_an_array(why: &str) -> std::io::Error {
    std::io::Error::new(std::io::ErrorKind::InvalidData, why.to_string())
}

/// What one byte does to a record being scanned.
enum Step {
    /// The record goes on.
    Go,
    /// The record ended before this byte.
    EndBefore,
    /// The record ends with this byte.
    EndWith,
}

trait Scan {
    fn step(&mut self, byte: u8) -> Step;
}

/// A CSV record: it ends at a line end outside quotes; a quote opens a
/// quoted field only at the field's start (elsewhere it is a character),
/// and `""` inside one is a quote.
struct CsvScan {
    in_quotes: bool,
    field_start: bool,
    /// The byte before closed a quoted field (or was the first of `""`).
    just_closed: bool,
}

impl Default for CsvScan {
    fn default() -> Self {
        CsvScan {
            in_quotes: false,
            field_start: true,
            just_closed: false,
        }
    }
}

impl Scan for CsvScan {
    fn step(&mut self, byte: u8) -> Step {
        let just_closed = std::mem::take(&mut self.just_closed);
        if self.in_quotes {
            if byte == b'"' {
                self.in_quotes = false;
                self.just_closed = true;
            }
            return Step::Go;
        }
        let field_start = std::mem::replace(&mut self.field_start, false);
        match byte {
            b'"' if field_start || just_closed => self.in_quotes = true,
            b',' => self.field_start = true,
            b'\n' | b'\r' => return Step::EndWith,
            _ => {}
        }
        Step::Go
    }
}

/// A JSON value: it ends at a `,`, `]` or white space outside strings and
/// brackets.
#[derive(Default)]
struct JsonScan {
    depth: u32,
    in_string: bool,
    escaped: bool,
}

impl Scan for JsonScan {
    fn step(&mut self, byte: u8) -> Step {
        if self.in_string {
            match (self.escaped, byte) {
                (true, _) => self.escaped = false,
                (false, b'\\') => self.escaped = true,
                (false, b'"') => self.in_string = false,
                _ => {}
            }
            return Step::Go;
        }
        match byte {
            b',' | b']' | b' ' | b'\t' | b'\r' | b'\n' if self.depth == 0 => {
                return Step::EndBefore
            }
            b'"' => self.in_string = true,
            b'{' | b'[' => self.depth += 1,
            b'}' | b']' => self.depth = self.depth.saturating_sub(1),
            _ => {}
        }
        Step::Go
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every batch of `text` read as `split`, `rows` records a batch.
    async fn batches(text: &'static str, split: Split, rows: u32) -> std::io::Result<Vec<String>> {
        let mut records = Records::new(Box::new(text.as_bytes()), split).await?;
        let mut out = Vec::new();
        while let Some(batch) = records.batch(rows).await? {
            out.push(String::from_utf8(batch.body.to_vec()).unwrap());
        }
        Ok(out)
    }

    #[tokio::test]
    async fn csv_records_are_cut_where_the_server_reads_them() {
        // Blank lines before the header; quoted line ends; a quote inside an
        // unquoted field is a character; `\r` and `\r\n` line ends; no line
        // end at the end.
        let csv = "\n\r\nid,note\r\n1,\"a\r\nb\"\r\n2,5\" tall\r3,\"say \"\"hi\"\"\"\n\n4,x";
        let got = batches(csv, Split::Csv, 2).await.unwrap();
        assert_eq!(
            got,
            [
                "\n\r\nid,note\r\n1,\"a\r\nb\"\r\n2,5\" tall\r",
                "\n\r\nid,note\r\n3,\"say \"\"hi\"\"\"\n\n4,x\n",
            ]
        );
        assert!(batches("id\n", Split::Csv, 5).await.unwrap().is_empty());

        // Skipped records count: the next batch starts after them, under
        // the header.
        let mut records = Records::new(Box::new(csv.as_bytes()), Split::Csv)
            .await
            .unwrap();
        assert_eq!(records.skip_records(3).await.unwrap(), 3);
        let rest = records.batch(5).await.unwrap().unwrap();
        assert_eq!(&rest.body[..], b"\n\r\nid,note\r\n\n4,x\n");
        assert_eq!(records.taken(), 4);
        assert_eq!(records.skip_records(2).await.unwrap(), 0, "past the end");
        assert!(batches("", Split::Csv, 5).await.unwrap().is_empty());
    }

    #[tokio::test]
    async fn ndjson_lines_skip_blank_ones_and_json_arrays_split_by_element() {
        let got = batches("{\"a\":1}\n\n  \n{\"a\":2}\r\n{\"a\":3}", Split::Lines, 2).await;
        assert_eq!(
            got.unwrap(),
            ["{\"a\":1}\n\n  \n{\"a\":2}\r\n", "{\"a\":3}\n"]
        );
        let json = " [ {\"s\": \"],\\\"\\\\\", \"n\": [1, [2]]} ,\n 7, \"x\" ] ";
        let got = batches(json, Split::JsonArray, 2).await.unwrap();
        assert_eq!(
            got,
            ["[{\"s\": \"],\\\"\\\\\", \"n\": [1, [2]]},7]", "[\"x\"]"]
        );
        assert!(batches("[]", Split::JsonArray, 2).await.unwrap().is_empty());
        assert!(batches("  ", Split::JsonArray, 2).await.unwrap().is_empty());
        assert!(batches("{\"a\":1}", Split::JsonArray, 2).await.is_err());
        assert!(batches("[1, 2", Split::JsonArray, 2).await.is_err());
        assert!(batches("[1 2]", Split::JsonArray, 2).await.is_err());
    }
}
