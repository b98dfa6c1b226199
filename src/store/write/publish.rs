//! The partition swap: the staged table becomes the partition in one short
//! transaction. Readers see the old day or the new day, never a mix and
//! never an empty day.
//!
//! Lock order, the same for every writer: the table's advisory lock (shared
//! here, exclusive for a schema change), then the partition's (serializes
//! writers of one partition), then the parent table itself (taken by
//! DETACH/ATTACH). DETACH holds ACCESS EXCLUSIVE on the parent until
//! commit, so readers of the table wait for the swap's few catalog updates,
//! not for the COPY, which happened before.

use sqlx::{Connection, PgConnection};

use super::history::{self, Replacement};
use crate::ids::LoadId;
use crate::ingest::reject_spool::RejectSpool;
use crate::ingest::ContentHash;
use crate::names::TableName;
use crate::period::Period;
use crate::schema::{Distribution, DistributionDefault, TableDef};
use crate::store::contents;
use crate::store::ledger::{self, LoadEntry, LoadStatus};
use crate::store::locks::{lock_partition, lock_table_shared};
use crate::store::rejects;
use crate::store::sql::{
    self, all_columns, live_partition, parent_table, period_literal, staging_table, Ident,
    PARTS_SCHEMA,
};
use crate::store::{catalog, count, StoreError, StoreResult};
use crate::versions::Expected;

/// The live partition's registry entry.
#[derive(Clone, Debug)]
pub struct Current {
    pub content_sha256: String,
    pub body_sha256: String,
    pub row_count: u64,
    pub rows_received: u64,
    /// Of them, kept in the rejects store.
    pub rejected: u64,
    /// The load the body was.
    pub load_id: LoadId,
}

/// What the registry keeps of the body a partition was built from, so that
/// the same body sent again is known before anything is decoded.
#[derive(Clone, Copy, Debug)]
pub struct BodyFacts<'a> {
    pub sha256: &'a str,
    pub rows_received: u64,
    /// Of them, kept in the rejects store.
    pub rejected: u64,
    /// The content hash of the rows staged (what the partition will hold).
    pub content: &'a ContentHash,
}

/// The live partition (its registry row and deltas; see `contents`).
pub async fn current(
    conn: &mut PgConnection,
    table: &TableName,
    ds: Period,
) -> StoreResult<Option<Current>> {
    Ok(contents::live(conn, table, ds).await?.map(|live| Current {
        content_sha256: live.content.hex(),
        body_sha256: live.body_sha256,
        row_count: live.content.rows(),
        rows_received: live.rows_received,
        rejected: live.rejected,
        load_id: live.load_id,
    }))
}

pub enum Published {
    /// The stage is now the partition; in a table this swap created (a
    /// new table, not made first by another writer), or not.
    Swapped { table_created: bool },
    /// The live partition already holds this content; the stage is left for
    /// the caller to drop.
    Unchanged,
}

/// What a swap puts where.
pub struct Swap<'a> {
    pub def: &'a TableDef,
    /// The table does not exist yet: it is created (from `def`, as
    /// inferred) in the swap's transaction, so a load that fails leaves none.
    pub new_table: bool,
    /// Where a new table's rows live when `def` does not say.
    pub distribution_default: DistributionDefault,
    pub ds: Period,
    pub stage_name: &'a str,
    pub body: BodyFacts<'a>,
    /// What the writer expects of the live version.
    pub conditions: &'a Expected,
    /// The load's bad rows, under `bad_rows: quarantine`.
    pub rejects: Option<RejectSpool>,
}

/// Swaps the stage in as the partition, or finds the partition already
/// equal to it. The ledger entry is written in the same transaction, so a
/// load is recorded as published exactly when it is.
#[tracing::instrument(skip_all, fields(table = %swap.def.name, ds = %swap.ds, load_id = %entry.load_id))]
pub async fn publish(
    conn: &mut PgConnection,
    swap: Swap<'_>,
    entry: &mut LoadEntry<'_>,
) -> StoreResult<Published> {
    let Swap {
        def,
        new_table,
        distribution_default,
        ds,
        stage_name,
        body,
        conditions,
        rejects,
    } = swap;
    let mut tx = conn.begin().await?;
    let created = match new_table {
        true => {
            let inferred = catalog::Origin::Inferred;
            Some(catalog::declare(&mut tx, def, inferred, distribution_default).await?)
        }
        false => None,
    };
    let table_created = matches!(created, Some(catalog::Declared::Created(_)));
    // The table as made, its distribution settled (the stage was built
    // before it had one; ATTACH distributes it like the table).
    let made;
    let def = match created {
        Some(catalog::Declared::Created(def)) => {
            made = def;
            &made
        }
        _ => def,
    };
    let live = lock_for_swap(&mut tx, def, ds).await?;
    conditions.check(live.as_ref().map(|c| c.content_sha256.as_str()))?;
    let published = if live
        .as_ref()
        .is_some_and(|c| Some(c.content_sha256.as_str()) == entry.content_sha256)
    {
        entry.status = LoadStatus::Unchanged;
        entry.changed = false;
        entry.rows_written = 0;
        Published::Unchanged
    } else {
        let replacing = live.is_some();
        swap_in(&mut tx, def, ds, stage_name, replacing, entry.load_id).await?;
        register_swapped(&mut tx, def, ds, body, entry.rows_written, entry.load_id).await?;
        entry.status = LoadStatus::Published;
        entry.changed = true;
        Published::Swapped { table_created }
    };
    ledger::insert(&mut tx, entry).await?;
    // Whether or not the day changed, this load is its latest version: its
    // rejects are the day's pending ones.
    rejects::supersede(&mut tx, &def.name, ds, entry.load_id).await?;
    if let Some(rejects) = rejects {
        rejects::keep(&mut tx, rejects).await?;
    }
    tx.commit().await?;
    Ok(published)
}

