//! The ids a key gives a table's stored rows (`row_id_of_key_text`), worked
//! out in Rust, a chunk of rows at a time, and kept in a session table: the
//! map from each row's old id to its new one. It is filled before the
//! table's lock is taken (`map_before_lock`), so that under the lock only
//! the rows written meanwhile are read (`rekey_partition`); dropped when
//! the declaration is over (`forget`).

use sqlx::{Connection, PgConnection, Row};

use crate::ingest::encode::row_id_of_key_text;
use crate::period::Period;
use crate::schema::TableDef;
use crate::store::sql::{live_partition, Ident, ROW_ID};
use crate::store::{StoreError, StoreResult};

/// Rows read at a time: what bounds idem's memory, however large the
/// partition.
const CHUNK: i64 = 10_000;

/// The session table of old and new ids (by partition label), and the
/// cursor rows are read through.
const MAP: &str = "idem_rekey_ids";
const CURSOR: &str = "idem_rekey_rows";

/// Maps the rows of `periods` (the table's partitions, read without its
/// lock) into a fresh session table, indexed for the lookups made under
/// the lock.
pub(super) async fn map_before_lock(
    conn: &mut PgConnection,
    keyed: &TableDef,
    periods: &[Period],
) -> StoreResult<()> {
    forget(&mut *conn).await?;
    // A cursor lives in a transaction; the session table outlives it.
    let mut tx = conn.begin().await?;
    make_map(&mut tx).await?;
    for &period in periods {
        map_rows(&mut tx, keyed, period).await?;
    }
    for sql in [
        format!("create index on {MAP} (ds, old)"),
        format!("analyze {MAP}"),
    ] {
        sqlx::query(&sql).execute(&mut *tx).await?;
    }
    tx.commit().await?;
    Ok(())
}

/// Gives each row of partition `period` the id its key gives it: the rows
/// the map lacks (written since it was made, or all of them when there is
/// no map) are mapped first, then the partition is updated from the map.
/// Runs under the table's lock, its key's columns NOT NULL already.
pub(super) async fn rekey_partition(
    conn: &mut PgConnection,
    keyed: &TableDef,
    period: Period,
) -> StoreResult<()> {
    make_map(&mut *conn).await?;
    map_rows(conn, keyed, period).await?;
    sqlx::query(&format!(
        "update {} t set {ROW_ID} = m.new from {MAP} m where m.ds = $1 and t.{ROW_ID} = m.old",
        live_partition(keyed, period)
    ))
    .bind(period.label())
    .execute(&mut *conn)
    .await?;
    Ok(())
}

/// Makes the map, unless the session has it (made before the lock).
async fn make_map(conn: &mut PgConnection) -> StoreResult<()> {
    sqlx::query(&format!(
        "create temp table if not exists {MAP} (ds text, old bytea, new bytea)"
    ))
    .execute(conn)
    .await?;
    Ok(())
}

/// Drops the map (a declaration's end, whatever its outcome).
pub(in crate::store) async fn forget(conn: &mut PgConnection) -> StoreResult<()> {
    sqlx::query(&format!("drop table if exists {MAP}"))
        .execute(conn)
        .await?;
    Ok(())
}

/// Maps the rows of partition `period` the map does not hold yet and
/// whose key has a value in each column, `CHUNK` at a time.
async fn map_rows(conn: &mut PgConnection, keyed: &TableDef, period: Period) -> StoreResult<()> {
    let key = keyed.identity();
    let key_text = key
        .iter()
        .map(|c| format!("p.{}::text", Ident::column(c)))
        .collect::<Vec<_>>()
        .join(", ");
    let key_present = key
        .iter()
        .map(|c| format!("p.{} is not null", Ident::column(c)))
        .collect::<Vec<_>>()
        .join(" and ");
    // Every row is read: planned as for a first few, the lookups in the
    // map would be one index probe a row, not one hash join.
    sqlx::query("set local cursor_tuple_fraction = 1")
        .execute(&mut *conn)
        .await?;
    sqlx::query(&format!(
        "declare {CURSOR} no scroll cursor for
           select p.{ROW_ID}, {key_text} from {} p
            where {key_present}
              and not exists (select from {MAP} m where m.ds = $1 and m.old = p.{ROW_ID})",
        live_partition(keyed, period)
    ))
    .bind(period.label())
    .execute(&mut *conn)
    .await?;
    while map_chunk(conn, keyed, period).await? {}
    sqlx::query(&format!("close {CURSOR}"))
        .execute(&mut *conn)
        .await?;
    Ok(())
}

/// Maps the cursor's next rows; false once the cursor is spent.
async fn map_chunk(conn: &mut PgConnection, keyed: &TableDef, period: Period) -> StoreResult<bool> {
    let rows = sqlx::query(&format!("fetch {CHUNK} from {CURSOR}"))
        .fetch_all(&mut *conn)
        .await?;
    if rows.is_empty() {
        return Ok(false);
    }
    let (mut old_ids, mut new_ids) = (
        Vec::with_capacity(rows.len()),
        Vec::with_capacity(rows.len()),
    );
    for row in &rows {
        let key: Vec<Option<String>> = (1..row.len())
            .map(|i| row.try_get(i))
            .collect::<Result<_, _>>()?;
        let id = row_id_of_key_text(keyed, period, &key).ok_or(StoreError::Corrupt(
            "a stored key does not read back as its type",
        ))?;
        old_ids.push(row.try_get::<Vec<u8>, _>(0)?);
        new_ids.push(id.to_vec());
    }
    sqlx::query(&format!(
        "insert into {MAP} (ds, old, new)
         select $1, o, n from unnest($2::bytea[], $3::bytea[]) m(o, n)"
    ))
    .bind(period.label())
    .bind(&old_ids)
    .bind(&new_ids)
    .execute(&mut *conn)
    .await?;
    Ok(true)
}
