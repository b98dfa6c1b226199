//! Partitions past their table's retention, dropped by an expire round:
//! one round at a time across every idem process (a session lock on the
//! round's connection, released by Postgres if the process dies), each
//! partition dropped in one transaction with its ledger row, so that a
//! partition is wholly there or wholly gone, and recorded exactly when gone.

use chrono::NaiveDateTime;
use sqlx::pool::PoolConnection;
use sqlx::{PgConnection, Postgres};

use super::remove::remove_partition;
use crate::names::TableName;
use crate::period::Period;
use crate::schema::{HistoryKind, TableDef};
use crate::store::history::HistoryShape;
use crate::store::idempotency::begin_bounded_on;
use crate::store::ledger::{self, LoadEntry};
use crate::store::locks::{lock_key, lock_partition, lock_table_shared};
use crate::store::sql::{history_table, DELETED, VALID_FROM};
use crate::store::{contents, Store, StoreResult};

/// What an expire dropped: the partition's rows and content as they stood.
#[derive(Clone, Debug)]
pub struct DroppedPartition {
    pub rows: u64,
    pub content_sha256: String,
}

/// A round under way: its connection holds the round's lock.
pub struct ExpireRound {
    conn: PoolConnection<Postgres>,
}

impl Store {
    /// Starts an expire round, unless another process (or task) is running
    /// one: then `None`.
    pub async fn begin_expire_round(&self) -> StoreResult<Option<ExpireRound>> {
        let mut conn = self.acquire().await?;
        let ours: bool = sqlx::query_scalar("select pg_try_advisory_lock($1)")
            .bind(round_lock())
            .fetch_one(&mut *conn)
            .await?;
        Ok(ours.then_some(ExpireRound { conn }))
    }
}

/// The session lock one expire round at a time holds.
fn round_lock() -> i64 {
    lock_key("expire-round", &[])
}

impl ExpireRound {
    /// The tables that declare a retention.
    pub async fn tables(&mut self) -> StoreResult<Vec<TableDef>> {
        let defs: Vec<sqlx::types::Json<TableDef>> = sqlx::query_scalar(
            "select definition from idem.tables where definition ? 'retention' order by name",
        )
        .fetch_all(&mut *self.conn)
        .await?;
        Ok(defs.into_iter().map(|d| d.0).collect())
    }

    /// The labels of `table`'s partitions, oldest first.
    pub async fn partitions(&mut self, table: &TableName) -> StoreResult<Vec<String>> {
        Ok(
            sqlx::query_scalar("select ds from idem.partitions where table_name = $1 order by ds")
                .bind(table.as_str())
                .fetch_all(&mut *self.conn)
                .await?,
        )
    }

    /// Drops partition `ds` of `def` with what idem keeps of it (its
    /// registry row and deltas, its pending rejects, its logged duplicates;
    /// its keys recorded as removed in the table's history), and records
    /// `entry` (given the rows and content dropped) in the ledger: one
    /// transaction. `None` when the partition was gone already.
    pub async fn expire(
        &mut self,
        def: &TableDef,
        ds: Period,
        entry: LoadEntry<'_>,
        lock_wait: std::time::Duration,
    ) -> StoreResult<Option<DroppedPartition>> {
        let mut tx = begin_bounded_on(&mut self.conn, lock_wait).await?;
        // As a writer does: a drop of the table waits for the expire, and
        // the partition's writers finish first (its lock exclusive).
        lock_table_shared(&mut tx, &def.name).await?;
        lock_partition(&mut tx, &def.name, ds).await?;
        let Some(live) = contents::live(&mut tx, &def.name, ds).await? else {
            return Ok(None);
        };
        if !remove_partition(&mut tx, def, ds, entry.load_id).await? {
            return Ok(None);
        }
        forget_period(&mut tx, &def.name, ds).await?;
        let dropped = DroppedPartition {
            rows: live.content.rows(),
            content_sha256: live.content.hex(),
        };
        let entry = LoadEntry {
            rows_written: dropped.rows,
            content_sha256: Some(&dropped.content_sha256),
            ..entry
        };
        ledger::insert(&mut tx, &entry).await?;
        tx.commit().await?;
        Ok(Some(dropped))
    }

    /// Deletes the versions of `def`'s history whose validity ended at or
    /// before `limit`: a key's versions followed by another that began by
    /// then, and every version of a key removed by then. Returns how many.
    pub async fn expire_history(
        &mut self,
        def: &TableDef,
        limit: NaiveDateTime,
    ) -> StoreResult<u64> {
        if def.history != Some(HistoryKind::Scd2) {
            return Ok(0);
        }
        let Some(shape) = HistoryShape::of(def) else {
            return Ok(0);
        };
        let key = shape.key_list();
        let on_key = shape
            .key
            .iter()
            .map(|k| format!("h.{k} = e.{k}"))
            .collect::<Vec<_>>()
            .join(" and ");
        let table = history_table(&def.name);
        // language=PostgreSQL
        let sql = format!(
            "with versions as (
               select {key}, h.{VALID_FROM}, h.{DELETED},
                      lead(h.{VALID_FROM}) over (partition by {key} order by h.{VALID_FROM}) as ends
                 from {table} h),
             ended as (
               select * from versions
                where ends <= $1 or (ends is null and {DELETED} and {VALID_FROM} <= $1))
             delete from {table} h using ended e
              where {on_key} and h.{VALID_FROM} = e.{VALID_FROM}"
        );
        let deleted = sqlx::query(&sql)
            .bind(limit)
            .execute(&mut *self.conn)
            .await?
            .rows_affected();
        Ok(deleted)
    }

    /// Ends the round: its lock released, its connection back to the pool.
    pub async fn finish(mut self) {
        let _ = sqlx::query("select pg_advisory_unlock($1)")
            .bind(round_lock())
            .execute(&mut *self.conn)
            .await;
    }
}

/// The rejects and logged duplicates of a dropped period: they belonged to
/// rows that are gone, and a replay must not bring the period back.
async fn forget_period(tx: &mut PgConnection, table: &TableName, ds: Period) -> StoreResult<()> {
    for sql in [
        "delete from idem.rejects where table_name = $1 and ds = $2",
        "delete from idem.duplicates where table_name = $1 and ds = $2",
    ] {
        sqlx::query(sql)
            .bind(table.as_str())
            .bind(ds.label())
            .execute(&mut *tx)
            .await?;
    }
    Ok(())
}
