//! The swap of a load of several partitions (a range, a whole table, a
//! staged load): every target partition swapped in, or found unchanged, in
//! ONE transaction, with the ledger entry (and a staged load's status and
//! receipt). Readers see every partition of the load old or every one new.
//!
//! Locks as `publish` takes them, for each partition in order; a whole-table
//! load takes the table's lock exclusively instead of shared, so that no
//! partition appears beside it while it drops the ones its body lacks.

use sqlx::{Connection, PgConnection};

use super::publish::{register_swapped, swap_in, BodyFacts};
use super::remove::remove_partition;
use crate::ids::LoadId;
use crate::ingest::reject_spool::RejectSpool;
use crate::ingest::ContentHash;
use crate::period::Period;
use crate::schema::TableDef;
use crate::store::contents;
use crate::store::ledger::{self, LoadEntry, LoadStatus};
use crate::store::locks::{lock_partition, lock_table, lock_table_shared};
use crate::store::rejects;
use crate::store::staged_loads::{self, StagedStatus, StatusChange};
use crate::store::{catalog, StoreError, StoreResult};
use crate::versions::Expected;

/// One target partition's new content, staged.
#[derive(Clone, Debug)]
pub struct PartitionStage {
    pub period: Period,
    pub stage_name: String,
    pub content: ContentHash,
    /// The rows the load received for it.
    pub rows_received: u64,
}

/// What becomes of one partition.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PartitionOutcome {
    pub period: Period,
    pub changed: bool,
    /// Dropped: a whole-table load's body had no rows for it.
    pub dropped: bool,
    pub row_count: u64,
    pub content: ContentHash,
}

/// A load of several partitions, staged and ready.
pub struct ManySwap<'a> {
    pub def: &'a TableDef,
    /// In period order.
    pub stages: &'a [PartitionStage],
    /// The whole table: its partitions not in `stages` are dropped.
    pub whole_table: bool,
    /// What the writer expects of the target's live content (the sum of its
    /// partitions').
    pub conditions: &'a Expected,
    /// A staged load's id, marked published in the same transaction.
    pub staged_load: Option<LoadId>,
    /// The load's bad rows, under `bad_rows: quarantine`.
    pub rejects: Option<RejectSpool>,
}

/// What the publish decided, for the caller to answer; `receipt` makes the
/// staged load's stored receipt from it (inside the transaction).
pub type Receipting<'r> = &'r (dyn Fn(&[PartitionOutcome]) -> serde_json::Value + Sync);

/// Swaps every changed partition in (and drops the ones a whole-table load
/// lacks) in one transaction with the ledger entry. Stages of unchanged
/// partitions are left for the caller to drop.
pub async fn publish_many(
    conn: &mut PgConnection,
    swap: ManySwap<'_>,
    entry: &mut LoadEntry<'_>,
    receipt: Receipting<'_>,
) -> StoreResult<Vec<PartitionOutcome>> {
    let mut tx = conn.begin().await?;
    let live = lock_target(&mut tx, &swap).await?;
    check_conditions(swap.conditions, &live)?;
    let outcomes = decide(&swap, &live);
    for outcome in outcomes.iter().filter(|o| o.changed) {
        apply(&mut tx, &swap, outcome, &live, entry.load_id).await?;
    }
    let changed = outcomes.iter().any(|o| o.changed);
    entry.changed = changed;
    entry.status = if changed {
        LoadStatus::Published
    } else {
        LoadStatus::Unchanged
    };
    entry.rows_written = outcomes
        .iter()
        .filter(|o| o.changed)
        .map(|o| o.row_count)
        .sum();
    ledger::insert(&mut tx, entry).await?;
    if let Some(spool) = swap.rejects {
        rejects::keep(&mut tx, spool).await?;
    }
    if let Some(load_id) = swap.staged_load {
        let stored = receipt(&outcomes);
        let change = StatusChange {
            receipt: Some(&stored),
            ..StatusChange::default()
        };
        staged_loads::set_status(&mut tx, load_id, StagedStatus::Published, change).await?;
    }
    tx.commit().await?;
    Ok(outcomes)
}

/// What a publish would do now, without doing it (a dry run).
pub async fn plan(
    conn: &mut PgConnection,
    swap: &ManySwap<'_>,
) -> StoreResult<Vec<PartitionOutcome>> {
    let live = read_live(conn, swap).await?;
    check_conditions(swap.conditions, &live)?;
    Ok(decide(swap, &live))
}

