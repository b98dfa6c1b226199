//! `idem post TABLE FILE`: a file's rows POSTed in batches, each under a key
//! made from the table, the file's SHA-256 and the batch's number, so that
//! running the same command again (after a crash, a kill) sends only what
//! the server has no record of and is answered from its records for the
//! rest.

use std::sync::Arc;
use std::time::Instant;

use serde_json::json;

use super::args::PostArgs;
use super::progress::{watched, Progress, Unit};
use super::put::file_sha256;
use super::records::Records;
use super::send::{send_until_settled, FileBody, Load, Payload};
use super::{post_key, say, Exit};

/// Runs `idem post`: a summary on stdout.
pub async fn post(args: PostArgs) -> Exit {
    let body = match FileBody::open(&args.file, args.format.as_deref()).await {
        Ok(body) => body,
        Err(why) => {
            eprintln!("idem post: {why}");
            return Exit::Usage;
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
            say(&summary);
            Exit::Done
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
) -> Result<serde_json::Value, Exit> {
    let unreadable = |e: std::io::Error| {
        progress.note(&format!(
            "idem post: cannot read {}: {e}",
            body.path().display()
        ));
        Exit::Usage
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
            key: Some(post_key(
                &args.table,
                &sha256,
                tally.batches,
                args.bad_rows.bad_rows.as_deref(),
            )),
            accept: None,
            headers: Vec::new(),
            // Counted from 1, as people count them (the key counts from 0).
            what: format!(
                "{} batch {} ({})",
                args.table,
                tally.batches + 1,
                batch.place
            ),
        };
        let payload = Payload::Bytes {
            data: batch.body,
            content_type: body.content_type,
        };
        let receipt = send_until_settled(&args.server, &load, &payload, progress).await?;
        tally.add(&receipt);
        progress.advance(batch.file_bytes);
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
fn rows_url(args: &PostArgs) -> Result<String, Exit> {
    let mut query = vec![("table", args.table.as_str())];
    if let Some(mode) = &args.mode {
        query.push(("mode", mode));
    }
    query.extend(args.bad_rows.query());
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
