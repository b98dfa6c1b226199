//! A partition's live row count and content hash: its registry row
//! (`idem.partitions`) plus the deltas its writers recorded since
//! (`idem.partition_deltas`), folded into the registry row now and then.
//!
//! A writer adds one delta row in its own transaction, beside its rows, and
//! reads nobody's: writers of one partition never wait for each other on the
//! registry. A reader reads the registry row and the deltas in one statement
//! (one snapshot), so it sees each write's rows and delta together or not
//! at all. A swap or a drop happens under the partition's exclusive lock,
//! when no writer is in flight, and replaces the registry row and its
//! deltas at once.

use chrono::{DateTime, Utc};
use sqlx::postgres::{PgArguments, PgRow};
use sqlx::query::Query;
use sqlx::{Connection, PgConnection, Postgres, Row};

use crate::ids::LoadId;
use crate::ingest::{ContentDelta, ContentHash};
use crate::names::TableName;
use crate::period::Period;
use crate::schema::TableDef;
use crate::store::sql::row_hash;
use crate::store::{count, stored_count, Store, StoreError, StoreResult};

/// The registry row of partitions and, aggregated, their deltas. Callers add
/// a `where` on `p` and end with `LIVE_GROUP`.
// language=PostgreSQL
pub const LIVE_SELECT: &str = "
    select p.ds, p.row_count, p.content_sum, p.content_sha256, p.body_sha256, p.rows_received, p.rejected,
           p.load_id, p.published_at,
           coalesce(sum(d.row_delta), 0)::bigint as row_delta,
           coalesce(array_agg(d.sum_delta) filter (where d.load_id is not null), '{}') as sum_deltas,
           max(d.load_id::text)::uuid as delta_load_id, max(d.written_at) as delta_written_at
      from idem.partitions p
      left join idem.partition_deltas d on d.table_name = p.table_name and d.ds = p.ds";
pub const LIVE_GROUP: &str = " group by p.table_name, p.ds";

/// A partition as it stands: the registry row with every delta applied.
#[derive(Clone, Debug)]
pub struct Live {
    pub ds: String,
    pub content: ContentHash,
    /// The last write's load (a merge's, or the swap's).
    pub load_id: LoadId,
    pub published_at: DateTime<Utc>,
    /// What the registry keeps of the body the partition was last swapped
    /// from; merges since then leave them, and `settled` says so.
    pub body_sha256: String,
    pub rows_received: u64,
    /// Of them, kept in the rejects store.
    pub rejected: u64,
    /// No delta since the last swap or fold.
    pub settled: bool,
}

impl Live {
    /// Reads a row of `LIVE_SELECT`.
    pub fn from_row(row: &PgRow) -> StoreResult<Live> {
        let mut content = ContentHash::from_parts(
            &row_hash(row.try_get("content_sum")?)?,
            stored_count(row.try_get("row_count")?)?,
        );
        let sums: Vec<Vec<u8>> = row.try_get("sum_deltas")?;
        let settled = sums.is_empty();
        let mut delta = ContentDelta::from_parts(&[0; 32], row.try_get("row_delta")?);
        for sum in sums {
            delta.add_sum(&row_hash(sum)?);
        }
        content.apply(&delta).ok_or(StoreError::Corrupt(
            "deltas take away more rows than stored",
        ))?;
        let base_load: LoadId = row.try_get("load_id")?;
        let base_at: DateTime<Utc> = row.try_get("published_at")?;
        let delta_at: Option<DateTime<Utc>> = row.try_get("delta_written_at")?;
        Ok(Live {
            ds: row.try_get("ds")?,
            content,
            load_id: row
                .try_get::<Option<LoadId>, _>("delta_load_id")?
                .unwrap_or(base_load),
            published_at: delta_at.map_or(base_at, |at| at.max(base_at)),
            // Merged into since its swap: no longer the body's content.
            body_sha256: if settled {
                row.try_get("body_sha256")?
            } else {
                String::new()
            },
            rows_received: stored_count(row.try_get("rows_received")?)?,
            rejected: stored_count(row.try_get("rejected")?)?,
            settled,
        })
    }
}

