//! The end every load of several partitions shares (a staged load's
//! publish, a range or whole-table PUT): its staged parts made into one
//! stage per target partition (`store::write::assemble`), audited, then
//! published in one transaction (`store::write::publish_many`) — or, for a
//! dry run or an audit alone, only looked at.

use std::collections::BTreeMap;

use sqlx::PgConnection;

use crate::ingest::reject_spool::RejectSpool;
use crate::ingest::ContentHash;
use crate::period::Period;
use crate::pipeline::error::{WriteError, WriteResult};
use crate::pipeline::intake::ticket::LoadTicket;
use crate::pipeline::Pipeline;
use crate::schema::{AuditReport, Audits};
use crate::schema::{DuplicatePolicy, TableDef};
use crate::store::audits::{run_audits, StagedPartition};
use crate::store::contents;
use crate::store::ledger::{LoadEntry, LoadStatus};
use crate::store::sql::staging_table;
use crate::store::staged_loads;
use crate::store::write::assemble::{assemble, Assembled, Source};
use crate::store::write::duplicates::Resolve;
use crate::store::write::publish_many::{
    plan, publish_many, sum_of, ManySwap, PartitionOutcome, PartitionStage,
};
use crate::store::write::stage::{self, StageFate};
use crate::versions::Expected;
use crate::wire::loads::{LoadReceipt, PartitionReceipt};
use crate::wire::status::ReceiptStatus;

/// A staged part as the publish reads it: its table and its rows' content
/// per partition.
pub struct PartSource {
    pub stage_name: String,
    pub contents: BTreeMap<Period, ContentHash>,
}

/// How far a load goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Finishing {
    /// Audited and published.
    Publish,
    /// Audited, and what a publish would change told (`?dry_run=true`).
    DryRun,
    /// Audited only, the report kept (`POST /loads/{id}/audit`).
    AuditOnly,
}

/// A load ready to finish.
pub struct Finish<'a> {
    pub def: &'a TableDef,
    pub ticket: &'a LoadTicket,
    /// The target partitions; `None` for a whole table.
    pub periods: Option<Vec<Period>>,
    pub parts: Vec<PartSource>,
    pub audits: Audits,
    pub conditions: &'a Expected,
    pub how: Finishing,
    /// A staged load (marked published with the swap).
    pub staged: bool,
    /// Published despite failed audits: who and why.
    pub forced: Option<serde_json::Value>,
    pub rows_received: u64,
    pub discarded_fields: u64,
    /// The load's bad rows, under `bad_rows: quarantine`, and their count.
    pub rejects: Option<RejectSpool>,
    pub rejected: u64,
    pub range: Option<(Period, Period)>,
}

impl Pipeline {
    /// Assembles, audits and publishes (or plans) `load` on `conn`, whose
    /// session claims the stages it makes; they are released whatever
    /// happens.
    pub(crate) async fn finish_load(
        &self,
        conn: &mut PgConnection,
        load: Finish<'_>,
    ) -> WriteResult<LoadReceipt> {
        let mut made = Vec::new();
        let result = self.finish_with(conn, load, &mut made).await;
        let swapped = |name: &str| {
            result
                .as_ref()
                .is_ok_and(|(outcomes, stages, receipt): &Finished| {
                    receipt.status == ReceiptStatus::Published
                        && stages.iter().any(|s| {
                            s.stage_name == name
                                && outcomes
                                    .iter()
                                    .any(|o| o.period == s.period && o.changed && !o.dropped)
                        })
                })
        };
        let mut released = Ok(());
        for stage in made.iter().filter(|s| s.claimed) {
            let fate = if swapped(&stage.stage_name) {
                StageFate::Published
            } else {
                StageFate::Discarded
            };
            if let Err(e) = stage::release(&mut *conn, &stage.stage_name, fate).await {
                tracing::warn!(error = %e, "could not release a load's stage");
                stage::abandon_claims(&mut *conn).await;
                released = Err(e);
                break;
            }
        }
        let receipt = result?.2;
        released?;
        Ok(receipt)
    }

