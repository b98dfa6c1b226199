//! `idem load open|part|publish|status|audit|abandon`: a load that outlives
//! a request (`/loads`), step by step, for scripts. Opening is keyed by the
//! command's arguments (a rerun opens the same load); parts, publish, audit
//! and abandon are idempotent on the server, so every step is retried like
//! any other request. `idem backfill --atomic` uses the same steps.

use std::sync::Arc;

use idem::schema::AuditReport;
use idem::wire::loads::{LoadReceipt, LoadView, OpenRequest, PartReceipt, PublishRequest, Target};
use reqwest::Method;
use serde_json::Value;

use super::args::ServerArgs;
use super::args::{LoadArgs, LoadIdArgs, LoadOpenArgs, LoadPartArgs, LoadPublishArgs, LoadStep};
use super::progress::{watched, Progress, Unit};
use super::receipts::{Receipt, Written};
use super::send::{report_audits, send_until_settled, Answer, FileBody, Load, Payload};
use super::{load_key, say, Exit};

/// Runs `idem load STEP`.
pub async fn load(args: LoadArgs) -> Exit {
    let outcome = match args.step {
        LoadStep::Open(args) => open_command(&args).await,
        LoadStep::Part(args) => part_command(&args).await,
        LoadStep::Publish(args) => publish_command(&args).await,
        LoadStep::Status(args) => simple(&args, Method::GET, "status").await,
        LoadStep::Audit(args) => audit_command(&args).await,
        LoadStep::Abandon(args) => simple(&args, Method::DELETE, "abandon").await,
    };
    match outcome {
        Ok(()) => Exit::Done,
        Err(outcome) => outcome,
    }
}

/// The body of `POST /loads`.
pub(super) fn open_body(table: &str, target: Target, audits: Option<Value>) -> OpenRequest {
    OpenRequest {
        table: table.to_string(),
        target: target.to_value(),
        audits,
        ttl_seconds: None,
    }
}

/// `request` as it is sent, and keyed (a JSON value: its members in name
/// order, however its type declares them).
pub(super) fn as_sent(request: &OpenRequest) -> Value {
    serde_json::to_value(request).expect("a request serializes")
}

/// The body `idem load open`'s arguments say.
fn open_body_of(args: &LoadOpenArgs) -> Result<OpenRequest, String> {
    let audits = audits_of(args.audit.as_deref())?;
    let target = match (&args.from, &args.to) {
        (Some(from), Some(to)) => Target::Range {
            from: from.clone(),
            to: to.clone(),
        },
        _ if args.whole => Target::TABLE,
        _ => Target::Partitions(args.partitions.clone()),
    };
    Ok(open_body(&args.table, target, audits))
}

/// `--audit`'s JSON (clap checked it is an object).
pub(super) fn audits_of(audit: Option<&str>) -> Result<Option<Value>, String> {
    audit
        .map(|text| serde_json::from_str(text).map_err(|e| format!("--audit: {e}")))
        .transpose()
}

/// A request about a load: `segments` under `/loads`.
fn request(
    server: &ServerArgs,
    method: Method,
    segments: &[&str],
    query: &[(&str, &str)],
    what: String,
) -> Result<Load, Exit> {
    let mut path = vec!["loads"];
    path.extend_from_slice(segments);
    Ok(Load {
        method,
        url: server.endpoint(&path, query)?,
        key: None,
        accept: None,
        headers: Vec::new(),
        what,
    })
}

/// A progress that only says things (requests without a file).
fn quiet(what: &str) -> Arc<Progress> {
    Arc::new(Progress::new(what, Unit::Bytes, None, false))
}

/// Opens (or finds again, under the same key) a load: its view.
pub(super) async fn open(
    server: &ServerArgs,
    body: &OpenRequest,
    key: String,
) -> Result<Answer<LoadView>, Exit> {
    let what = format!("open a load of {}", body.table);
    let mut load = request(server, Method::POST, &[], &[], what)?;
    load.key = Some(key);
    let payload = Payload::Bytes {
        data: as_sent(body).to_string().into(),
        content_type: "application/json",
    };
    send_until_settled(server, &load, &payload, &quiet(&load.what)).await
}

