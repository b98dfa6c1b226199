//! The client side of the `idem` binary (`idem put`, `idem post`, …): what
//! orchestrators and people run to load files into an idem server, with the
//! discipline every caller needs (one Idempotency-Key for every retry of a
//! load, retries only of what a retry can cure, exit codes a task can act
//! on). It talks to the server over HTTP only: of the library it uses the
//! forms of the answers it reads (`wire`, and the types they are made of)
//! and `period` (what a partition is called). It belongs to the binary, not
//! to the library, so no part of the server can reach it.

pub mod args;
pub mod backfill;
mod backfill_atomic;
pub mod channels;
pub mod load;
pub mod post;
mod progress;
pub mod put;
mod receipts;
mod records;
pub mod rejects;
pub mod retry;
mod row_groups;
mod send;
pub mod show;
pub mod tables;
pub mod watch;

/// How a client command ends, as its process's exit code.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Exit {
    /// Every load was accepted.
    Done,
    /// The server refused a load (a 4xx a retry cannot cure).
    Refused,
    /// A load was still failing (no answer, a 5xx, …) when the retries
    /// ran out.
    GaveUp,
    /// The command was wrong (arguments, a file that cannot be read).
    Usage,
}

impl Exit {
    /// The documented exit code: 0, 1, 2 or 3.
    pub fn exit_code(self) -> u8 {
        match self {
            Exit::Done => 0,
            Exit::Refused => 1,
            Exit::GaveUp => 2,
            Exit::Usage => 3,
        }
    }
}

/// Writes a command's result on stdout. A reader that stopped early
/// (`idem loads | head`) is no failure, and no panic as with `println!`.
fn say(text: impl std::fmt::Display) {
    use std::io::Write;
    let _ = writeln!(std::io::stdout().lock(), "{text}");
}

/// The first 32 hex digits of a file's SHA-256: enough to tell files apart.
fn short(file_sha256: &str) -> &str {
    file_sha256.get(..32).unwrap_or(file_sha256)
}

/// What a write asks in its URL's query beyond its table (`?bad_rows=`,
/// `?create=false`). The server holds a key to the request's query, so each
/// ask is named in the key: the same file asked otherwise is another request,
/// not a reused key.
#[derive(Clone, Copy, Debug, Default)]
pub struct Asks<'a> {
    pub bad_rows: Option<&'a str>,
    pub no_create: bool,
}

/// The Idempotency-Key of `PUT /partitions/{table}/{ds}` of a file whose
/// SHA-256 is `file_sha256` (hex): the same file put again is the same
/// load, so a rerun of the command is answered as a replay.
pub fn put_key(table: &str, ds: &str, file_sha256: &str, asks: Asks<'_>) -> String {
    with_asks(
        format!("idem-put:{table}:{ds}:{}", short(file_sha256)),
        asks,
    )
}

/// The Idempotency-Key of `POST /loads` with `body`: the same command
/// (table, target, audits) opens the same load again.
pub fn load_key(table: &str, body: &serde_json::Value) -> String {
    use sha2::{Digest, Sha256};
    let sha256 = hex::encode(Sha256::digest(body.to_string().as_bytes()));
    format!("idem-load:{table}:{}", short(&sha256))
}

/// The Idempotency-Key of the load of `idem backfill --atomic`: its range
/// and every day's file (`(ds, SHA-256)`), so a rerun with the same files
/// resumes (or replays) the same load, and other files open another.
pub fn backfill_key(table: &str, from: &str, to: &str, files: &[(String, String)]) -> String {
    use sha2::{Digest, Sha256};
    let mut hash = Sha256::new();
    for (ds, file_sha256) in files {
        hash.update(format!("{ds}={file_sha256}\n").as_bytes());
    }
    let sha256 = hex::encode(hash.finalize());
    format!("idem-backfill:{table}:{from}:{to}:{}", short(&sha256))
}

/// The Idempotency-Key of batch `batch` (from 0; messages count from 1) of
/// a file POSTed to `table`: a rerun sends only the batches the server has
/// no record of.
pub fn post_key(table: &str, file_sha256: &str, batch: u64, asks: Asks<'_>) -> String {
    with_asks(
        format!("idem-post:{table}:{}:{batch}", short(file_sha256)),
        asks,
    )
}

/// A key with the `--audit` it was sent under: other audits make another
/// request (the server would refuse the key as reused).
fn with_audit(key: String, audit: Option<&str>) -> String {
    use sha2::{Digest, Sha256};
    match audit {
        Some(audit) => {
            let sha256 = hex::encode(Sha256::digest(audit.as_bytes()));
            format!("{key}:audit={}", short(&sha256))
        }
        None => key,
    }
}

/// A key with the `--bad-rows` and `--no-create` it was sent under: the
/// same file under another policy is another request (the server would
/// refuse the key as reused), so a rerun with `--bad-rows quarantine` after
/// a refusal writes. A key without them is as it always was.
fn with_asks(mut key: String, asks: Asks<'_>) -> String {
    if let Some(policy) = asks.bad_rows {
        key.push_str(&format!(":bad_rows={policy}"));
    }
    if asks.no_create {
        key.push_str(":create=false");
    }
    key
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_name_the_load_and_fit_the_header() {
        let sha = "9f2c".repeat(16);
        let none = Asks::default();
        let key = put_key("orders", "2026-10-12", &sha, none);
        assert_eq!(key, format!("idem-put:orders:2026-10-12:{}", &sha[..32]));
        assert_ne!(key, put_key("orders", "2026-10-13", &sha, none));
        let quarantine = Asks {
            bad_rows: Some("quarantine"),
            no_create: false,
        };
        assert_eq!(
            put_key("orders", "2026-10-12", &sha, quarantine),
            format!("{key}:bad_rows=quarantine")
        );
        let no_create = Asks {
            no_create: true,
            ..none
        };
        assert_eq!(
            put_key("orders", "2026-10-12", &sha, no_create),
            format!("{key}:create=false")
        );
        assert_ne!(
            post_key("orders", &sha, 0, none),
            post_key("orders", &sha, 1, none)
        );
        // Names are at most 48 characters: a key stays far below 255, and
        // visible ASCII.
        let every = Asks {
            no_create: true,
            ..quarantine
        };
        let longest = post_key(&"t".repeat(48), &sha, u64::MAX, every);
        assert!(longest.len() <= 255 && longest.bytes().all(|b| b.is_ascii_graphic()));
        let body = serde_json::json!({"table": "orders", "target": {"table": true}});
        assert_eq!(load_key("orders", &body), load_key("orders", &body.clone()));
        assert_ne!(
            load_key("orders", &body),
            load_key("orders", &serde_json::json!({"table": "orders"}))
        );
        let files = [("2026-10-01".to_string(), sha.clone())];
        let week = backfill_key("orders", "2026-10-01", "2026-10-07", &files);
        assert!(week.starts_with("idem-backfill:orders:2026-10-01:2026-10-07:"));
        let other = [("2026-10-01".to_string(), "0".repeat(64))];
        assert_ne!(
            week,
            backfill_key("orders", "2026-10-01", "2026-10-07", &other)
        );
        let codes: Vec<u8> = [Exit::Done, Exit::Refused, Exit::GaveUp, Exit::Usage]
            .into_iter()
            .map(Exit::exit_code)
            .collect();
        assert_eq!(codes, [0, 1, 2, 3]);
    }
}
