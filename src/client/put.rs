//! `idem put TABLE DS FILE`: a file as the whole content of one partition
//! (or, with `--whole`, of the whole table), streamed, retried under one
//! Idempotency-Key made from the table, the day and the file's SHA-256 (so
//! a rerun of the same command is a replay). `--dry-run` stages and audits
//! without publishing.

use std::path::Path;
use std::sync::Arc;

use idem::wire::receipts::PutAnswer;
use sha2::{Digest, Sha256};
use tokio::io::AsyncReadExt;

use super::args::{BadRowsArg, CreateArg, PutArgs, ServerArgs};
use super::progress::{watched, Progress, Unit};
use super::receipts::{table_created_warning, Receipt, Written};
use super::send::{send_until_settled, Answer, FileBody, Load, Payload};
use super::{put_key, say, Asks, Exit};

/// Runs `idem put`: the receipt on stdout.
pub async fn put(args: PutArgs) -> Exit {
    let (scope, path) = match (&args.whole, &args.ds, &args.file) {
        (Some(path), _, _) => (Scope::Whole, path),
        (None, Some(ds), Some(path)) => (Scope::Partition(ds), path),
        // clap requires DS and FILE without --whole.
        _ => return Exit::Usage,
    };
    let body = match FileBody::open(path, args.format.as_deref()).await {
        Ok(body) => body,
        Err(why) => {
            eprintln!("idem put: {why}");
            return Exit::Usage;
        }
    };
    let target = PutTarget {
        table: &args.table,
        scope,
        options: PutOptions {
            bad_rows: &args.bad_rows,
            if_match: args.if_match.as_deref(),
            dry_run: args.dry_run,
            audit: args.audit.as_deref(),
            create: args.create,
        },
    };
    let what = target.what();
    let progress = Progress::new(&what, Unit::Bytes, None, watched(args.server.quiet));
    match put_file(&args.server, target, &body, Arc::new(progress)).await {
        Ok(receipt) => {
            for line in notes(&what, target.table, &receipt.read) {
                eprintln!("{line}");
            }
            say(&receipt.json);
            Exit::Done
        }
        Err(outcome) => outcome,
    }
}

/// What stderr says beside a put's receipt: that the table was made by
/// this write (or the one it replays), and that a replayed receipt's rows
/// were written before this run.
fn notes(what: &str, table: &str, receipt: &PutAnswer) -> Vec<String> {
    let mut notes: Vec<String> = table_created_warning(table, receipt).into_iter().collect();
    if receipt.replayed() {
        notes.push(format!(
            "idem put: {what}: replayed from the server's record of an earlier run: {}",
            Written::of(receipt).said()
        ));
    }
    notes
}

/// What a PUT asks beyond its body.
#[derive(Clone, Copy)]
pub(super) struct PutOptions<'a> {
    pub bad_rows: &'a BadRowsArg,
    /// `If-Match`: an ETag, quoted here when it is not.
    pub if_match: Option<&'a str>,
    /// `?dry_run=true`: stage and audit, never publish.
    pub dry_run: bool,
    /// `?audit=`: this write's audits, as JSON.
    pub audit: Option<&'a str>,
    /// `?create=false`: refuse an undeclared table.
    pub create: CreateArg,
}

/// What a PUT replaces.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Scope<'a> {
    /// One partition (`PUT /partitions/{table}/{ds}`).
    Partition(&'a str),
    /// The whole table (`PUT /tables/{table}/rows`).
    Whole,
}

/// The table a PUT writes, what of it, and how.
#[derive(Clone, Copy)]
pub(super) struct PutTarget<'a> {
    pub table: &'a str,
    pub scope: Scope<'a>,
    pub options: PutOptions<'a>,
}