/// The live partitions the load replaces (every partition of the table for
/// a whole-table load), by period.
type LiveSet = Vec<(Period, ContentHash)>;

/// Takes the locks and reads the live partitions under them; the stages
/// were built for `def`: if the table changed since, they no longer fit.
async fn lock_target(tx: &mut PgConnection, swap: &ManySwap<'_>) -> StoreResult<LiveSet> {
    let table = &swap.def.name;
    if swap.whole_table {
        lock_table(&mut *tx, table).await?;
    } else {
        lock_table_shared(&mut *tx, table).await?;
        for stage in swap.stages {
            lock_partition(&mut *tx, table, stage.period).await?;
        }
    }
    if catalog::table_def(&mut *tx, table).await?.as_ref() != Some(swap.def) {
        return Err(StoreError::TableChanged(table.clone()));
    }
    read_live(tx, swap).await
}

async fn read_live(conn: &mut PgConnection, swap: &ManySwap<'_>) -> StoreResult<LiveSet> {
    let periods: Option<Vec<Period>> =
        (!swap.whole_table).then(|| swap.stages.iter().map(|s| s.period).collect());
    let live = contents::live_set(conn, swap.def, periods.as_deref()).await?;
    Ok(live.into_iter().map(|(p, l)| (p, l.content)).collect())
}

fn check_conditions(conditions: &Expected, live: &LiveSet) -> StoreResult<()> {
    if matches!(conditions, Expected::Any) {
        return Ok(());
    }
    let hex = (!live.is_empty()).then(|| sum_of(live.iter().map(|(_, c)| c)).hex());
    conditions.check(hex.as_deref())?;
    Ok(())
}

/// The sum of several partitions' contents: a range's or a table's.
pub fn sum_of<'a>(contents: impl Iterator<Item = &'a ContentHash>) -> ContentHash {
    let mut sum = ContentHash::default();
    for content in contents {
        sum.add_all(content);
    }
    sum
}

/// Each stage against its live partition (unchanged when equal), then the
/// live partitions of a whole table that no stage replaces (dropped).
fn decide(swap: &ManySwap<'_>, live: &LiveSet) -> Vec<PartitionOutcome> {
    let live_of = |period: Period| live.iter().find(|(p, _)| *p == period).map(|(_, c)| c);
    let mut outcomes: Vec<PartitionOutcome> = swap
        .stages
        .iter()
        .map(|stage| PartitionOutcome {
            period: stage.period,
            changed: live_of(stage.period).is_none_or(|c| *c != stage.content),
            dropped: false,
            row_count: stage.content.rows(),
            content: stage.content,
        })
        .collect();
    if swap.whole_table {
        for (period, _) in live {
            if !swap.stages.iter().any(|s| s.period == *period) {
                outcomes.push(PartitionOutcome {
                    period: *period,
                    changed: true,
                    dropped: true,
                    row_count: 0,
                    content: ContentHash::default(),
                });
            }
        }
        outcomes.sort_by_key(|o| o.period);
    }
    outcomes
}

/// Swaps one partition's stage in, or drops it.
async fn apply(
    tx: &mut PgConnection,
    swap: &ManySwap<'_>,
    outcome: &PartitionOutcome,
    live: &LiveSet,
    load_id: LoadId,
) -> StoreResult<()> {
    let def = swap.def;
    let period = outcome.period;
    if outcome.dropped {
        // A whole-table load's body had no rows for it: it goes.
        remove_partition(tx, def, period, load_id).await?;
        return rejects::supersede(tx, &def.name, period, load_id).await;
    }
    let stage = swap
        .stages
        .iter()
        .find(|s| s.period == period)
        .expect("a changed partition has its stage");
    let replacing = live.iter().any(|(p, _)| *p == period);
    swap_in(tx, def, period, &stage.stage_name, replacing, load_id).await?;
    let body = BodyFacts {
        // No one body built it: a re-sent body is never taken for it.
        sha256: "",
        rows_received: stage.rows_received,
        rejected: 0,
        content: &stage.content,
    };
    register_swapped(tx, def, period, body, outcome.row_count, load_id).await?;
    rejects::supersede(tx, &def.name, period, load_id).await
}
