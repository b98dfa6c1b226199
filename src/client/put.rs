//! `idem put TABLE DS FILE`: a file as the whole content of one partition,
//! streamed, retried under one Idempotency-Key made from the table, the day
//! and the file's SHA-256 (so a rerun of the same command is a replay).

use std::path::Path;

use sha2::{Digest, Sha256};
use tokio::io::AsyncReadExt;

use super::args::PutArgs;
use super::send::{send_until_settled, FileBody, Load, Payload};
use super::{put_key, Outcome};

/// Runs `idem put`.
pub async fn put(args: PutArgs) -> Outcome {
    let body = match FileBody::open(&args.file, args.format.as_deref()).await {
        Ok(body) => body,
        Err(why) => {
            eprintln!("idem put: {why}");
            return Outcome::Usage;
        }
    };
    let sha256 = match file_sha256(body.path()).await {
        Ok(sha) => sha,
        Err(e) => {
            eprintln!("idem put: cannot read {}: {e}", body.path().display());
            return Outcome::Usage;
        }
    };
    let load = Load {
        method: reqwest::Method::PUT,
        url: args
            .server
            .endpoint(&format!("/partitions/{}/{}", args.table, args.ds)),
        key: put_key(&args.table, &args.ds, &sha256),
        what: format!("{} {}", args.table, args.ds),
    };
    match send_until_settled(&args.server, &load, &Payload::File(&body)).await {
        Ok(receipt) => {
            println!("{receipt}");
            Outcome::Done
        }
        Err(outcome) => outcome,
    }
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