impl PutTarget<'_> {
    /// How messages name it.
    fn what(&self) -> String {
        match self.scope {
            Scope::Partition(ds) => format!("{} {ds}", self.table),
            Scope::Whole => format!("{} (whole table)", self.table),
        }
    }

    /// The PUT's URL path.
    fn segments(&self) -> Vec<&str> {
        match self.scope {
            Scope::Partition(ds) => vec!["partitions", self.table, ds],
            Scope::Whole => vec!["tables", self.table, "rows"],
        }
    }

    /// The query: `bad_rows`, `create` (a day's PUT only: a whole table's
    /// never makes its table), `dry_run`, `audit`.
    fn query(&self) -> Vec<(&str, &str)> {
        let mut query: Vec<_> = self.options.bad_rows.query().into_iter().collect();
        if let Scope::Partition(_) = self.scope {
            query.extend(self.options.create.query());
        }
        if self.options.dry_run {
            query.push(("dry_run", "true"));
        }
        if let Some(audit) = self.options.audit {
            query.push(("audit", audit));
        }
        query
    }

    /// The Idempotency-Key of a file with this SHA-256: a day's PUT only.
    /// A whole-table PUT, an audited one and a dry run are loads the server
    /// stages and checks, and keeps no key for: the same content again
    /// answers `"changed": false` (and a dry run changes nothing).
    fn key(&self, sha256: &str) -> Option<String> {
        let asks = Asks {
            bad_rows: self.options.bad_rows.bad_rows.as_deref(),
            no_create: self.options.create.no_create,
        };
        match (self.options.dry_run, self.options.audit, self.scope) {
            (false, None, Scope::Partition(ds)) => Some(put_key(self.table, ds, sha256, asks)),
            _ => None,
        }
    }
}

/// PUTs `body` as `target` says until it is settled, under the key of the
/// file's content (and bad-row policy); `progress` counts its bytes (its
/// total is set here, from the file's length).
pub(super) async fn put_file(
    server: &ServerArgs,
    target: PutTarget<'_>,
    body: &FileBody,
    progress: Arc<Progress>,
) -> Result<Answer<PutAnswer>, Exit> {
    let unreadable = |e: std::io::Error| {
        progress.note(&format!("idem: cannot read {}: {e}", body.path().display()));
        Exit::Usage
    };
    let sha256 = file_sha256(body.path()).await.map_err(unreadable)?;
    progress.set_total(body.len().await.map_err(unreadable)?);
    let load = Load {
        method: reqwest::Method::PUT,
        url: server.endpoint(&target.segments(), &target.query())?,
        key: target.key(&sha256),
        accept: None,
        headers: target.options.if_match.map(if_match).into_iter().collect(),
        what: target.what(),
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

    #[test]
    fn a_whole_put_and_a_dry_run_have_their_own_url_and_key() {
        let bad_rows = BadRowsArg::default();
        let options = PutOptions {
            bad_rows: &bad_rows,
            if_match: None,
            dry_run: false,
            audit: None,
            create: CreateArg::default(),
        };
        let day = PutTarget {
            table: "orders",
            scope: Scope::Partition("2026-10-12"),
            options,
        };
        let whole = PutTarget {
            scope: Scope::Whole,
            ..day
        };
        let sha = "ab".repeat(32);
        assert_eq!(day.segments(), ["partitions", "orders", "2026-10-12"]);
        assert_eq!(whole.segments(), ["tables", "orders", "rows"]);
        assert_ne!(day.key(&sha), whole.key(&sha));
        assert!(whole.query().is_empty());
        let dry = PutTarget {
            options: PutOptions {
                dry_run: true,
                ..options
            },
            ..whole
        };
        assert_eq!(dry.key(&sha), None);
        assert_eq!(dry.query(), [("dry_run", "true")]);
        let audited = PutTarget {
            options: PutOptions {
                audit: Some(r#"{"min_rows":1}"#),
                ..options
            },
            ..day
        };
        assert_ne!(
            audited.key(&sha),
            day.key(&sha),
            "other audits, another request"
        );
        assert_eq!(audited.query(), [("audit", r#"{"min_rows":1}"#)]);
        let no_create = PutTarget {
            options: PutOptions {
                create: CreateArg { no_create: true },
                ..options
            },
            ..day
        };
        assert_eq!(no_create.query(), [("create", "false")]);
        assert_ne!(no_create.key(&sha), day.key(&sha), "another query");
        let whole_no_create = PutTarget {
            scope: Scope::Whole,
            ..no_create
        };
        assert!(whole_no_create.query().is_empty());
    }
}