/// Stages `body` as part `n` of load `load_id` (rows without a partition
/// value in `ds`): its receipt. A part is replaced whole by the server, so
/// a retry needs no key.
pub(super) async fn send_part(
    server: &ServerArgs,
    load_id: &str,
    part: (u16, Option<&str>),
    body: &FileBody,
    progress: Arc<Progress>,
) -> Result<Answer<PartReceipt>, Exit> {
    let (n, ds) = part;
    let number = n.to_string();
    let query: Vec<_> = ds.map(|ds| ("ds", ds)).into_iter().collect();
    let what = format!("load {load_id} part {n}");
    let load = request(
        server,
        Method::PUT,
        &[load_id, "parts", &number],
        &query,
        what,
    )?;
    let total = body.len().await.map_err(|e| {
        progress.note(&format!("idem: cannot read {}: {e}", body.path().display()));
        Exit::Usage
    })?;
    progress.set_total(total);
    let settled = send_until_settled(server, &load, &Payload::File(body), &progress).await;
    progress.finish();
    settled
}

/// Publishes load `load_id` (forced, with this reason): its receipt; a
/// failed audit is a refusal whose report is said on stderr.
pub(super) async fn publish(
    server: &ServerArgs,
    load_id: &str,
    force: Option<&str>,
) -> Result<Answer<LoadReceipt>, Exit> {
    let what = format!("publish load {load_id}");
    let load = request(server, Method::POST, &[load_id, "publish"], &[], what)?;
    let payload = match force {
        Some(reason) => Payload::Bytes {
            data: serde_json::to_string(&PublishRequest {
                force: true,
                reason: Some(reason.to_string()),
            })
            .expect("a request serializes")
            .into(),
            content_type: "application/json",
        },
        None => Payload::Nothing,
    };
    send_until_settled(server, &load, &payload, &quiet(&load.what)).await
}

async fn open_command(args: &LoadOpenArgs) -> Result<(), Exit> {
    let body = open_body_of(args).map_err(|why| {
        eprintln!("idem load open: {why}");
        Exit::Usage
    })?;
    let key = args
        .key
        .clone()
        .unwrap_or_else(|| load_key(&args.table, &as_sent(&body)));
    let view = open(&args.server, &body, key).await?;
    match args.json {
        true => say(&view.json),
        false => {
            say(view.read.load_id);
            eprintln!("{}", view.json);
        }
    }
    Ok(())
}

async fn part_command(args: &LoadPartArgs) -> Result<(), Exit> {
    let body = FileBody::open(&args.file, args.format.as_deref())
        .await
        .map_err(|why| {
            eprintln!("idem load part: {why}");
            Exit::Usage
        })?;
    let what = format!("load {} part {}", args.load_id, args.n);
    let progress = Arc::new(Progress::new(
        what,
        Unit::Bytes,
        None,
        watched(args.server.quiet),
    ));
    let part = (args.n, args.ds.as_deref());
    let receipt = send_part(&args.server, &args.load_id, part, &body, progress).await?;
    say(&receipt.json);
    Ok(())
}

async fn publish_command(args: &LoadPublishArgs) -> Result<(), Exit> {
    let force = args.force.then_some(args.reason.as_deref().unwrap_or(""));
    let receipt = publish(&args.server, &args.load_id, force).await?;
    if receipt.read.replayed() {
        eprintln!(
            "idem load publish: load {} was published before; its receipt is that publish's: {}",
            args.load_id,
            Written::of(&receipt.read).said()
        );
    }
    say(&receipt.json);
    Ok(())
}

