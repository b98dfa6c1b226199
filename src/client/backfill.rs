//! `idem backfill TABLE --from DS --to DS --files PATTERN`: `idem put` of
//! every partition in a range, `--parallel` at a time. Each partition's key
//! comes from its file's content, so running the command again after a kill
//! or a failure answers the partitions already loaded from the server's
//! records and loads only the rest. A failing partition does not stop the
//! others; the command ends with a table of every partition and an exit
//! code for the worst of them.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;

use comfy_table::Table;
use futures::StreamExt;
use serde::Serialize;

use super::args::BackfillArgs;
use super::progress::{watched, Progress, Unit};
use super::put::{put_file, PutOptions, PutTarget, Scope};
use super::receipts::{table_created_warning, Receipt, Written};
use super::send::FileBody;
use super::{say, Exit};
use idem::period::Period;

/// Most partitions one backfill takes (an hourly year is 8,784).
const MAX_PARTITIONS: usize = 100_000;

/// How one partition ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
enum Status {
    /// Loaded, and the partition's content changed.
    Changed,
    /// Loaded already (the same file before, or the same rows): nothing
    /// changed in this run.
    Unchanged,
    /// No file for this partition.
    MissingFile,
    /// The server refused it (a 4xx a retry cannot cure).
    Refused,
    /// Still failing when the retries ran out.
    GaveUp,
    /// Its file could not be read.
    Unreadable,
}

impl Status {
    fn as_str(self) -> &'static str {
        match self {
            Status::Changed => "changed",
            Status::Unchanged => "unchanged",
            Status::MissingFile => "missing file",
            Status::Refused => "refused",
            Status::GaveUp => "gave up",
            Status::Unreadable => "unreadable",
        }
    }
}

/// One line of the closing table.
#[derive(Debug, Serialize)]
struct Partition {
    ds: String,
    file: PathBuf,
    result: Status,
    /// Rows in the partition after the put.
    rows: Option<u64>,
    /// Rows this run wrote, and those the earlier run whose receipt was
    /// replayed wrote.
    #[serde(flatten)]
    written: Written,
    seconds: f64,
    load_id: Option<String>,
    /// Answered from the server's record of an earlier run.
    replayed: bool,
}

/// Runs `idem backfill`.
pub async fn backfill(args: BackfillArgs) -> Exit {
    let periods = match partitions_between(&args.from, &args.to) {
        Ok(periods) => periods,
        Err(why) => {
            eprintln!("idem backfill: {why}");
            return Exit::Usage;
        }
    };
    // A wrong --url is said once, not once a partition.
    if let Err(outcome) = args.server.endpoint(&[], &[]) {
        return outcome;
    }
    if !args.files.contains("{ds}") {
        eprintln!("idem backfill: --files must contain {{ds}}, e.g. 'data/ds={{ds}}.csv'");
        return Exit::Usage;
    }
    if args.atomic {
        return super::backfill_atomic::backfill_atomic(&args, periods).await;
    }
    let total = u64::try_from(periods.len()).unwrap_or(u64::MAX);
    let progress = Arc::new(Progress::new(
        format!("{} backfill", args.table),
        Unit::Days,
        Some(total),
        watched(args.server.quiet),
    ));
    let started = Instant::now();
    let partitions: Vec<Partition> = futures::stream::iter(periods)
        .map(|ds| load_partition(&args, ds, &progress))
        .buffered(usize::from(args.parallel.unwrap_or(1)))
        .collect()
        .await;
    progress.finish();
    report(&args, &partitions, started);
    if none_found(&partitions) {
        eprintln!(
            "idem backfill: no file of the range was found (--files {:?}); nothing was loaded",
            args.files
        );
    }
    outcome_of(&partitions, args.require_files)
}

/// Not one partition of the range had a file: a wrong `--files` or range,
/// more likely than a range with no data at all.
fn none_found(partitions: &[Partition]) -> bool {
    partitions.iter().all(|p| p.result == Status::MissingFile)
}

/// Every partition from `from` to `to`, both included, by the grain their
/// form says.
pub(super) fn partitions_between(from: &str, to: &str) -> Result<Vec<String>, String> {
    let parse = |text: &str| {
        Period::parse_any(text).ok_or_else(|| {
            format!("{text:?} is not a partition: YYYY-MM-DD, YYYY-MM-DDTHH or YYYY-MM")
        })
    };
    let (first, last) = (parse(from)?, parse(to)?);
    if first.grain() != last.grain() {
        return Err(format!("--from {from} and --to {to} are not of one form"));
    }
    if first.start() > last.start() {
        return Err(format!("--from {from} is after --to {to}"));
    }
    let mut labels = Vec::new();
    let mut period = first;
    loop {
        labels.push(period.label());
        if period.start() >= last.start() {
            return Ok(labels);
        }
        if labels.len() >= MAX_PARTITIONS {
            return Err(format!(
                "more than {MAX_PARTITIONS} partitions; split the range"
            ));
        }
        period = Period::containing(period.end(), period.grain());
    }
}

