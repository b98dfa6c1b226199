//! `idem rejects TABLE` (the rows a `quarantine` policy kept, from `GET
//! /rejects`) and `idem replay TABLE` (`POST /rejects/replay`, called again
//! while the server says more are pending).

use std::sync::Arc;

use idem::ids::LoadId;
use idem::ingest::reject_spool::Problem;
use idem::wire::receipts::ReplayReceipt;
use idem::wire::rejects::RejectView;
use serde_json::{json, Value};

use super::args::{RejectsArgs, ReplayArgs};
use super::progress::{Progress, Unit};
use super::receipts::{Receipt, Written};
use super::send::{send_until_settled, Load, Payload};
use super::show::{list, Column};
use super::{say, Exit};

/// Most calls one `idem replay` makes (each takes up to 10,000 rejects).
const MAX_REPLAY_CALLS: u32 = 1000;

/// Runs `idem rejects`: oldest first, by load and record.
pub async fn rejects(args: RejectsArgs) -> Exit {
    let columns: [Column<RejectView>; 8] = [
        ("load", |r| json!(r.load_id)),
        ("record", |r| json!(r.record)),
        ("line", |r| json!(r.line)),
        ("ds", |r| json!(r.ds)),
        ("status", |r| json!(r.status)),
        ("tries", |r| json!(r.tries)),
        ("errors", |r| json!(errors_said(&r.errors))),
        ("received", |r| json!(r.received_at)),
    ];
    let mut query = vec![("table", args.table.as_str())];
    if let Some(status) = &args.status {
        query.push(("status", status.as_str()));
    }
    list(&args.list, &["rejects"], &query, &columns).await
}

/// A reject's problems in one cell: `column: message` each (the message
/// alone for a row's own problem).
fn errors_said(errors: &[Problem]) -> String {
    errors
        .iter()
        .map(|problem| match problem.column.as_deref() {
            Some(column) if !column.is_empty() => format!("{column}: {}", problem.message),
            _ => problem.message.clone(),
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// What the replay calls added up to.
#[derive(Default)]
struct Tally {
    calls: u32,
    /// Calls answered from the server's record of an earlier run under
    /// the same key (`--key`): what they count was done by that run, and
    /// is not in this run's counts but in `written.before`.
    answered_before: u32,
    tried: u64,
    rows_replayed: u64,
    written: Written,
    expired: u64,
    still_pending: u64,
    load_ids: Vec<LoadId>,
}

impl Tally {
    fn add(&mut self, receipt: &ReplayReceipt) {
        self.calls += 1;
        self.written.add(Written::of(receipt));
        self.still_pending = receipt.still_pending;
        self.load_ids.push(receipt.load_id);
        if receipt.replayed() {
            self.answered_before += 1;
            return;
        }
        self.tried += receipt.tried;
        self.rows_replayed += receipt.rows_replayed;
        self.expired += receipt.expired;
    }

    /// The summary on stdout.
    fn summary(&self, table: &str) -> Value {
        json!({
            "table": table,
            "calls": self.calls,
            "calls_answered_before": self.answered_before,
            "tried": self.tried,
            "rows_replayed": self.rows_replayed,
            "rows_written": self.written.now,
            "rows_written_before": self.written.before,
            "expired": self.expired,
            "still_pending": self.still_pending,
            "load_ids": self.load_ids,
        })
    }
}

/// Runs `idem replay`: a summary on stdout.
pub async fn replay(args: ReplayArgs) -> Exit {
    // A replay is meant to run again later, when more rows fit: each run
    // is a new request, under a key of its own, retried under that key.
    let first = args
        .key
        .clone()
        .unwrap_or_else(|| format!("idem-replay:{}:{}", args.table, uuid::Uuid::now_v7()));
    let url = match args
        .server
        .endpoint(&["rejects", "replay"], &[("table", &args.table)])
    {
        Ok(url) => url,
        Err(outcome) => return outcome,
    };
    let progress = Arc::new(Progress::new(&args.table, Unit::Bytes, None, false));
    let mut tally = Tally::default();
    while tally.calls < MAX_REPLAY_CALLS {
        let key = match tally.calls {
            0 => first.clone(),
            n => format!("{first}:{}", n + 1),
        };
        let load = Load {
            method: reqwest::Method::POST,
            url: url.clone(),
            key: Some(key),
            accept: None,
            headers: Vec::new(),
            what: format!("replay {} (call {})", args.table, tally.calls + 1),
        };
        let sent = send_until_settled(&args.server, &load, &Payload::Nothing, &progress).await;
        let receipt: ReplayReceipt = match sent {
            Ok(receipt) => receipt.read,
            Err(outcome) => return outcome,
        };
        tally.add(&receipt);
        // Rejects that stay bad are tried again on the next call only after
        // the others: a call that replayed none has nothing more to gain.
        if !receipt.more_pending || receipt.rows_replayed == 0 {
            break;
        }
    }
    if tally.answered_before > 0 {
        eprintln!(
            "idem replay: {}: {} of {} calls answered from the server's record of an earlier \
             run under the same key: {}",
            args.table,
            tally.answered_before,
            tally.calls,
            tally.written.said()
        );
    }
    say(tally.summary(&args.table));
    Exit::Done
}