/// Partition `ds` of `table` as it stands, on the caller's connection.
pub async fn live(
    conn: &mut PgConnection,
    table: &TableName,
    ds: Period,
) -> StoreResult<Option<Live>> {
    let sql = format!("{LIVE_SELECT} where p.table_name = $1 and p.ds = $2 {LIVE_GROUP}");
    let row = sqlx::query(&sql)
        .bind(table.as_str())
        .bind(ds.label())
        .fetch_optional(conn)
        .await?;
    row.as_ref().map(Live::from_row).transpose()
}

/// The live partitions of `def` among `periods` (every one when `None`),
/// in order, read in one statement.
pub async fn live_set(
    conn: &mut PgConnection,
    def: &TableDef,
    periods: Option<&[Period]>,
) -> StoreResult<Vec<(Period, Live)>> {
    let labels: Option<Vec<String>> = periods.map(|ps| ps.iter().map(Period::label).collect());
    let sql = format!(
        "{LIVE_SELECT} where p.table_name = $1 and ($2::text[] is null or p.ds = any($2)) \
         {LIVE_GROUP} order by p.ds"
    );
    let rows = sqlx::query(&sql)
        .bind(def.name.as_str())
        .bind(labels)
        .fetch_all(conn)
        .await?;
    rows.iter()
        .map(|row| {
            let live = Live::from_row(row)?;
            let period = Period::parse(&live.ds, def.grain)
                .ok_or(StoreError::Corrupt("a partition's label is no period"))?;
            Ok((period, live))
        })
        .collect()
}

/// The INSERT of what writes changed in each partition they touched (in
/// their transaction), its parameters numbered from `first`: arrays of
/// tables, partition labels, load ids, row deltas and sum deltas (see
/// `store::write::closing`).
pub(super) fn deltas_sql(first: usize) -> String {
    let p = |i: usize| format!("${}", first + i);
    // language=PostgreSQL
    format!(
        "insert into idem.partition_deltas (table_name, ds, load_id, row_delta, sum_delta)
         select d.table_name, d.ds, d.load_id, d.row_delta, d.sum_delta
           from unnest({}::text[], {}::text[], {}::uuid[], {}::bigint[], {}::bytea[])
                d(table_name, ds, load_id, row_delta, sum_delta)",
        p(0),
        p(1),
        p(2),
        p(3),
        p(4)
    )
}

/// One load's (or one batch's) change to one partition of a table.
pub struct PartitionDelta<'a> {
    pub table: &'a TableName,
    pub ds: Period,
    pub load_id: LoadId,
    pub delta: ContentDelta,
}

/// Binds the deltas to the parameters of `deltas_sql`; an empty delta (a
/// write that changed nothing in a partition) is left out.
pub(super) fn bind_deltas<'q>(
    query: Query<'q, Postgres, PgArguments>,
    deltas: &[PartitionDelta<'_>],
) -> Query<'q, Postgres, PgArguments> {
    let changed = || deltas.iter().filter(|d| !d.delta.is_empty());
    let tables: Vec<String> = changed().map(|d| d.table.as_str().to_string()).collect();
    let labels: Vec<String> = changed().map(|d| d.ds.label()).collect();
    let loads: Vec<LoadId> = changed().map(|d| d.load_id).collect();
    let rows: Vec<i64> = changed().map(|d| d.delta.rows()).collect();
    let sums: Vec<Vec<u8>> = changed().map(|d| d.delta.sum_bytes().to_vec()).collect();
    query
        .bind(tables)
        .bind(labels)
        .bind(loads)
        .bind(rows)
        .bind(sums)
}

/// Forgets the deltas of partition `ds`: its registry row is being replaced
/// (a swap) or removed (a drop), under the partition's exclusive lock.
pub async fn clear_deltas(
    conn: &mut PgConnection,
    table: &TableName,
    ds: Period,
) -> StoreResult<()> {
    sqlx::query("delete from idem.partition_deltas where table_name = $1 and ds = $2")
        .bind(table.as_str())
        .bind(ds.label())
        .execute(conn)
        .await?;
    Ok(())
}

