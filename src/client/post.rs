//! `idem post TABLE FILE`: a file's rows POSTed in batches, each under a key
//! made from the table, the file's SHA-256 and the batch's number, so that
//! running the same command again (after a crash, a kill) sends only what
//! the server has no record of and is answered from its records for the
//! rest.

use std::time::Instant;

use async_compression::tokio::bufread::GzipDecoder;
use bytes::Bytes;
use serde_json::json;
use tokio::io::{AsyncBufRead, AsyncBufReadExt, BufReader};

use super::args::PostArgs;
use super::put::file_sha256;
use super::send::{send_until_settled, FileBody, Load, Payload};
use super::{post_key, Outcome};

/// Runs `idem post`.
pub async fn post(args: PostArgs) -> Outcome {
    let body = match FileBody::open(&args.file, args.format.as_deref()).await {
        Ok(body) if body.content_type != "application/json" => body,
        Ok(_) => {
            eprintln!("idem post: a JSON array is not split in batches; send NDJSON or CSV");
            return Outcome::Usage;
        }
        Err(why) => {
            eprintln!("idem post: {why}");
            return Outcome::Usage;
        }
    };
    match send_batches(&args, &body).await {
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

async fn send_batches(args: &PostArgs, body: &FileBody) -> Result<serde_json::Value, Outcome> {
    let unreadable = |e: std::io::Error| {
        eprintln!("idem post: cannot read {}: {e}", body.path().display());
        Outcome::Usage
    };
    let sha256 = file_sha256(body.path()).await.map_err(unreadable)?;
    let file = BufReader::new(body.reader().await.map_err(unreadable)?);
    let reader: Box<dyn AsyncBufRead + Send + Unpin> = if body.gzip {
        Box::new(BufReader::new(GzipDecoder::new(file)))
    } else {
        Box::new(file)
    };
    let csv = body.content_type == "text/csv";
    let mut records = Records::new(reader, csv).await.map_err(unreadable)?;
    let mut url = args.server.endpoint(&format!("/rows?table={}", args.table));
    if let Some(mode) = &args.mode {
        url.push_str(&format!("&mode={mode}"));
    }
    let started = Instant::now();
    let mut tally = Tally::default();
    while let Some(batch) = records.batch(args.batch_rows).await.map_err(unreadable)? {
        let load = Load {
            method: reqwest::Method::POST,
            url: url.clone(),
            key: post_key(&args.table, &sha256, tally.batches),
            what: format!("{} batch {}", args.table, tally.batches),
        };
        let payload = Payload::Bytes {
            data: batch,
            content_type: body.content_type,
        };
        let receipt = send_until_settled(&args.server, &load, &payload).await?;
        tally.add(&receipt);
    }
    if !args.server.quiet {
        eprintln!(
            "idem post: {}: {} batches ({} new, {} replayed), {} rows written, in {:.1} s",
            args.table,
            tally.batches,
            tally.batches - tally.replayed,
            tally.replayed,
            tally.rows_written,
            started.elapsed().as_secs_f64()
        );
    }
    Ok(json!({
        "table": args.table,
        "batches": tally.batches,
        "new": tally.batches - tally.replayed,
        "replayed": tally.replayed,
        "rows_received": tally.rows_received,
        "rows_written": tally.rows_written,
    }))
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

/// A body's records as sent, byte for byte: NDJSON lines, or CSV records
/// (a record ends at a line end outside quotes) under their header.
struct Records {
    reader: Box<dyn AsyncBufRead + Send + Unpin>,
    csv: bool,
    /// The CSV header, which starts every batch.
    header: Vec<u8>,
}

impl Records {
    async fn new(reader: Box<dyn AsyncBufRead + Send + Unpin>, csv: bool) -> std::io::Result<Self> {
        let mut records = Records {
            reader,
            csv,
            header: Vec::new(),
        };
        if csv {
            let mut header = Vec::new();
            records.next_into(&mut header).await?;
            records.header = header;
        }
        Ok(records)
    }

    /// The next batch of up to `rows` records, as a body; `None` at the end.
    async fn batch(&mut self, rows: u32) -> std::io::Result<Option<Bytes>> {
        let mut body = self.header.clone();
        let start = body.len();
        let mut taken = 0;
        while taken < rows && self.next_into(&mut body).await? {
            taken += 1;
        }
        Ok((body.len() > start).then(|| Bytes::from(body)))
    }

    /// Appends the next record (with its line end) to `out`; false at the end.
    async fn next_into(&mut self, out: &mut Vec<u8>) -> std::io::Result<bool> {
        let start = out.len();
        loop {
            let read = self.reader.read_until(b'\n', out).await?;
            if read == 0 {
                if out.len() > start && out.last() != Some(&b'\n') {
                    out.push(b'\n');
                }
                return Ok(out.len() > start);
            }
            // Inside quotes a CSV record goes on past the line end.
            let quotes = out[start..].iter().filter(|b| **b == b'"').count();
            if !self.csv || quotes % 2 == 0 {
                return Ok(true);
            }
        }
    }
}
