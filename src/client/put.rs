//! `idem put TABLE DS FILE`: a file as the whole content of one partition,
//! streamed, retried under one Idempotency-Key made from the table, the day
//! and the file's SHA-256 (so a rerun of the same command is a replay).

use std::path::Path;
use std::sync::Arc;

use sha2::{Digest, Sha256};
use tokio::io::AsyncReadExt;

use super::args::{BadRowsArg, PutArgs, ServerArgs};
use super::progress::{watched, Progress, Unit};
use super::send::{send_until_settled, FileBody, Load, Payload};
use super::{put_key, say, Exit};

/// Runs `idem put`: the receipt on stdout.
pub async fn put(args: PutArgs) -> Exit {
    let body = match FileBody::open(&args.file, args.format.as_deref()).await {
        Ok(body) => body,
        Err(why) => {
            eprintln!("idem put: {why}");
            return Exit::Usage;
        }
    };
    let what = format!("{} {}", args.table, args.ds);
    let progress = Progress::new(&what, Unit::Bytes, None, watched(args.server.quiet));
    let options = PutOptions {
        bad_rows: &args.bad_rows,
        if_match: args.if_match.as_deref(),
    };
    let target = PutTarget {
        table: &args.table,
        ds: &args.ds,
        options,
    };
    match put_file(&args.server, target, &body, Arc::new(progress)).await {
        Ok(receipt) => {
            say(&receipt);
            Exit::Done
        }
        Err(outcome) => outcome,
    }
}

/// What a PUT asks beyond its body.
#[derive(Clone, Copy)]
pub(super) struct PutOptions<'a> {
    pub bad_rows: &'a BadRowsArg,
    /// `If-Match`: an ETag, quoted here when it is not.
    pub if_match: Option<&'a str>,
}

/// The partition a PUT replaces, and how.
#[derive(Clone, Copy)]
pub(super) struct PutTarget<'a> {
    pub table: &'a str,
    pub ds: &'a str,
    pub options: PutOptions<'a>,
}

/// PUTs `body` as partition `ds` of `table` until it is settled, under the
/// key of the file's content (and bad-row policy); `progress` counts its
/// bytes (its total is set here, from the file's length).
pub(super) async fn put_file(
    server: &ServerArgs,
    target: PutTarget<'_>,
    body: &FileBody,
    progress: Arc<Progress>,
) -> Result<serde_json::Value, Exit> {
    let PutTarget { table, ds, options } = target;
    let unreadable = |e: std::io::Error| {
        progress.note(&format!("idem: cannot read {}: {e}", body.path().display()));
        Exit::Usage
    };
    let sha256 = file_sha256(body.path()).await.map_err(unreadable)?;
    progress.set_total(body.len().await.map_err(unreadable)?);
    let policy = options.bad_rows.bad_rows.as_deref();
    let query: Vec<_> = options.bad_rows.query().into_iter().collect();
    let load = Load {
        method: reqwest::Method::PUT,
        url: server.endpoint(&["partitions", table, ds], &query)?,
        key: Some(put_key(table, ds, &sha256, policy)),
        accept: None,
        headers: options.if_match.map(if_match).into_iter().collect(),
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

/// The `If-Match` header of `--if-match ETAG`: the ETag as the server sent
/// it (quoted), whether or not it was given with its quotes.
fn if_match(etag: &str) -> (&'static str, String) {
    let etag = etag.trim();
    let quoted = match etag.starts_with('"') || etag == "*" {
        true => etag.to_string(),
        false => format!("\"{etag}\""),
    };
    ("if-match", quoted)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_etag_given_bare_or_quoted_is_sent_quoted() {
        assert_eq!(if_match("9f2c").1, "\"9f2c\"");
        assert_eq!(if_match("\"9f2c\"").1, "\"9f2c\"");
        assert_eq!(if_match("*").1, "*");
    }
}
