//! `idem post TABLE FILE`: a file's rows POSTed in batches, each under a key
//! made from the table, the file's SHA-256 and the batch's number, so that
//! running the same command again (after a crash, a kill) sends only what
//! the server has no record of and is answered from its records for the
//! rest; or, with `--channel NAME --offset-from-line`, each with its last
//! record's number as the channel's offset, so that a rerun on the grown
//! file sends only the records after the committed offset.

use std::sync::Arc;
use std::time::Instant;

use idem::wire::receipts::PostAnswer;
use serde::Serialize;

use super::args::PostArgs;
use super::channels::committed_records;
use super::progress::{watched, Progress, Unit};
use super::put::file_sha256;
use super::receipts::{table_created_warning, Receipt, Written};
use super::records::Records;
use super::row_groups::{row_group_count, row_group_file};
use super::send::{is_columnar, send_until_settled, FileBody, Load, Payload, PARQUET};
use super::{post_key, say, Asks, Exit};

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

/// What makes a rerun send each batch once.
enum Resume {
    /// Each batch under an Idempotency-Key made from the table, the file's
    /// SHA-256 and the batch's number: a rerun of the same file is
    /// answered from the server's records.
    Keys { sha256: String },
    /// Each batch on the channel, with its last record's number as the
    /// offset: a rerun (of the same file grown, too) skips the records up
    /// to the committed offset, and a batch whose offset is committed is
    /// answered `"committed": false`.
    Channel { name: String, skipped: u64 },
}

/// What the batches added up to.
#[derive(Default)]
struct Tally {
    batches: u64,
    replayed: u64,
    rows_received: u64,
    /// By this run, and by the earlier runs whose batches were replayed.
    written: Written,
    /// The last committed offset a channel's answer named.
    committed_offset: Option<String>,
}

/// What `idem post` prints: the batches and rows, and on a channel where
/// it started and the offset it left.
#[derive(Serialize)]
struct Summary<'a> {
    table: &'a str,
    batches: u64,
    new: u64,
    replayed: u64,
    rows_received: u64,
    #[serde(flatten)]
    written: Written,
    #[serde(flatten)]
    channel: Option<ChannelSummary<'a>>,
}

/// A channel's part of the summary.
#[derive(Serialize)]
struct ChannelSummary<'a> {
    channel: &'a str,
    records_skipped: u64,
    committed_offset: String,
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
    if is_columnar(body.content_type) {
        return send_columnar(args, body, progress).await;
    }
    let mut records = Records::open(body).await.map_err(unreadable)?;
    let resume = match &args.channel {
        Some(name) => skip_committed(args, name, &mut records, progress).await?,
        None => Resume::Keys {
            sha256: file_sha256(body.path()).await.map_err(unreadable)?,
        },
    };
    let started = Instant::now();
    let mut tally = Tally::default();
    while let Some(batch) = records.batch(args.batch_rows).await.map_err(unreadable)? {
        let (url, key) = batch_target(args, &resume, tally.batches, records.taken())?;
        // Counted from 1, as people count them (the key counts from 0).
        let what = format!(
            "{} batch {} ({})",
            args.table,
            tally.batches + 1,
            batch.place
        );
        let load = post_load(url, key, what);
        let payload = Payload::Bytes {
            data: batch.body,
            content_type: body.content_type,
        };
        let receipt = send_until_settled(&args.server, &load, &payload, progress).await?;
        tally.add(&receipt.read, &args.table, progress);
        progress.advance(batch.file_bytes);
        progress.add_rows(batch.rows);
        catch_up(&receipt.read, &mut records)
            .await
            .map_err(unreadable)?;
    }
    progress.finish();
    progress.note(&tally.said(&args.table, started));
    Ok(tally.summary(&args.table, &resume))
}

/// A Parquet file, one POST a row group, or an Arrow stream (or a gzipped
/// file), sent whole as one; each under a key made from the file and its
/// number, so a rerun is answered from the server's records.
async fn send_columnar(
    args: &PostArgs,
    body: &FileBody,
    progress: &Arc<Progress>,
) -> Result<serde_json::Value, Exit> {
    let unreadable = |why: String| {
        progress.note(&format!(
            "idem post: cannot read {}: {why}",
            body.path().display()
        ));
        Exit::Usage
    };
    if args.channel.is_some() {
        progress.note("idem post: --channel counts records of NDJSON or CSV; a Parquet or Arrow file goes under keys");
        return Err(Exit::Usage);
    }
    let sha256 = file_sha256(body.path())
        .await
        .map_err(|e| unreadable(e.to_string()))?;
    let resume = Resume::Keys { sha256 };
    let by_row_group = body.content_type == PARQUET && !body.gzip;
    let batches = match by_row_group {
        true => {
            let path = body.path().to_path_buf();
            tokio::task::spawn_blocking(move || row_group_count(&path))
                .await
                .map_err(|e| unreadable(e.to_string()))?
                .map_err(unreadable)?
        }
        false => 1,
    };
    let started = Instant::now();
    let mut tally = Tally::default();
    for batch in 0..batches {
        let number = u64::try_from(batch).unwrap_or(u64::MAX);
        let (url, key) = batch_target(args, &resume, number, 0)?;
        let what = format!(
            "{} batch {} (row group {batch} of the file)",
            args.table,
            batch + 1
        );
        let payload = match by_row_group {
            true => row_group_payload(body, batch).await.map_err(unreadable)?,
            false => Payload::File(body),
        };
        let load = post_load(url, key, what);
        let receipt = send_until_settled(&args.server, &load, &payload, progress).await?;
        tally.add(&receipt.read, &args.table, progress);
    }
    progress.finish();
    progress.note(&tally.said(&args.table, started));
    Ok(tally.summary(&args.table, &resume))
}