/// Takes the swap's locks and returns the live partition. The stage was
/// built for `def`; if the table changed since, it no longer fits. Schema
/// changes hold the table's lock exclusively; like every writer, take the
/// table's lock before the partition's.
async fn lock_for_swap(
    tx: &mut PgConnection,
    def: &TableDef,
    ds: Period,
) -> StoreResult<Option<Current>> {
    lock_table_shared(&mut *tx, &def.name).await?;
    lock_partition(&mut *tx, &def.name, ds).await?;
    if catalog::table_def(&mut *tx, &def.name).await?.as_ref() != Some(def) {
        return Err(StoreError::TableChanged(def.name.clone()));
    }
    current(&mut *tx, &def.name, ds).await
}

/// The stage becomes the partition: what it changes recorded in the
/// table's history, if it keeps one, then the old one detached and dropped,
/// the stage moved, renamed and attached (its CHECK spares ATTACH a scan).
pub(super) async fn swap_in(
    tx: &mut PgConnection,
    def: &TableDef,
    ds: Period,
    stage_name: &str,
    replacing: bool,
    load_id: LoadId,
) -> StoreResult<()> {
    let parent = parent_table(&def.name);
    let partition = live_partition(def, ds);
    let replacement = Replacement {
        live: replacing.then_some(&partition),
        stage: Some(&staging_table(stage_name)),
        load_id,
    };
    history::record_replacement(&mut *tx, def, replacement).await?;
    if def.distribution == Distribution::Reference {
        return copy_into_reference(tx, def, stage_name).await;
    }
    let mut statements = Vec::with_capacity(5);
    if replacing {
        statements.push(format!("alter table {parent} detach partition {partition}"));
        statements.push(format!("drop table {partition}"));
    }
    statements.push(format!(
        "alter table {} set schema {PARTS_SCHEMA}",
        staging_table(stage_name)
    ));
    statements.push(format!(
        "alter table {PARTS_SCHEMA}.{} rename to {}",
        Ident::stage(stage_name),
        Ident::partition(&def.name, ds)
    ));
    statements.push(format!(
        "alter table {parent} attach partition {partition} for values in ({})",
        period_literal(def, ds)
    ));
    for sql in statements {
        sqlx::query(&sql).execute(&mut *tx).await?;
    }
    Ok(())
}

/// A reference table's swap: its rows replaced by the stage's, which Citus
/// writes to every node in this transaction, and the (local) stage dropped.
/// A plain table's one partition is small, or it would not be a reference
/// table.
async fn copy_into_reference(
    tx: &mut PgConnection,
    def: &TableDef,
    stage_name: &str,
) -> StoreResult<()> {
    let parent = parent_table(&def.name);
    let stage = staging_table(stage_name);
    let columns = sql::join(&all_columns(def));
    let statements = [
        format!("delete from {parent}"),
        format!("insert into {parent} ({columns}) select {columns} from {stage}"),
        format!("drop table {stage}"),
    ];
    for sql in statements {
        sqlx::query(&sql).execute(&mut *tx).await?;
    }
    Ok(())
}

/// The registry entry of the partition load `load_id` swapped in, holding
/// `row_count` rows.
pub(super) async fn register_swapped(
    tx: &mut PgConnection,
    def: &TableDef,
    ds: Period,
    body: BodyFacts<'_>,
    row_count: u64,
    load_id: LoadId,
) -> StoreResult<()> {
    // language=PostgreSQL
    sqlx::query(
        "insert into idem.partitions (table_name, ds, row_count, content_sha256, body_sha256, rows_received,
                                      load_id, content_sum, rejected, published_at)
         values ($1, $2, $3, $4, $5, $6, $7, $8, $9, now())
         on conflict (table_name, ds) do update
            set row_count = excluded.row_count, content_sha256 = excluded.content_sha256,
                content_sum = excluded.content_sum,
                body_sha256 = excluded.body_sha256, rows_received = excluded.rows_received,
                rejected = excluded.rejected,
                load_id = excluded.load_id, published_at = excluded.published_at",
    )
    .bind(def.name.as_str())
    .bind(ds.label())
    .bind(count(row_count)?)
    .bind(body.content.hex())
    .bind(body.sha256)
    .bind(count(body.rows_received)?)
    .bind(load_id)
    .bind(&body.content.sum_bytes()[..])
    .bind(count(body.rejected)?)
    .execute(&mut *tx)
    .await?;
    // The deltas were changes to the partition just replaced.
    contents::clear_deltas(tx, &def.name, ds).await
}
