//! Dropping a whole table (`DELETE /tables/{table}`): its Postgres table
//! and partitions, its history, its registry rows, rejects, duplicates, schema history,
//! partition deltas, the Idempotency-Keys of its loads, the channels whose
//! last commit wrote to it and the staged rows of its open loads
//! (abandoned), in one transaction. The ledger keeps the table's loads, each marked with the
//! drop that removed what it wrote, and records the drop itself.

use std::time::Duration;

use sqlx::{Connection, PgConnection};

use super::ledger::{self, LoadEntry};
use super::locks::lock_table;
use super::sql::parent_table;
use super::{Store, StoreResult};
use crate::names::TableName;

/// What a drop removed besides the table's rows, for its receipt.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Dropped {
    /// Idempotency-Keys of the table's loads.
    pub idempotency_keys: u64,
    /// Channels (of any principal) whose last commit wrote to the table.
    pub channels: u64,
    /// Loads still open on the table, abandoned.
    pub open_loads: u64,
}

impl Store {
    /// Drops `table` and records `entry` (the drop) in the ledger; `None`,
    /// recording nothing, when there was no such table. Lock waits end
    /// after `lock_wait` (the caller answers busy and the client retries).
    #[tracing::instrument(skip(self, entry), fields(load_id = %entry.load_id))]
    pub async fn drop_table(
        &self,
        table: &TableName,
        entry: &LoadEntry<'_>,
        lock_wait: Duration,
    ) -> StoreResult<Option<Dropped>> {
        let mut conn = self.acquire().await?;
        let mut tx = conn.begin().await?;
        sqlx::query(&format!(
            "set local lock_timeout = {}",
            lock_wait.as_millis()
        ))
        .execute(&mut *tx)
        .await?;
        // A channel's offset says the rows up to it are written, and they
        // are about to go: a producer that starts over from its source must
        // write again, not be told its offsets are committed. Before the
        // table's lock, in the order a channel write takes them (its
        // channel's row, then the table's lock): the drop waits for a
        // write in flight on such a channel, and cannot deadlock with it.
        let channels = super::channels::forget_table(&mut tx, table).await?;
        // Exclusive: every writer holds the table's lock shared from its
        // swap or merge to its commit, so a write either commits before the
        // drop or finds the table gone after it (and fails or starts anew).
        lock_table(&mut tx, table).await?;
        let exists: Option<i32> =
            sqlx::query_scalar("select 1 from idem.tables where name = $1 for update")
                .bind(table.as_str())
                .fetch_optional(&mut *tx)
                .await?;
        if exists.is_none() {
            return Ok(None);
        }
        let (idempotency_keys, open_loads) = remove(&mut tx, table, entry).await?;
        let dropped = Dropped {
            idempotency_keys,
            channels,
            open_loads,
        };
        ledger::insert(&mut tx, entry).await?;
        tx.commit().await?;
        // Replays of the dropped loads' keys must not outlive their rows
        // here. (Another process forgets them when it restarts; see
        // docs/guide/schema.md, "Dropping a table".)
        self.completed.forget_all();
        Ok(Some(dropped))
    }
}

/// Everything of `table` but its ledger entries, which are marked dropped,
/// and its channels (see `drop_table`); the Idempotency-Keys removed and the
/// open loads abandoned.
async fn remove(
    tx: &mut PgConnection,
    table: &TableName,
    entry: &LoadEntry<'_>,
) -> StoreResult<(u64, u64)> {
    // ACCESS EXCLUSIVE on the parent and its partitions: waits for readers
    // streaming a partition (bounded by the lock timeout).
    sqlx::query(&format!("drop table if exists {}", parent_table(table)))
        .execute(&mut *tx)
        .await?;
    super::history::drop(&mut *tx, table).await?;
    // A key's stored answer tells of rows that are gone: the same request
    // sent again (a rerun after a fix) must write again, not replay.
    // language=PostgreSQL
    let idempotency_keys = sqlx::query(
        "delete from idem.idempotency_keys
          where load_id in (select load_id from idem.loads where table_name = $1)",
    )
    .bind(table.as_str())
    .execute(&mut *tx)
    .await?
    .rows_affected();
    // Loads still open on it: nothing left to publish them into.
    let open_loads = super::staged_loads::abandon_all(tx, table).await?;
    sqlx::query("delete from idem.partition_deltas where table_name = $1")
        .bind(table.as_str())
        .execute(&mut *tx)
        .await?;
    sqlx::query(
        "update idem.loads set dropped_by = $2 where table_name = $1 and dropped_by is null",
    )
    .bind(table.as_str())
    .bind(entry.load_id)
    .execute(&mut *tx)
    .await?;
    // Cascades to its partitions' registry rows, rejects, duplicates and
    // schema history.
    sqlx::query("delete from idem.tables where name = $1")
        .bind(table.as_str())
        .execute(&mut *tx)
        .await?;
    Ok((idempotency_keys, open_loads))
}
