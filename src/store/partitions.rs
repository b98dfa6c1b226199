//! The partitions registry, and reading a partition or a whole table back
//! (a table's content hash is the sum of its partitions'). Dropping a
//! partition is a write: `write::remove`.

use bytes::Bytes;
use chrono::{DateTime, Utc};
use sqlx::PgConnection;
use tokio::sync::mpsc;

use super::contents::{self, Live, LIVE_GROUP, LIVE_SELECT};
use super::read::{RowFormat, RowsRead};
use super::sql::{column_list, parent_table, partition_key, period_literal};
use super::StoreError;
use super::{Store, StoreResult};
use crate::ids::LoadId;
use crate::ingest::ContentHash;
use crate::names::TableName;
use crate::period::Period;
use crate::schema::TableDef;

#[derive(Clone, Debug)]
pub struct PartitionInfo {
    /// The partition's label (`2026-10-12`, `2026-10-12T13`, `2026-10`).
    pub ds: String,
    pub rows: u64,
    pub content_sha256: String,
    pub load_id: LoadId,
    pub published_at: DateTime<Utc>,
}

impl From<Live> for PartitionInfo {
    fn from(live: Live) -> Self {
        PartitionInfo {
            ds: live.ds,
            rows: live.content.rows(),
            content_sha256: live.content.hex(),
            load_id: live.load_id,
            published_at: live.published_at,
        }
    }
}

fn info(row: &sqlx::postgres::PgRow) -> StoreResult<PartitionInfo> {
    Live::from_row(row).map(PartitionInfo::from)
}

/// A whole table's content: the sum (`ContentHash::add_all`) of its live
/// partitions' contents, order-independent as a partition's is, and the
/// partitions in ds order.
#[derive(Clone, Debug)]
pub struct TableContent {
    pub content: ContentHash,
    pub partitions: Vec<Live>,
}

/// The live partitions of `table` with their deltas, read in one
/// statement, and their sum. A table without partitions sums to the empty
/// content.
pub async fn table_content(
    conn: &mut PgConnection,
    table: &TableName,
) -> StoreResult<TableContent> {
    let sql = format!("{LIVE_SELECT} where p.table_name = $1 {LIVE_GROUP} order by p.ds");
    let rows = sqlx::query(&sql)
        .bind(table.as_str())
        .fetch_all(&mut *conn)
        .await?;
    let partitions = rows
        .iter()
        .map(Live::from_row)
        .collect::<StoreResult<Vec<Live>>>()?;
    let mut content = ContentHash::default();
    for live in &partitions {
        content.add_all(&live.content);
    }
    Ok(TableContent {
        content,
        partitions,
    })
}

/// The table's definition as the read's snapshot sees it (read after the
/// table's lock, which no schema change passes): the rows are decoded by
/// their column types, and an `evolve` that widened a column after the
/// caller read `def` must not be decoded by the old ones.
async fn definition_in_snapshot(tx: &mut PgConnection, def: &TableDef) -> StoreResult<TableDef> {
    Ok(super::catalog::table_def(tx, &def.name)
        .await?
        .unwrap_or_else(|| def.clone()))
}

impl Store {
    pub async fn partition(
        &self,
        table: &TableName,
        ds: Period,
    ) -> StoreResult<Option<PartitionInfo>> {
        let live = contents::live(&mut *self.acquire().await?, table, ds).await?;
        Ok(live.map(PartitionInfo::from))
    }

    /// A table's partitions in date order, after the date `after`.
    pub async fn partitions(
        &self,
        table: &TableName,
        after: Option<Period>,
        limit: i64,
    ) -> StoreResult<Vec<PartitionInfo>> {
        let sql = format!(
            "{LIVE_SELECT} where p.table_name = $1 and ($2::text is null or p.ds > $2)
             {LIVE_GROUP} order by p.ds limit $3"
        );
        let rows = sqlx::query(&sql)
            .bind(table.as_str())
            .bind(after.map(|p| p.label()))
            .bind(limit)
            .fetch_all(&mut *self.acquire().await?)
            .await?;
        rows.iter().map(info).collect()
    }