    async fn finish_with(
        &self,
        conn: &mut PgConnection,
        mut load: Finish<'_>,
        made: &mut Vec<Assembled>,
    ) -> WriteResult<Finished> {
        self.refuse_expired(load.def, load_periods(&load))?;
        let stages = stage_partitions(&mut *conn, &load, made).await?;
        let report = audit(&mut *conn, load.def, &load.audits, &stages).await?;
        if load.how == Finishing::AuditOnly {
            let report = report.unwrap_or(AuditReport {
                passed: true,
                audits: Vec::new(),
            });
            self.record_audit(&mut *conn, &load, &report).await?;
            let receipt = receipt(&load, made, &stages, &[], Some(report));
            return Ok((Vec::new(), stages, receipt));
        }
        self.check_audits(&mut *conn, &mut load, report.as_ref())
            .await?;
        let swap = ManySwap {
            def: load.def,
            stages: &stages,
            whole_table: load.periods.is_none(),
            conditions: load.conditions,
            staged_load: load.staged.then_some(load.ticket.load_id),
            rejects: load.rejects.take(),
        };
        if load.how == Finishing::DryRun {
            let outcomes = plan(&mut *conn, &swap).await?;
            let receipt = receipt(&load, made, &stages, &outcomes, report);
            return Ok((outcomes, stages, receipt));
        }
        let content = sum_of(stages.iter().map(|s| &s.content)).hex();
        let mut entry = LoadEntry {
            rows_received: load.rows_received,
            duplicates: dropped_count(made),
            rejected: load.rejected,
            content_sha256: Some(&content),
            // Published despite failed audits: the ledger says who and why.
            error: load.forced.as_ref().map(|forced| {
                serde_json::json!({"code": "audit_failed", "forced": forced, "report": report})
            }),
            ..load.ticket.entry()
        };
        let stored = |outcomes: &[PartitionOutcome]| {
            let receipt = receipt(&load, made, &stages, outcomes, report.clone());
            serde_json::to_value(receipt).expect("a receipt serializes")
        };
        let outcomes = publish_many(&mut *conn, swap, &mut entry, &stored).await?;
        let receipt = receipt(&load, made, &stages, &outcomes, report);
        Ok((outcomes, stages, receipt))
    }

    /// Refuses the load when an audit failed, unless an admin forced it
    /// (never in a dry run); `load.forced` then says so only when it was
    /// needed. A staged load keeps its latest report either way.
    async fn check_audits(
        &self,
        conn: &mut PgConnection,
        load: &mut Finish<'_>,
        report: Option<&AuditReport>,
    ) -> WriteResult<()> {
        let Some(report) = report else {
            load.forced = None;
            return Ok(());
        };
        if !report.passed && (load.forced.is_none() || load.how == Finishing::DryRun) {
            self.record_audit(&mut *conn, load, report).await?;
            return Err(WriteError::AuditFailed(report.clone()));
        }
        if report.passed {
            load.forced = None;
        }
        if load.staged {
            self.record_audit(&mut *conn, load, report).await?;
        }
        Ok(())
    }

    /// Keeps a load's audit report: a staged load's in its row (and, when
    /// failed, its status); a failed one in the ledger too.
    async fn record_audit(
        &self,
        conn: &mut PgConnection,
        load: &Finish<'_>,
        report: &AuditReport,
    ) -> WriteResult<()> {
        if load.staged {
            let stored = serde_json::to_value(report).expect("a report serializes");
            staged_loads::record_audit(conn, load.ticket.load_id, &stored, report.passed).await?;
        }
        // A dry run, or an audit alone, records nothing in the ledger.
        if !report.passed && load.how == Finishing::Publish {
            let entry = LoadEntry {
                status: LoadStatus::AuditFailed,
                rows_received: load.rows_received,
                error: Some(serde_json::json!({"code": "audit_failed", "report": report})),
                ..load.ticket.entry()
            };
            // A staged load's ledger row is its publish's; an attempt that
            // failed its audits leaves its report in the load's row instead.
            if !load.staged {
                self.store.record_load(&entry).await?;
            }
        }
        Ok(())
    }
}

fn dropped_count(made: &[Assembled]) -> u64 {
    made.iter()
        .map(|s| u64::try_from(s.dropped_row_hashes.len()).expect("a count fits u64"))
        .sum()
}

/// The receipt of `load` from its stages and what became of each partition
/// (none yet: an audit alone).
fn receipt(
    load: &Finish<'_>,
    made: &[Assembled],
    stages: &[PartitionStage],
    outcomes: &[PartitionOutcome],
    audit: Option<AuditReport>,
) -> LoadReceipt {
    let partitions: Vec<PartitionReceipt> = outcomes
        .iter()
        .map(|o| PartitionReceipt {
            ds: o.period.wire_label(),
            rows_written: if o.changed && !o.dropped {
                o.row_count
            } else {
                0
            },
            row_count: o.row_count,
            content_sha256: o.content.hex(),
            changed: o.changed,
            dropped: o.dropped,
        })
        .collect();
    let changed = outcomes.iter().any(|o| o.changed);
    let content = sum_of(stages.iter().map(|s| &s.content));
    LoadReceipt {
        load_id: load.ticket.load_id,
        table: load.def.name.clone(),
        mode: load.ticket.mode.to_string(),
        ds: load.ticket.ds,
        from: load.range.map(|r| r.0),
        to: load.range.map(|r| r.1),
        status: match (load.how, changed) {
            (Finishing::Publish, true) => ReceiptStatus::Published,
            (Finishing::Publish, false) => ReceiptStatus::Unchanged,
            (Finishing::DryRun, _) => ReceiptStatus::DryRun,
            (Finishing::AuditOnly, _) => ReceiptStatus::Staged,
        },
        rows_written: partitions.iter().map(|p| p.rows_written).sum(),
        partitions,
        rows_received: load.rows_received,
        duplicates: dropped_count(made),
        rejected: load.rejected,
        discarded_fields: load.discarded_fields,
        row_count: content.rows(),
        content_sha256: content.hex(),
        changed,
        dry_run: load.how == Finishing::DryRun,
        audit,
        forced: load.forced.clone(),
        replayed: None,
    }
}

