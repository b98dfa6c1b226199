//! `idem post TABLE FILE`: a file's rows POSTed in batches, each under a key
//! made from the table, the file's SHA-256 and the batch's number, so that
//! running the same command again (after a crash, a kill) sends only what
//! the server has no record of and is answered from its records for the
//! rest.

use std::sync::Arc;
use std::time::Instant;

use async_compression::tokio::bufread::GzipDecoder;
use bytes::Bytes;
use serde_json::json;
use tokio::io::{AsyncBufRead, AsyncBufReadExt, BufReader};

use super::args::PostArgs;
use super::progress::{watched, Progress, Unit};
use super::put::file_sha256;
use super::send::{send_until_settled, FileBody, Load, Payload};
use super::{post_key, Outcome};

/// Runs `idem post`: a summary on stdout.
pub async fn post(args: PostArgs) -> Outcome {
    let body = match FileBody::open(&args.file, args.format.as_deref()).await {
        Ok(body) => body,
        Err(why) => {
            eprintln!("idem post: {why}");
            return Outcome::Usage;
        }
    };
    // A gzipped body's bytes count as they are after gunzip: no total.
    let total = match body.gzip {
        true => None,
        false => body.len().await.ok(),
    };
    let progress = Progress::new(
        args.table.clone(),
        Unit::Bytes,
        total,
        watched(args.server.quiet),
    );
    let sent = send_batches(&args, &body, &Arc::new(progress)).await;
    match sent {
        Ok(summary) => {
            println!("{summary}");
            Outcome::Done
        }
        Err(outcome) => outcome,
    }
}

/// What the batches added up to.
#[derive(Default)]
struct Tally {
    batches: u64,
    replayed: u64,
    rows_received: u64,
    rows_written: u64,
}

async fn send_batches(
    args: &PostArgs,
    body: &FileBody,
    progress: &Arc<Progress>,
) -> Result<serde_json::Value, Outcome> {
    let unreadable = |e: std::io::Error| {
        progress.note(&format!(
            "idem post: cannot read {}: {e}",
            body.path().display()
        ));
        Outcome::Usage
    };
    let sha256 = file_sha256(body.path()).await.map_err(unreadable)?;
    let mut records = Records::open(body).await.map_err(unreadable)?;
    let url = rows_url(args)?;
    let started = Instant::now();
    let mut tally = Tally::default();
    while let Some(batch) = records.batch(args.batch_rows).await.map_err(unreadable)? {
        let load = Load {
            method: reqwest::Method::POST,
            url: url.clone(),
            key: Some(post_key(&args.table, &sha256, tally.batches)),
            accept: None,
            what: format!("{} batch {} ({})", args.table, tally.batches, batch.place),
        };
        let payload = Payload::Bytes {
            data: batch.body,
            content_type: body.content_type,
        };
        let receipt = send_until_settled(&args.server, &load, &payload, progress).await?;
        tally.add(&receipt);
        progress.advance(batch.new_bytes);
        progress.add_rows(batch.rows);
    }
    progress.finish();
    progress.note(&format!(
        "idem post: {}: {} batches ({} new, {} replayed), {} rows written, in {:.1} s",
        args.table,
        tally.batches,
        tally.batches - tally.replayed,
        tally.replayed,
        tally.rows_written,
        started.elapsed().as_secs_f64()
    ));
    Ok(json!({
        "table": args.table,
        "batches": tally.batches,
        "new": tally.batches - tally.replayed,
        "replayed": tally.replayed,
        "rows_received": tally.rows_received,
        "rows_written": tally.rows_written,
    }))
}

/// `POST /rows?table=…[&mode=…]`.
fn rows_url(args: &PostArgs) -> Result<String, Outcome> {
    let mut query = vec![("table", args.table.as_str())];
    if let Some(mode) = &args.mode {
        query.push(("mode", mode));
    }
    args.server.endpoint(&["rows"], &query)
}

impl Tally {
    fn add(&mut self, receipt: &serde_json::Value) {
        let count = |field: &str| receipt[field].as_u64().unwrap_or(0);
        self.batches += 1;
        self.replayed += u64::from(receipt["replayed"] == true);
        self.rows_received += count("rows_received");
        self.rows_written += count("rows_written");
    }
}

/// How a body's records are told apart.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Split {
    /// One record a line.
    Lines,
    /// A record ends at a line end outside quotes; a header comes first.
    Csv,
    /// The elements of one JSON array.
    JsonArray,
}

/// One batch: its body, where its records are in the file, and how many
/// bytes of the file it holds (a CSV header repeated in every batch counts
/// once).
struct Batch {
    body: Bytes,
    place: String,
    rows: u64,
    new_bytes: u64,
}

/// A body's records as sent, byte for byte: NDJSON lines, CSV records
/// under their header, or a JSON array's elements.
struct Records {
    reader: Box<dyn AsyncBufRead + Send + Unpin>,
    split: Split,
    /// The CSV header, which starts every batch.
    header: Vec<u8>,
    /// Records taken so far, and lines (for NDJSON and CSV).
    taken: u64,
    lines: u64,
    /// For a JSON array: its `[` was read, elements since, and its `]`.
    opened: bool,
    elements: u64,
    closed: bool,
}