/// `idem load audit`: the report on stdout; a failed audit exits 1.
async fn audit_command(args: &LoadIdArgs) -> Result<(), Exit> {
    let what = format!("audit load {}", args.load_id);
    let load = request(
        &args.server,
        Method::POST,
        &[&args.load_id, "audit"],
        &[],
        what,
    )?;
    let progress = quiet(&load.what);
    let report: Answer<AuditReport> =
        send_until_settled(&args.server, &load, &Payload::Nothing, &progress).await?;
    say(&report.json);
    match report.read.passed {
        false => {
            progress.note(&format!("idem: load {}: an audit failed", args.load_id));
            report_audits(&report.read, &progress);
            Err(Exit::Refused)
        }
        true => Ok(()),
    }
}

/// A step that sends nothing and prints the answer (status, abandon).
async fn simple(args: &LoadIdArgs, method: Method, step: &str) -> Result<(), Exit> {
    let what = format!("{step} load {}", args.load_id);
    let load = request(&args.server, method, &[&args.load_id], &[], what)?;
    let answer: Answer<Value> =
        send_until_settled(&args.server, &load, &Payload::Nothing, &quiet(&load.what)).await?;
    say(&answer.json);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;
    use serde_json::json;

    #[derive(Parser)]
    struct Cli {
        #[command(subcommand)]
        step: LoadStep,
    }

    fn open_args(args: &[&str]) -> Result<LoadOpenArgs, clap::Error> {
        let all = [&["idem", "open", "orders"], args].concat();
        match Cli::try_parse_from(all)?.step {
            LoadStep::Open(open) => Ok(open),
            _ => unreachable!(),
        }
    }

    #[test]
    fn open_takes_exactly_one_target_and_says_it_as_the_contract_does() {
        let days = open_args(&["--partitions", "2026-10-01,2026-10-02"]).unwrap();
        let sent = |args: &LoadOpenArgs| as_sent(&open_body_of(args).unwrap());
        assert_eq!(
            sent(&days),
            json!({"table": "orders", "target": {"partitions": ["2026-10-01", "2026-10-02"]}})
        );
        let after = Cli::try_parse_from(["idem", "open", "--partitions", "2026-10-01", "orders"]);
        let Ok(LoadStep::Open(after)) = after.map(|cli| cli.step) else {
            panic!("the table after the partitions")
        };
        assert_eq!(
            (after.table.as_str(), after.partitions.len()),
            ("orders", 1)
        );
        let week = open_args(&["--from", "2026-10-01", "--to", "2026-10-07"]).unwrap();
        assert_eq!(
            open_body_of(&week).unwrap().target,
            json!({"range": {"from": "2026-10-01", "to": "2026-10-07"}})
        );
        let whole = open_args(&["--whole", "--audit", r#"{"min_rows":10}"#]).unwrap();
        assert_eq!(
            sent(&whole),
            json!({"table": "orders", "target": {"table": true}, "audits": {"min_rows": 10}})
        );
        assert!(open_args(&["--whole", "--audit", "[1]"]).is_err());
        assert!(open_args(&[]).is_err(), "a target is required");
        assert!(open_args(&["--whole", "--from", "2026-10-01", "--to", "2026-10-02"]).is_err());
        assert!(
            open_args(&["--from", "2026-10-01"]).is_err(),
            "--from needs --to"
        );
    }

    #[test]
    fn a_part_is_numbered_from_1_to_10000_and_force_needs_a_reason() {
        let parse = |args: &[&str]| Cli::try_parse_from([&["idem"], args].concat());
        assert!(parse(&["part", "L", "1", "f.csv", "--ds", "2026-10-01"]).is_ok());
        assert!(parse(&["part", "L", "0", "f.csv"]).is_err());
        assert!(parse(&["part", "L", "10001", "f.csv"]).is_err());
        assert!(parse(&["publish", "L", "--force"]).is_err());
        assert!(parse(&["publish", "L", "--reason", "why"]).is_err());
        assert!(parse(&["publish", "L", "--force", "--reason", "late data"]).is_ok());
        for step in ["status", "audit", "abandon"] {
            assert!(parse(&[step, "L"]).is_ok(), "{step}");
        }
    }
}
