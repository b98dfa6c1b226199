//! `idem backfill … --atomic`: the range as one load that goes live at once.
//! It opens a load whose target is the range (keyed by the range and the
//! files' content, so a rerun resumes the same load), stages each day's file
//! as a part (numbered by the day's place in the range, `?ds=` the day),
//! `--parallel` at a time, each retried alone, then publishes once: every
//! day of the range changes, or none does.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;

use futures::StreamExt;
use idem::wire::loads::{LoadReceipt, Target};
use idem::wire::status::StagedStatus;

use super::args::BackfillArgs;
use super::load::{self, open_body};
use super::progress::{watched, Progress, Unit};
use super::put::file_sha256;
use super::receipts::{Receipt, Written};
use super::send::{Answer, FileBody};
use super::{backfill_key, say, with_audit, Exit};

/// Parts sent at once unless `--parallel` says otherwise.
const DEFAULT_PARALLEL: u16 = 4;

/// A day of the range and its file.
struct Day {
    /// Its part number: its place in the range, from 1.
    part: u16,
    ds: String,
    file: PathBuf,
    /// The file's SHA-256; `None` when the day has no file.
    sha256: Option<String>,
}

/// Runs `idem backfill --atomic` over `periods` (the range, in order): the
/// publish's receipt on stdout.
pub(super) async fn backfill_atomic(args: &BackfillArgs, periods: Vec<String>) -> Exit {
    let started = Instant::now();
    match run(args, periods).await {
        Ok(receipt) => {
            eprintln!("{}", published(&args.table, &receipt.read, started));
            say(&receipt.json);
            Exit::Done
        }
        Err(outcome) => outcome,
    }
}

/// What stderr says of the publish's receipt: a load published by an
/// earlier run (its receipt replayed) wrote nothing in this one.
fn published(table: &str, receipt: &LoadReceipt, started: Instant) -> String {
    let how = match (receipt.replayed(), receipt.changed) {
        (true, _) => "was published before, by an earlier run",
        (false, true) => "published, changed",
        (false, false) => "published, unchanged",
    };
    format!(
        "idem backfill: {table}: load {} {how}: {} partitions in {:.1} s: {}",
        receipt.load_id,
        receipt.partitions.len(),
        started.elapsed().as_secs_f64(),
        Written::of(receipt).said()
    )
}

async fn run(args: &BackfillArgs, periods: Vec<String>) -> Result<Answer<LoadReceipt>, Exit> {
    let days = find_files(args, periods).await?;
    check_missing(args, &days)?;
    let files: Vec<(String, String)> = days
        .iter()
        .filter_map(|day| Some((day.ds.clone(), day.sha256.clone()?)))
        .collect();
    let audit = args.audit.as_deref();
    let key = args.key.clone().unwrap_or_else(|| {
        let files = backfill_key(&args.table, &args.from, &args.to, &files);
        with_audit(files, audit)
    });
    let target = Target::Range {
        from: args.from.clone(),
        to: args.to.clone(),
    };
    let audits = load::audits_of(audit).map_err(|why| {
        eprintln!("idem backfill: {why}");
        Exit::Usage
    })?;
    let body = open_body(&args.table, target, audits);
    let view = load::open(&args.server, &body, key).await?.read;
    let load_id = &view.load_id.to_string();
    match view.status {
        StagedStatus::Open | StagedStatus::AuditFailed => send_parts(args, load_id, &days).await?,
        // Publishing it again answers its stored receipt, replayed.
        StagedStatus::Published => {}
        status => {
            eprintln!(
                "idem backfill: load {load_id} is {status}: run again with --key NEW for a new load"
            );
            return Err(Exit::Refused);
        }
    }
    load::publish(&args.server, load_id, None)
        .await
        .inspect_err(|_| {
            eprintln!(
                "idem backfill: load {load_id} was not published; nothing changed. Run the same \
                 command again, or see `idem load status {load_id}`"
            )
        })
}

/// Every day of the range with its file's place and hash; a file that is
/// there but cannot be read is a usage error.
async fn find_files(args: &BackfillArgs, periods: Vec<String>) -> Result<Vec<Day>, Exit> {
    let mut days = Vec::with_capacity(periods.len());
    for (place, ds) in periods.into_iter().enumerate() {
        let Ok(part) = u16::try_from(place + 1) else {
            eprintln!("idem backfill: a load takes at most 10000 parts; split the range");
            return Err(Exit::Usage);
        };
        let file = PathBuf::from(args.files.replace("{ds}", &ds));
        let sha256 = match file_sha256(&file).await {
            Ok(sha256) => Some(sha256),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
            Err(e) => {
                eprintln!("idem backfill: {}: {e}", file.display());
                return Err(Exit::Usage);
            }
        };
        days.push(Day {
            part,
            ds,
            file,
            sha256,
        });
    }
    Ok(days)
}