/// Row group `batch` of a Parquet file, as a Parquet file of its own.
async fn row_group_payload(body: &FileBody, batch: usize) -> Result<Payload<'static>, String> {
    let path = body.path().to_path_buf();
    let (data, _) = tokio::task::spawn_blocking(move || row_group_file(&path, batch))
        .await
        .map_err(|e| e.to_string())??;
    Ok(Payload::Bytes {
        data: data.into(),
        content_type: PARQUET,
    })
}

/// The records the channel `name` has committed, passed over in
/// `records`. A file with fewer records is not the file the channel was
/// fed from (or was cut since): sending its tail would lose records.
async fn skip_committed(
    args: &PostArgs,
    name: &str,
    records: &mut Records,
    progress: &Progress,
) -> Result<Resume, Exit> {
    let committed = committed_records(&args.server, name).await?;
    let skipped = records.skip_records(committed).await.map_err(|e| {
        progress.note(&format!("idem post: cannot read the file: {e}"));
        Exit::Usage
    })?;
    if skipped < committed {
        progress.note(&format!(
            "idem post: channel {name} has committed {committed} records, but the file has \
             {skipped}: is it the channel's file? (`idem channels {name} --reset` starts over)"
        ));
        return Err(Exit::Usage);
    }
    Ok(Resume::Channel {
        name: name.to_string(),
        skipped,
    })
}

/// After a `"committed": false` answer: passes over the records up to the
/// offset the channel committed when it is past the batch's end (a run
/// killed with a request in flight, whose batch the server committed after
/// this run read the offset), so that no next batch starts inside a range
/// the server holds.
async fn catch_up(receipt: &PostAnswer, records: &mut Records) -> std::io::Result<()> {
    let committed = match receipt.channel() {
        Some(channel) if !channel.committed => channel.committed_offset.parse::<u64>(),
        _ => return Ok(()),
    };
    if let Ok(committed) = committed {
        records
            .skip_records(committed.saturating_sub(records.taken()))
            .await?;
    }
    Ok(())
}

/// Where batch `batch` (from 0), ending at record `last`, goes, and under
/// which Idempotency-Key.
fn batch_target(
    args: &PostArgs,
    resume: &Resume,
    batch: u64,
    last: u64,
) -> Result<(String, Option<String>), Exit> {
    match resume {
        Resume::Keys { sha256 } => {
            let asks = Asks {
                bad_rows: args.bad_rows.bad_rows.as_deref(),
                no_create: args.create.no_create,
            };
            let key = post_key(&args.table, sha256, batch, asks);
            Ok((rows_url(args, &[])?, Some(key)))
        }
        Resume::Channel { name, .. } => {
            let offset = last.to_string();
            let channel = [
                ("channel", name.as_str()),
                ("offset", offset.as_str()),
                ("offset_kind", "integer"),
            ];
            Ok((rows_url(args, &channel)?, None))
        }
    }
}

/// A POST of rows to `url` under `key`, named `what` in messages.
fn post_load(url: String, key: Option<String>, what: String) -> Load {
    Load {
        method: reqwest::Method::POST,
        url,
        key,
        accept: None,
        headers: Vec::new(),
        what,
    }
}

/// `POST /rows?table=…[&mode=…][&bad_rows=…][&create=false]` and `more`.
fn rows_url(args: &PostArgs, more: &[(&str, &str)]) -> Result<String, Exit> {
    let mut query = vec![("table", args.table.as_str())];
    if let Some(mode) = &args.mode {
        query.push(("mode", mode));
    }
    query.extend(args.bad_rows.query());
    query.extend(args.create.query());
    query.extend_from_slice(more);
    args.server.endpoint(&["rows"], &query)
}

impl Tally {
    /// A receipt of `table`; a channel's `"committed": false` (the batch's
    /// offset was committed before) counts as replayed: the server has its
    /// rows. A write that made the table says so on `progress`.
    fn add(&mut self, receipt: &PostAnswer, table: &str, progress: &Progress) {
        if let Some(warning) = table_created_warning(table, receipt) {
            progress.note(&warning);
        }
        self.batches += 1;
        let skipped = receipt.channel().is_some_and(|c| !c.committed);
        self.replayed += u64::from(receipt.replayed() || skipped);
        self.rows_received += receipt.rows_received();
        self.written.add(Written::of(receipt));
        if let Some(channel) = receipt.channel() {
            self.committed_offset = Some(channel.committed_offset.clone());
        }
    }

    /// What a run says when it ends (on stderr): what this run wrote apart
    /// from what the replayed batches had written before it.
    fn said(&self, table: &str, started: Instant) -> String {
        format!(
            "idem post: {table}: {} batches in {:.1} s ({} new, {} replayed): {}",
            self.batches,
            started.elapsed().as_secs_f64(),
            self.batches - self.replayed,
            self.replayed,
            self.written.said()
        )
    }

    /// The summary on stdout; with a channel, its name, the records skipped
    /// at the start and the offset committed at the end.
    fn summary(&self, table: &str, resume: &Resume) -> serde_json::Value {
        let channel = match resume {
            Resume::Channel { name, skipped } => Some(ChannelSummary {
                channel: name,
                records_skipped: *skipped,
                // Nothing sent: the offset stands where it was.
                committed_offset: self
                    .committed_offset
                    .clone()
                    .unwrap_or_else(|| skipped.to_string()),
            }),
            Resume::Keys { .. } => None,
        };
        let summary = Summary {
            table,
            batches: self.batches,
            new: self.batches - self.replayed,
            replayed: self.replayed,
            rows_received: self.rows_received,
            written: self.written,
            channel,
        };
        // A JSON value, so that its members print in name order.
        serde_json::to_value(summary).expect("a summary serializes")
    }
}
