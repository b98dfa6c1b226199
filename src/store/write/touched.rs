//! The partitions a merge touches: each locked in date order, shared by
//! writers (exclusive for one that must be alone), and a partition that does
//! not exist yet created and registered under its exclusive lock.

use std::collections::BTreeSet;

use sqlx::PgConnection;

use crate::ids::LoadId;
use crate::ingest::ContentHash;
use crate::names::TableName;
use crate::period::Period;
use crate::schema::{Distribution, TableDef};
use crate::store::locks::{lock_partition, partition_lock_key};
use crate::store::sql::{parent_table, partition_table, period_literal};
use crate::store::StoreResult;

/// Locks every partition the rows touch, in date order (two writers
/// touching the same days cannot deadlock on them): shared, so that writers
/// run side by side while a swap (which takes them exclusively) waits; or
/// exclusively for a writer that must be alone. A partition that does not
/// exist yet is created under the exclusive lock.
pub(super) async fn lock_touched_partitions(
    conn: &mut PgConnection,
    def: &TableDef,
    periods: &BTreeSet<Period>,
    load_id: LoadId,
    alone: bool,
) -> StoreResult<()> {
    for &ds in periods {
        // The first writers of a new day go straight for the exclusive
        // lock, instead of two sharers both upgrading (a deadlock).
        if !alone && lock_existing_shared(conn, def, ds).await? {
            continue;
        }
        lock_partition(&mut *conn, &def.name, ds).await?;
        if !partition_exists(conn, def, ds).await? {
            create_partition(conn, def, ds, load_id).await?;
        }
    }
    Ok(())
}

/// A batch's partition locks, taken shared in one statement rather than
/// one a table: `wanted` (in (table, period) order, the order every
/// writer locks in) locked up to the first partition that does not exist.
/// That one is made under its exclusive lock by its table's writer, which
/// then locks the rest one by one (`lock_touched_partitions`), so the
/// order holds. Returns how many of `wanted` were locked: a prefix.
pub async fn lock_existing_partitions(
    conn: &mut PgConnection,
    wanted: &[(&TableName, Period)],
) -> StoreResult<usize> {
    debug_assert!(wanted.windows(2).all(|w| w[0] < w[1]), "in lock order");
    let tables: Vec<&str> = wanted.iter().map(|(t, _)| t.as_str()).collect();
    let periods: Vec<String> = wanted.iter().map(|(_, ds)| ds.label()).collect();
    let locks: Vec<i64> = wanted
        .iter()
        .map(|(t, ds)| partition_lock_key(t, *ds))
        .collect();
    // A volatile function in a sorted query's output runs after the sort,
    // so the locks are taken in `n`'s order.
    // language=PostgreSQL
    let locked: Vec<(i64,)> = sqlx::query_as(
        "with wanted as (
           select w.n, w.lock,
                  -- A scalar subquery: probed by key for each row, never
                  -- hashed over the whole registry as `exists` may be.
                  coalesce((select true from idem.partitions p
                             where p.table_name = w.table_name and p.ds = w.ds),
                           false) as registered
             from unnest($1::text[], $2::text[], $3::bigint[])
                  with ordinality w(table_name, ds, lock, n))
         select w.n, pg_advisory_xact_lock_shared(w.lock) from wanted w
          where w.n < coalesce((select min(m.n) from wanted m where not m.registered),
                               cardinality($3::bigint[]) + 1)
          order by w.n",
    )
    .bind(&tables)
    .bind(&periods)
    .bind(&locks)
    .fetch_all(conn)
    .await?;
    Ok(locked.len())
}

/// Takes partition `ds`'s lock shared if the partition exists; returns
/// whether it did. (Existence is read as the statement began: a drop of the
/// day that commits while this waits for the lock leaves no partition for
/// the rows, and the upsert then fails as `busy`, to be retried.)
async fn lock_existing_shared(
    conn: &mut PgConnection,
    def: &TableDef,
    ds: Period,
) -> StoreResult<bool> {
    // language=PostgreSQL
    let locked = sqlx::query(
        "select pg_advisory_xact_lock_shared($3)
           from idem.partitions where table_name = $1 and ds = $2",
    )
    .bind(def.name.as_str())
    .bind(ds.label())
    .bind(partition_lock_key(&def.name, ds))
    .fetch_optional(conn)
    .await?;
    Ok(locked.is_some())
}

/// Whether partition `ds` is registered (and so exists).
async fn partition_exists(
    conn: &mut PgConnection,
    def: &TableDef,
    ds: Period,
) -> StoreResult<bool> {
    Ok(sqlx::query_scalar(
        "select exists (select from idem.partitions where table_name = $1 and ds = $2)",
    )
    .bind(def.name.as_str())
    .bind(ds.label())
    .fetch_one(conn)
    .await?)
}

/// Creates partition `ds`, empty, and registers it. Under the partition's
/// exclusive lock, after `partition_exists` said it is missing.
async fn create_partition(
    conn: &mut PgConnection,
    def: &TableDef,
    ds: Period,
    load_id: LoadId,
) -> StoreResult<()> {
    // A reference table holds its one partition itself (see
    // `sql::live_partition`); a distributed table's new partition is
    // distributed like it by Citus.
    if def.distribution != Distribution::Reference {
        sqlx::query(&format!(
            "create table {} partition of {} for values in ({})",
            partition_table(&def.name, ds),
            parent_table(&def.name),
            period_literal(def, ds)
        ))
        // Run once per table and day: kept prepared, it would only push a
        // statement used again out of the connection's cache.
        .persistent(false)
        .execute(&mut *conn)
        .await?;
    }
    let empty = ContentHash::default();
    // language=PostgreSQL
    sqlx::query(
        "insert into idem.partitions (table_name, ds, row_count, content_sha256, content_sum,
                                      body_sha256, rows_received, load_id)
         values ($1, $2, 0, $3, $4, '', 0, $5)",
    )
    .bind(def.name.as_str())
    .bind(ds.label())
    .bind(empty.hex())
    .bind(&empty.sum_bytes()[..])
    .bind(load_id)
    .execute(&mut *conn)
    .await?;
    Ok(())
}