/// No file at all, or a missing one under `--require-files`, stops the
/// command before anything is sent; otherwise the days without a file are
/// named: they end empty when the load is published.
fn check_missing(args: &BackfillArgs, days: &[Day]) -> Result<(), Exit> {
    let missing: Vec<&str> = days
        .iter()
        .filter(|day| day.sha256.is_none())
        .map(|day| day.ds.as_str())
        .collect();
    if missing.len() == days.len() {
        eprintln!(
            "idem backfill: no file of the range was found (--files {:?}); nothing was loaded",
            args.files
        );
        return Err(Exit::Usage);
    }
    if missing.is_empty() {
        return Ok(());
    }
    if args.require_files {
        eprintln!(
            "idem backfill: no file for {}; nothing was loaded",
            missing.join(", ")
        );
        return Err(Exit::Usage);
    }
    eprintln!(
        "idem backfill: no file for {}: published, they end empty",
        missing.join(", ")
    );
    Ok(())
}

/// Stages every day that has a file, `--parallel` at a time. Every part is
/// tried (a failing one does not stop the others); the worst failure wins:
/// gave up, then refused, then unreadable.
async fn send_parts(args: &BackfillArgs, load_id: &str, days: &[Day]) -> Result<(), Exit> {
    let with_files: Vec<&Day> = days.iter().filter(|day| day.sha256.is_some()).collect();
    let progress = Arc::new(Progress::new(
        format!("{} load {load_id}", args.table),
        Unit::Days,
        Some(u64::try_from(with_files.len()).unwrap_or(u64::MAX)),
        watched(args.server.quiet),
    ));
    let parallel = usize::from(args.parallel.unwrap_or(DEFAULT_PARALLEL));
    let outcomes: Vec<Result<(), Exit>> = futures::stream::iter(with_files)
        .map(|day| send_day(args, load_id, day, &progress))
        .buffer_unordered(parallel)
        .collect()
        .await;
    progress.finish();
    let failed = outcomes.iter().filter(|outcome| outcome.is_err()).count();
    if failed == 0 {
        return Ok(());
    }
    eprintln!(
        "idem backfill: {failed} of {} parts failed; load {load_id} stays open, nothing changed",
        outcomes.len()
    );
    let any = |exit| outcomes.contains(&Err(exit));
    Err([Exit::GaveUp, Exit::Refused]
        .into_iter()
        .find(|exit| any(*exit))
        .unwrap_or(Exit::Usage))
}