    /// Opens a consistent read of partition `ds`: its registry entry now,
    /// and its rows as of the same moment, or `None` when it does not exist.
    ///
    /// A swap replaces tables, which a snapshot alone does not fence: the
    /// read holds ACCESS SHARE on the parent from before its snapshot, so a
    /// swap (DETACH takes ACCESS EXCLUSIVE) commits wholly before the read
    /// or waits for it. Writes that change rows in place commit the rows
    /// and the registry together, and one REPEATABLE READ snapshot sees both
    /// or neither. A reading SELECT holds that lock anyway while it streams;
    /// this only widens it to the registry read before.
    pub async fn open_partition(
        &self,
        def: &TableDef,
        ds: Period,
    ) -> StoreResult<Option<PartitionSnapshot>> {
        let conn = self.acquire().await?;
        let begin = "begin isolation level repeatable read read only";
        let mut tx = sqlx::Transaction::begin(conn, Some(begin.into())).await?;
        sqlx::query(&format!(
            "lock table {} in access share mode",
            parent_table(&def.name)
        ))
        .execute(&mut *tx)
        .await?;
        let def = &definition_in_snapshot(&mut tx, def).await?;
        let info = contents::live(&mut tx, &def.name, ds)
            .await?
            .map(PartitionInfo::from);
        let select = format!(
            "select {} from {} where {} = {}",
            column_list(def),
            parent_table(&def.name),
            partition_key(def),
            period_literal(def, ds)
        );
        Ok(info.map(|info| PartitionSnapshot {
            rows: RowsRead::columns(tx, select, def),
            info,
        }))
    }

    /// The whole table's content now (HEAD, preconditions).
    pub async fn table_content(&self, table: &TableName) -> StoreResult<TableContent> {
        table_content(&mut *self.acquire().await?, table).await
    }

    /// Opens a consistent read of the whole table, fenced as
    /// `open_partition`'s: its content, and its rows partition by partition
    /// in ds order, each as a partition GET reads it. The partitions' reads
    /// are one `union all`, run without parallel workers so that Postgres
    /// appends them in the order written.
    pub async fn open_table(&self, def: &TableDef) -> StoreResult<TableSnapshot> {
        let conn = self.acquire().await?;
        let begin = "begin isolation level repeatable read read only";
        let mut tx = sqlx::Transaction::begin(conn, Some(begin.into())).await?;
        let parent = parent_table(&def.name);
        sqlx::query(&format!("lock table {parent} in access share mode"))
            .execute(&mut *tx)
            .await?;
        sqlx::query("set local max_parallel_workers_per_gather = 0")
            .execute(&mut *tx)
            .await?;
        let def = &definition_in_snapshot(&mut tx, def).await?;
        let content = table_content(&mut tx, &def.name).await?;
        let columns = column_list(def);
        let key = partition_key(def);
        let mut parts = Vec::with_capacity(content.partitions.len());
        for live in &content.partitions {
            let ds = Period::parse(&live.ds, def.grain).ok_or(StoreError::Corrupt(
                "a partition's ds is not one of its table",
            ))?;
            let literal = period_literal(def, ds);
            parts.push(format!(
                "(select {columns} from {parent} where {key} = {literal})"
            ));
        }
        let select = match parts.is_empty() {
            true => format!("select {columns} from {parent} where false"),
            false if def.distribution.needs_citus() => {
                let live: Vec<String> = content
                    .partitions
                    .iter()
                    .filter_map(|live| Period::parse(&live.ds, def.grain))
                    .map(|ds| period_literal(def, ds))
                    .collect();
                // In partition order all the same: `RowsRead` orders a
                // Citus table's reads.
                format!(
                    "select {columns} from {parent} where {key} in ({})",
                    live.join(", ")
                )
            }
            false => parts.join(" union all "),
        };
        Ok(TableSnapshot {
            rows: RowsRead::columns(tx, select, def),
            content,
        })
    }
}

/// A partition's registry entry and, in the same snapshot, its rows.
pub struct PartitionSnapshot {
    rows: RowsRead,
    pub info: PartitionInfo,
}

impl PartitionSnapshot {
    /// Streams the partition's user columns (see `RowsRead::stream`).
    pub fn stream(self, format: RowFormat) -> mpsc::Receiver<std::io::Result<Bytes>> {
        self.rows.stream(format)
    }
}

/// A whole table's content and, in the same snapshot, its rows.
pub struct TableSnapshot {
    rows: RowsRead,
    pub content: TableContent,
}

impl TableSnapshot {
    /// Streams the table's user columns (see `RowsRead::stream`).
    pub fn stream(self, format: RowFormat) -> mpsc::Receiver<std::io::Result<Bytes>> {
        self.rows.stream(format)
    }
}