impl Records {
    async fn open(body: &FileBody) -> std::io::Result<Self> {
        let file = BufReader::new(body.reader().await?);
        let reader: Box<dyn AsyncBufRead + Send + Unpin> = if body.gzip {
            Box::new(BufReader::new(GzipDecoder::new(file)))
        } else {
            Box::new(file)
        };
        let split = match body.content_type {
            "text/csv" => Split::Csv,
            "application/json" => Split::JsonArray,
            _ => Split::Lines,
        };
        let mut records = Records {
            reader,
            split,
            header: Vec::new(),
            taken: 0,
            lines: 0,
            opened: false,
            elements: 0,
            closed: false,
        };
        if split == Split::Csv {
            let mut header = Vec::new();
            records.next_line_record_into(&mut header).await?;
            records.header = header;
        }
        Ok(records)
    }

    /// The next batch of up to `rows` records; `None` at the end.
    async fn batch(&mut self, rows: u32) -> std::io::Result<Option<Batch>> {
        let (first_record, first_line) = (self.taken + 1, self.lines + 1);
        let mut body = match self.split {
            Split::JsonArray => b"[".to_vec(),
            _ => self.header.clone(),
        };
        let start = body.len();
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
        Ok(Some(Batch {
            new_bytes: u64::try_from(body.len() - start).unwrap_or(u64::MAX),
            body: Bytes::from(body),
            place,
            rows: u64::from(taken),
        }))
    }

    /// Appends the next record to `out` (a JSON element after a `,` when
    /// it is not the batch's first); false at the end.
    async fn next_into(&mut self, out: &mut Vec<u8>) -> std::io::Result<bool> {
        match self.split {
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
            _ => self.next_line_record_into(out).await,
        }
    }

    /// Appends the next line (with its line end), or CSV record, to `out`;
    /// false at the end.
    async fn next_line_record_into(&mut self, out: &mut Vec<u8>) -> std::io::Result<bool> {
        let start = out.len();
        loop {
            let read = self.reader.read_until(b'\n', out).await?;
            if read == 0 {
                if out.len() > start && out.last() != Some(&b'\n') {
                    out.push(b'\n');
                    self.lines += 1;
                }
                return Ok(out.len() > start);
            }
            if out.last() == Some(&b'\n') {
                self.lines += 1;
            }
            // Inside quotes a CSV record goes on past the line end.
            let quotes = out[start..].iter().filter(|b| **b == b'"').count();
            if self.split != Split::Csv || quotes % 2 == 0 {
                return Ok(true);
            }
        }
    }

    /// Appends the array's next element to `out`, as sent; false after the
    /// closing `]`. What is not an array is an error: the server would
    /// refuse it whole.
    async fn next_element_into(&mut self, out: &mut Vec<u8>) -> std::io::Result<bool> {
        if !self.before_element().await? {
            return Ok(false);
        }
        let mut scan = JsonScan::default();
        while let Some(byte) = self.peek().await? {
            if scan.ends_before(byte) {
                self.elements += 1;
                return Ok(true);
            }
            out.push(byte);
            self.reader.consume(1);
        }
        Err(not_an_array(
            "the JSON array ends in the middle of an element",
        ))
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
                    self.reader.consume(1);
                    self.closed = true;
                    return Ok(false);
                }
                b',' if self.opened && !separated => separated = true,
                _ if self.opened && separated => return Ok(true),
                _ => return Err(not_an_array("a JSON body must be an array of rows")),
            }
            self.reader.consume(1);
        }
    }

    async fn peek(&mut self) -> std::io::Result<Option<u8>> {
        Ok(self.reader.fill_buf().await?.first().copied())
    }
}

fn not_an_array(why: &str) -> std::io::Error {
    std::io::Error::new(std::io::ErrorKind::InvalidData, why.to_string())
}

/// Where the scan of one JSON value stands: it ends at a `,`, `]` or white
/// space outside strings and brackets.
#[derive(Default)]
struct JsonScan {
    depth: u32,
    in_string: bool,
    escaped: bool,
}

impl JsonScan {
    /// Whether the value ended before `byte`; else takes `byte` in.
    fn ends_before(&mut self, byte: u8) -> bool {
        if self.in_string {
            match (self.escaped, byte) {
                (true, _) => self.escaped = false,
                (false, b'\\') => self.escaped = true,
                (false, b'"') => self.in_string = false,
                _ => {}
            }
            return false;
        }
        match byte {
            b',' | b']' | b' ' | b'\t' | b'\r' | b'\n' if self.depth == 0 => return true,
            b'"' => self.in_string = true,
            b'{' | b'[' => self.depth += 1,
            b'}' | b']' => self.depth = self.depth.saturating_sub(1),
            _ => {}
        }
        false
    }
}