/// Stages one day's file as its part.
async fn send_day(
    args: &BackfillArgs,
    load_id: &str,
    day: &Day,
    progress: &Progress,
) -> Result<(), Exit> {
    let started = Instant::now();
    let body = FileBody::open(&day.file, args.format.as_deref())
        .await
        .map_err(|why| {
            progress.note(&format!("idem: {}: {why}", day.ds));
            Exit::Usage
        })?;
    let bar = Arc::new(progress.day(format!("{} {}", args.table, day.ds), None));
    let part = (day.part, Some(day.ds.as_str()));
    let sent = load::send_part(&args.server, load_id, part, &body, bar).await;
    progress.advance(1);
    let receipt = sent?.read;
    progress.note(&format!(
        "idem: {} {}: part {} staged, {} rows{} in {:.1} s",
        args.table,
        day.ds,
        day.part,
        receipt.rows_staged,
        match receipt.changed {
            false => " (unchanged)",
            true => "",
        },
        started.elapsed().as_secs_f64()
    ));
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::collections::{BTreeMap, HashMap};
    use std::sync::Mutex;

    use axum::extract::{Path, Query, State};
    use axum::http::{HeaderMap, StatusCode};
    use axum::response::{IntoResponse, Response};
    use axum::routing::{post, put};
    use axum::{Json, Router};
    use chrono::{DateTime, Utc};
    use clap::Parser;
    use idem::ids::LoadId;
    use idem::names::TableName;
    use idem::problem::ProblemCode;
    use idem::wire::loads::{LoadView, OpenRequest, PartReceipt};
    use idem::wire::problem::Problem;
    use idem::wire::status::ReceiptStatus;
    use serde_json::json;
    use uuid::Uuid;

    use super::*;

    /// What the stand-in server was sent.
    #[derive(Default)]
    struct Seen {
        keys: Vec<String>,
        parts: Vec<(u16, String, String)>,
        publishes: usize,
        /// Parts are answered 409 `load_not_open`.
        closed: bool,
    }

    type Shared = Arc<Mutex<Seen>>;

    /// The load the stand-in server opens.
    const LOAD: LoadId = LoadId::from_uuid(Uuid::from_u128(1));

    fn at() -> DateTime<Utc> {
        DateTime::UNIX_EPOCH
    }

    async fn open(
        State(seen): State<Shared>,
        headers: HeaderMap,
        Json(body): Json<OpenRequest>,
    ) -> (StatusCode, Json<LoadView>) {
        let key = headers.get("idempotency-key").unwrap().to_str().unwrap();
        seen.lock().unwrap().keys.push(key.to_string());
        let range = json!({"range": {"from": "2026-10-01", "to": "2026-10-03"}});
        assert_eq!(body.target, range);
        let view = LoadView {
            audit_report: None,
            audits: json!({}),
            created_at: at(),
            expires_at: at(),
            forced: None,
            load_id: LOAD,
            partitions: BTreeMap::new(),
            parts: Vec::new(),
            receipt: None,
            status: StagedStatus::Open,
            table: body.table,
            target: body.target,
        };
        (StatusCode::CREATED, Json(view))
    }

    async fn part(
        State(seen): State<Shared>,
        Path((_, n)): Path<(String, u16)>,
        Query(query): Query<HashMap<String, String>>,
        body: String,
    ) -> Response {
        let mut seen = seen.lock().unwrap();
        let ds = query.get("ds").cloned().unwrap_or_default();
        seen.parts.push((n, ds, body));
        if seen.closed {
            let problem = Problem::new(
                ProblemCode::LoadNotOpen,
                "Load not open",
                409,
                format!("load {LOAD} is published"),
            );
            return (StatusCode::CONFLICT, Json(problem)).into_response();
        }
        let receipt = PartReceipt {
            load_id: LOAD,
            part: u32::from(n),
            rows_received: 1,
            rows_staged: 1,
            rejected: 0,
            discarded_fields: 0,
            content_sha256: String::new(),
            changed: true,
            partitions: BTreeMap::new(),
        };
        Json(receipt).into_response()
    }

    async fn publish(State(seen): State<Shared>) -> Json<LoadReceipt> {
        seen.lock().unwrap().publishes += 1;
        Json(LoadReceipt {
            load_id: LOAD,
            table: TableName::parse("orders").unwrap(),
            mode: "load".into(),
            ds: None,
            from: None,
            to: None,
            status: ReceiptStatus::Published,
            partitions: Vec::new(),
            rows_received: 2,
            rows_written: 2,
            duplicates: 0,
            rejected: 0,
            discarded_fields: 0,
            row_count: 2,
            content_sha256: String::new(),
            changed: true,
            dry_run: false,
            audit: None,
            forced: None,
            replayed: Some(false),
        })
    }

    /// The stand-in server's URL.
    async fn serve(seen: Shared) -> String {
        let app = Router::new()
            .route("/loads", post(open))
            .route("/loads/{id}/parts/{n}", put(part))
            .route("/loads/{id}/publish", post(publish))
            .with_state(seen);
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        tokio::spawn(async move { axum::serve(listener, app).await });
        url
    }

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        args: BackfillArgs,
    }

    /// Days 01 and 03 of 2026-10-01..03 have a file; the args and the
    /// range.
    fn backfill(dir: &std::path::Path, url: &str) -> (BackfillArgs, Vec<String>) {
        for ds in ["2026-10-01", "2026-10-03"] {
            std::fs::write(dir.join(format!("{ds}.csv")), format!("id\n{ds}\n")).unwrap();
        }
        let pattern = dir.join("{ds}.csv");
        let argv = [
            "idem",
            "orders",
            "--from",
            "2026-10-01",
            "--to",
            "2026-10-03",
        ];
        let more = ["--atomic", "--quiet", "--max-time", "5", "--url", url];
        let files = ["--files", pattern.to_str().unwrap()];
        let args = Cli::parse_from([&argv[..], &files, &more].concat()).args;
        let periods = ["2026-10-01", "2026-10-02", "2026-10-03"].map(str::to_string);
        (args, periods.to_vec())
    }

    #[tokio::test]
    async fn an_atomic_backfill_opens_one_load_sends_a_part_a_day_and_publishes_once() {
        let seen = Shared::default();
        let url = serve(Arc::clone(&seen)).await;
        let dir = tempfile::tempdir().unwrap();
        let (args, periods) = backfill(dir.path(), &url);
        assert_eq!(backfill_atomic(&args, periods).await, Exit::Done);
        let seen = seen.lock().unwrap();
        assert_eq!(seen.keys.len(), 1);
        assert!(seen.keys[0].starts_with("idem-backfill:orders:2026-10-01:2026-10-03:"));
        let mut parts = seen.parts.clone();
        parts.sort();
        let part = |n: u16, ds: &str| (n, ds.to_string(), format!("id\n{ds}\n"));
        assert_eq!(
            parts,
            [part(1, "2026-10-01"), part(3, "2026-10-03")],
            "numbered by the day's place; the day without a file sends nothing"
        );
        assert_eq!(seen.publishes, 1);
    }

    #[tokio::test]
    async fn a_closed_load_is_refused_at_once_and_never_published() {
        let seen = Shared::default();
        seen.lock().unwrap().closed = true;
        let url = serve(Arc::clone(&seen)).await;
        let dir = tempfile::tempdir().unwrap();
        let (args, periods) = backfill(dir.path(), &url);
        assert_eq!(backfill_atomic(&args, periods).await, Exit::Refused);
        let seen = seen.lock().unwrap();
        assert_eq!(seen.parts.len(), 2, "each part tried once, not retried");
        assert_eq!(seen.publishes, 0);
    }
}