/// PUTs one partition's file, and says how it went.
async fn load_partition(args: &BackfillArgs, ds: String, progress: &Progress) -> Partition {
    let started = Instant::now();
    let file = PathBuf::from(args.files.replace("{ds}", &ds));
    let mut partition = Partition {
        ds,
        file,
        result: Status::MissingFile,
        rows: None,
        written: Written::default(),
        seconds: 0.0,
        load_id: None,
        replayed: false,
    };
    match tokio::fs::metadata(&partition.file).await {
        Ok(_) => put_partition(args, &mut partition, progress).await,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => {
            progress.note(&format!("idem: {}: {e}", partition.file.display()));
            partition.result = Status::Unreadable;
        }
    }
    partition.seconds = started.elapsed().as_secs_f64();
    progress.advance(1);
    progress.note(&format!(
        "idem: {} {}: {}{}{} in {:.1} s",
        args.table,
        partition.ds,
        partition.result.as_str(),
        match partition.replayed {
            true => " (replayed)",
            false => "",
        },
        partition
            .rows
            .map(|rows| format!(", {rows} rows"))
            .unwrap_or_default(),
        partition.seconds
    ));
    partition
}

async fn put_partition(args: &BackfillArgs, partition: &mut Partition, progress: &Progress) {
    let body = match FileBody::open(&partition.file, args.format.as_deref()).await {
        Ok(body) => body,
        Err(why) => {
            progress.note(&format!("idem: {}: {why}", partition.ds));
            partition.result = Status::Unreadable;
            return;
        }
    };
    let day = Arc::new(progress.day(format!("{} {}", args.table, partition.ds), None));
    let target = PutTarget {
        table: &args.table,
        scope: Scope::Partition(&partition.ds),
        options: PutOptions {
            bad_rows: &args.bad_rows,
            if_match: None,
            dry_run: false,
            audit: args.audit.as_deref(),
            create: args.create,
        },
    };
    let receipt = match put_file(&args.server, target, &body, day).await {
        Ok(receipt) => receipt,
        Err(outcome) => {
            partition.result = match outcome {
                Exit::Refused => Status::Refused,
                Exit::GaveUp => Status::GaveUp,
                Exit::Usage | Exit::Done => Status::Unreadable,
            };
            return;
        }
    };
    let receipt = receipt.read;
    if let Some(warning) = table_created_warning(&args.table, &receipt) {
        progress.note(&warning);
    }
    partition.replayed = receipt.replayed();
    partition.result = match receipt.changed() && !partition.replayed {
        true => Status::Changed,
        false => Status::Unchanged,
    };
    partition.rows = Some(receipt.row_count());
    partition.written = Written::of(&receipt);
    partition.load_id = Some(receipt.load_id().to_string());
}

/// The closing table (or its JSON) on stdout, and a count on stderr.
fn report(args: &BackfillArgs, partitions: &[Partition], started: Instant) {
    if args.json {
        say(serde_json::to_string(partitions).unwrap_or_default());
    } else {
        let mut table = Table::new();
        table.load_style(comfy_table::presets::UTF8_BORDERS_ONLY);
        table.set_header(["ds", "rows", "result", "seconds"]);
        for partition in partitions {
            table.add_row([
                partition.ds.clone(),
                partition
                    .rows
                    .map(|rows| rows.to_string())
                    .unwrap_or_default(),
                partition.result.as_str().to_string(),
                format!("{:.1}", partition.seconds),
            ]);
        }
        say(&table);
    }
    let count = |result| partitions.iter().filter(|p| p.result == result).count();
    let written: Written = partitions.iter().map(|p| p.written).sum();
    eprintln!(
        "idem backfill: {}: {} partitions in {:.1} s: {} changed, {} unchanged ({} replayed), {} missing file, {} failed: {}",
        args.table,
        partitions.len(),
        started.elapsed().as_secs_f64(),
        count(Status::Changed),
        count(Status::Unchanged),
        partitions.iter().filter(|p| p.replayed).count(),
        count(Status::MissingFile),
        count(Status::Refused) + count(Status::GaveUp) + count(Status::Unreadable),
        written.said(),
    );
}

/// The exit code: 2 when a partition could still load on a rerun (the
/// retries ran out), else 1 when the server refused one, else 3 when a file
/// could not be read (or was missing, with `--require-files`, or none of
/// the range was found), else 0.
fn outcome_of(partitions: &[Partition], require_files: bool) -> Exit {
    let any = |result| partitions.iter().any(|p| p.result == result);
    if any(Status::GaveUp) {
        Exit::GaveUp
    } else if any(Status::Refused) {
        Exit::Refused
    } else if any(Status::Unreadable)
        || (require_files && any(Status::MissingFile))
        || none_found(partitions)
    {
        Exit::Usage
    } else {
        Exit::Done
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_range_is_every_partition_of_its_grain_both_ends_included() {
        let days = partitions_between("2026-02-27", "2026-03-02").unwrap();
        assert_eq!(
            days,
            ["2026-02-27", "2026-02-28", "2026-03-01", "2026-03-02"]
        );
        assert_eq!(
            partitions_between("2026-10-12T22", "2026-10-13T01").unwrap(),
            [
                "2026-10-12T22",
                "2026-10-12T23",
                "2026-10-13T00",
                "2026-10-13T01"
            ]
        );
        assert_eq!(
            partitions_between("2025-11", "2026-02").unwrap(),
            ["2025-11", "2025-12", "2026-01", "2026-02"]
        );
        assert_eq!(
            partitions_between("2026-10-12", "2026-10-12")
                .unwrap()
                .len(),
            1
        );
        assert!(partitions_between("2026-10-13", "2026-10-12").is_err());
        assert!(partitions_between("2026-10-12", "2026-10").is_err());
        assert!(partitions_between("yesterday", "2026-10-12").is_err());
        assert!(partitions_between("0001-01-01", "9999-12-31").is_err());
    }
}