/// What a finished load leaves: each partition's outcome, the stages, and
/// the receipt.
type Finished = (Vec<PartitionOutcome>, Vec<PartitionStage>, LoadReceipt);

/// The load's parts made into a stage per target partition, duplicates
/// resolved across them; the stages made are in `made` (to release).
async fn stage_partitions(
    conn: &mut PgConnection,
    load: &Finish<'_>,
    made: &mut Vec<Assembled>,
) -> WriteResult<Vec<PartitionStage>> {
    let def = load.def;
    let plans = plans(load.periods.as_deref(), &load.parts);
    let repeats = Resolve {
        policy: def.duplicates,
        load_id: load.ticket.load_id,
        log: def.duplicate_log,
        refuse: def.duplicates == DuplicatePolicy::Reject && load.rejects.is_none(),
    };
    assemble(&mut *conn, def, plans, repeats, made).await?;
    Ok(partition_stages(made, &load.parts))
}

/// The partitions a load replaces: its target's, or for a whole table
/// those its parts' rows fall in.
fn target_partitions(periods: Option<&[Period]>, parts: &[PartSource]) -> Vec<Period> {
    match periods {
        Some(periods) => periods.to_vec(),
        None => {
            let mut all: Vec<Period> = parts
                .iter()
                .flat_map(|p| p.contents.keys().copied())
                .collect();
            all.sort();
            all.dedup();
            all
        }
    }
}

/// `target_partitions` of a load being finished.
fn load_periods(load: &Finish<'_>) -> Vec<Period> {
    target_partitions(load.periods.as_deref(), &load.parts)
}

/// Where each target partition's rows come from.
fn plans(periods: Option<&[Period]>, parts: &[PartSource]) -> Vec<(Period, Source)> {
    target_partitions(periods, parts)
        .into_iter()
        .map(|period| {
            let holding: Vec<&PartSource> = parts
                .iter()
                .filter(|p| p.contents.get(&period).is_some_and(|c| c.rows() > 0))
                .collect();
            let source = match holding.as_slice() {
                [] => Source::Empty,
                [only] if only.contents.len() == 1 => Source::Sole(only.stage_name.clone()),
                several => Source::Copy(several.iter().map(|p| p.stage_name.clone()).collect()),
            };
            (period, source)
        })
        .collect()
}

/// Each assembled stage with its content: what its parts add, less the
/// versions its duplicates rule dropped.
fn partition_stages(made: &[Assembled], parts: &[PartSource]) -> Vec<PartitionStage> {
    let mut stages: Vec<PartitionStage> = made
        .iter()
        .map(|stage| {
            let mut content = sum_of(parts.iter().filter_map(|p| p.contents.get(&stage.period)));
            let rows_received = content.rows();
            for dropped in &stage.dropped_row_hashes {
                content.remove(dropped);
            }
            PartitionStage {
                period: stage.period,
                stage_name: stage.stage_name.clone(),
                content,
                rows_received,
            }
        })
        .collect();
    stages.sort_by_key(|s| s.period);
    stages
}

/// Runs the audits on the stages (none: no report).
async fn audit(
    conn: &mut PgConnection,
    def: &TableDef,
    audits: &Audits,
    stages: &[PartitionStage],
) -> WriteResult<Option<AuditReport>> {
    if audits.is_empty() {
        return Ok(None);
    }
    let idents: Vec<_> = stages
        .iter()
        .map(|s| staging_table(&s.stage_name))
        .collect();
    let periods: Vec<Period> = stages.iter().map(|s| s.period).collect();
    let live = contents::live_set(&mut *conn, def, Some(&periods)).await?;
    let live_rows = |period: Period| {
        live.iter()
            .find(|(p, _)| *p == period)
            .map(|(_, l)| l.content.rows())
    };
    let staged: Vec<StagedPartition> = stages
        .iter()
        .zip(&idents)
        .map(|(stage, ident)| StagedPartition {
            period: stage.period,
            stage: ident,
            rows: stage.content.rows(),
            live_rows: live_rows(stage.period),
        })
        .collect();
    Ok(Some(run_audits(conn, def, audits, &staged).await?))
}
