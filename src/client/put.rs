//! `idem put TABLE DS FILE`: a file as the whole content of one partition,
//! streamed, retried under one Idempotency-Key made from the table, the day
//! and the file's SHA-256 (so a rerun of the same command is a replay).

use std::path::Path;
use std::sync::Arc;

use sha2::{Digest, Sha256};
use tokio::io::AsyncReadExt;

use super::args::{PutArgs, ServerArgs};
use super::progress::{watched, Progress, Unit};
use super::send::{send_until_settled, FileBody, Load, Payload};
use super::{put_key, say, Outcome};

/// Runs `idem put`: the receipt on stdout.
pub async fn put(args: PutArgs) -> Outcome {
    let body = match FileBody::open(&args.file, args.format.as_deref()).await {
        Ok(body) => body,
        Err(why) => {
            eprintln!("idem put: {why}");
            return Outcome::Usage;
        }
    };
    let what = format!("{} {}", args.table, args.ds);
    let progress = Progress::new(&what, Unit::Bytes, None, watched(args.server.quiet));
    match put_file(
        &args.server,
        &args.table,
        &args.ds,
        &body,
        Arc::new(progress),
    )
    .await
    {
        Ok(receipt) => {
            say(&receipt);
            Outcome::Done
        }
        Err(outcome) => outcome,
    }
}

/// PUTs `body` as partition `ds` of `table` until it is settled, under the
/// key of the file's content; `progress` counts its bytes (its total is set
/// here, from the file's length).
pub(super) async fn put_file(
    server: &ServerArgs,
    table: &str,
    ds: &str,
    body: &FileBody,
    progress: Arc<Progress>,
) -> Result<serde_json::Value, Outcome> {
    let unreadable = |e: std::io::Error| {
        progress.note(&format!("idem: cannot read {}: {e}", body.path().display()));
        Outcome::Usage
    };
    let sha256 = file_sha256(body.path()).await.map_err(unreadable)?;
    progress.set_total(body.len().await.map_err(unreadable)?);
    let load = Load {
        method: reqwest::Method::PUT,
        url: server.endpoint(&["partitions", table, ds], &[])?,
        key: Some(put_key(table, ds, &sha256)),
        accept: None,
        what: format!("{table} {ds}"),
    };
    let settled = send_until_settled(server, &load, &Payload::File(body), &progress).await;
    progress.finish();
    settled
}

/// The SHA-256 of the file at `path`, hex.
pub(super) async fn file_sha256(path: &Path) -> std::io::Result<String> {
    let mut file = tokio::fs::File::open(path).await?;
    let mut hash = Sha256::new();
    let mut buf = vec![0u8; 256 * 1024];
    loop {
        let n = file.read(&mut buf).await?;
        if n == 0 {
            return Ok(hex::encode(hash.finalize()));
        }
        hash.update(&buf[..n]);
    }
}