/// Deltas a partition may gather before a write folds them.
pub const FOLD_AFTER: usize = 64;

impl Store {
    /// Folds the partitions with at least `min_deltas` deltas.
    pub async fn fold_partitions(&self, min_deltas: usize) -> StoreResult<()> {
        let busy: Vec<(String, String)> = sqlx::query_as(
            "select table_name, ds from idem.partition_deltas
              group by table_name, ds having count(*) >= $1",
        )
        .bind(count(u64::try_from(min_deltas).unwrap_or(u64::MAX))?)
        .fetch_all(&mut *self.acquire().await?)
        .await?;
        for (table, ds) in busy {
            // What idem wrote parses; anything else is not idem's to fold.
            let Ok(table) = TableName::parse(&table) else {
                continue;
            };
            let Some(ds) = Period::parse_any(&ds) else {
                continue;
            };
            self.fold_deltas(&table, ds).await?;
        }
        Ok(())
    }

    /// Folds partition `ds`'s deltas into its registry row, so that readers
    /// add few. One folder at a time (the others skip); writers go on
    /// adding deltas meanwhile, and only the deltas folded are removed.
    pub async fn fold_deltas(&self, table: &TableName, ds: Period) -> StoreResult<()> {
        let mut conn = self.acquire().await?;
        let mut tx = conn.begin().await?;
        // Locked: nobody else folds this partition, and a swap waits.
        let base = sqlx::query(
            "select row_count, content_sum, load_id, published_at from idem.partitions
              where table_name = $1 and ds = $2 for update skip locked",
        )
        .bind(table.as_str())
        .bind(ds.label())
        .fetch_optional(&mut *tx)
        .await?;
        let Some(base) = base else {
            return Ok(());
        };
        // language=PostgreSQL
        let folded = sqlx::query(
            "delete from idem.partition_deltas where table_name = $1 and ds = $2
             returning load_id, row_delta, sum_delta, written_at",
        )
        .bind(table.as_str())
        .bind(ds.label())
        .fetch_all(&mut *tx)
        .await?;
        if folded.is_empty() {
            return Ok(());
        }
        let settled = fold(&base, &folded)?;
        settle(&mut tx, table, ds, &settled).await?;
        tx.commit().await?;
        Ok(())
    }
}

/// The registry row `base` with the deleted delta rows `folded` applied.
fn fold(base: &PgRow, folded: &[PgRow]) -> StoreResult<Settled> {
    let mut content = ContentHash::from_parts(
        &row_hash(base.try_get("content_sum")?)?,
        stored_count(base.try_get("row_count")?)?,
    );
    let mut settled = Settled {
        content,
        load_id: base.try_get("load_id")?,
        published_at: base.try_get("published_at")?,
    };
    for row in folded {
        let delta = ContentDelta::from_parts(
            &row_hash(row.try_get("sum_delta")?)?,
            row.try_get("row_delta")?,
        );
        content.apply(&delta).ok_or(StoreError::Corrupt(
            "deltas take away more rows than stored",
        ))?;
        settled.load_id = settled.load_id.max(row.try_get("load_id")?);
        settled.published_at = settled.published_at.max(row.try_get("written_at")?);
    }
    settled.content = content;
    Ok(settled)
}

/// A registry row with its deltas folded in.
struct Settled {
    content: ContentHash,
    load_id: LoadId,
    published_at: DateTime<Utc>,
}

async fn settle(
    tx: &mut PgConnection,
    table: &TableName,
    ds: Period,
    settled: &Settled,
) -> StoreResult<()> {
    // language=PostgreSQL
    sqlx::query(
        "update idem.partitions
            set row_count = $3, content_sum = $4, content_sha256 = $5, load_id = $6,
                published_at = $7, body_sha256 = '', rows_received = 0, rejected = 0
          where table_name = $1 and ds = $2",
    )
    .bind(table.as_str())
    .bind(ds.label())
    .bind(count(settled.content.rows())?)
    .bind(&settled.content.sum_bytes()[..])
    .bind(settled.content.hex())
    .bind(settled.load_id)
    .bind(settled.published_at)
    .execute(tx)
    .await?;
    Ok(())
}
