//! Staging: a load's rows COPYed into a table of their own beside the live
//! partition, with duplicates resolved and the unique index built, ready to
//! be swapped in by `publish`. Nothing here touches what readers see: the
//! versions of repeated keys it logs (`duplicates`) are listed only once the
//! load is in the ledger as published or unchanged.
//!
//! A stage is claimed by a session-level advisory lock on its name for as
//! long as its owner lives, so any idem process's janitor can tell a stage
//! in use from one left behind by a crash.

use std::io;

use bytes::Bytes;
use futures::{Stream, StreamExt};
use sqlx::{Connection, PgConnection, Postgres, Transaction};

use super::duplicates::{self, Resolve};
use crate::ids::LoadId;
use crate::period::Period;
use crate::schema::TableDef;
use crate::store::distribute;
use crate::store::locks::stage_lock_key;
use crate::store::sql::{
    self, all_columns, column_ddl, key_index_columns, partition_key, period_literal, staging_table,
    Ident, ROW_ID, STAGING_SCHEMA,
};
use crate::store::{checked_ddl, StoreError, StoreResult, UNIQUE_VIOLATION};

pub fn staging_name(load_id: LoadId) -> String {
    format!("s_{}", load_id.as_uuid().simple())
}

/// What staging left: the rows that stay, and the digests of the versions
/// not written, as the table's `duplicates` policy says (to take out of the
/// hash).
pub struct Staged {
    pub rows: u64,
    pub dropped_row_hashes: Vec<[u8; 32]>,
}

/// What becomes of a stage when its load is done with it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StageFate {
    /// It was swapped in: it is a partition now (or will be, when the
    /// transaction that swapped it commits).
    Published,
    /// It is dropped.
    Discarded,
}

/// Claims `name` for this connection's session.
pub async fn claim(conn: &mut PgConnection, name: &str) -> StoreResult<()> {
    sqlx::query("select pg_advisory_lock($1)")
        .bind(stage_lock_key(name))
        .execute(conn)
        .await?;
    Ok(())
}

/// Gives up the claim, dropping the stage unless it was published. (A
/// published stage may still belong to a transaction that has not committed
/// yet, a keyed PUT's: touching it here would wait for that transaction,
/// which waits for us. Should that transaction roll back, the stage is left
/// unclaimed, and the janitor removes it.)
pub async fn release(conn: &mut PgConnection, name: &str, fate: StageFate) -> StoreResult<()> {
    if fate == StageFate::Discarded {
        sqlx::query(&format!("drop table if exists {}", staging_table(name)))
            .execute(&mut *conn)
            .await?;
    }
    sqlx::query("select pg_advisory_unlock($1)")
        .bind(stage_lock_key(name))
        .execute(conn)
        .await?;
    Ok(())
}

/// When `release` itself failed: let go of every claim this session holds,
/// so that the janitor can take the stage once the connection is back.
pub async fn abandon_claims(conn: &mut PgConnection) {
    if let Err(e) = sqlx::query("select pg_advisory_unlock_all()")
        .execute(conn)
        .await
    {
        tracing::warn!(error = %e, "could not let go of stage claims");
    }
}

/// Creates the stage for partition `ds` of `def` and COPYs `rows` (binary
/// COPY data with `_load_id`, `_row_id` and `_row_hash` after the user columns)
/// into it. If anything fails, the stage is gone, or (on Citus) left empty
/// for the caller's `release` to drop.
#[tracing::instrument(skip_all, fields(table = %def.name, %ds, load_id = %repeats.load_id))]
pub async fn stage_rows(
    conn: &mut PgConnection,
    def: &TableDef,
    ds: Period,
    repeats: Resolve,
    rows: impl Stream<Item = io::Result<Bytes>> + Unpin,
) -> StoreResult<Staged> {
    let name = &staging_name(repeats.load_id);
    let stage = staging_table(name);
    let (mut tx, freeze) = begin_copy(conn, def, name, Some(ds)).await?;
    let copied = copy_binary(&mut tx, &stage, def, &[], freeze, rows).await?;

    let dropped_row_hashes = build_unique_index(&mut tx, def, &stage, repeats).await?;
    tx.commit().await?;
    let dropped = u64::try_from(dropped_row_hashes.len()).expect("a count fits u64");
    Ok(Staged {
        rows: copied - dropped,
        dropped_row_hashes,
    })
}

/// How a COPY writes its rows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Freeze {
    /// Frozen, so vacuum never has to visit them: the table was made in the
    /// COPY's transaction, which no other transaction sees before it commits.
    Yes,
    No,
}

/// Makes the new stage (or part) table `name`, bounded to one partition or
/// not, and opens the transaction its rows are COPYed in. A local stage is
/// made in that transaction, so its rows are written frozen and a failure
/// leaves nothing. A stage distributed by Citus is made, and committed,
/// first: `create_distributed_table` colocated with the table locks the
/// table's parent until its transaction ends, and a declaration of the table
/// would otherwise wait for a whole body to arrive. The caller claims `name`
/// and drops such a stage when the COPY fails (`release`).
pub(super) async fn begin_copy<'c>(
    conn: &'c mut PgConnection,
    def: &TableDef,
    name: &str,
    bound: Option<Period>,
) -> StoreResult<(Transaction<'c, Postgres>, Freeze)> {
    if distribute::stages_distributed(def) {
        let mut tx = conn.begin().await?;
        create_stage(&mut tx, def, name, bound).await?;
        tx.commit().await?;
        return Ok((conn.begin().await?, Freeze::No));
    }
    let mut tx = conn.begin().await?;
    create_stage(&mut tx, def, name, bound).await?;
    Ok((tx, Freeze::Yes))
}

/// Creates stage `name`, empty: bounded to partition `bound` (see
/// `create_bounded`), or for rows of any partition (a part of several).
async fn create_stage(
    tx: &mut PgConnection,
    def: &TableDef,
    name: &str,
    bound: Option<Period>,
) -> StoreResult<()> {
    if let Some(period) = bound {
        return create_bounded(tx, def, name, period).await;
    }
    let table = staging_table(name);
    sqlx::query(&format!("create table {table} ({})", column_ddl(def)))
        .execute(&mut *tx)
        .await?;
    if distribute::stages_distributed(def) {
        distribute::place_beside(tx, def, &table).await?;
    }
    Ok(())
}

/// Creates stage `name` for partition `period` of `def`, empty. Its CHECK
/// matches the partition bound, so ATTACH PARTITION can skip scanning the
/// rows to prove it.
pub(super) async fn create_bounded(
    tx: &mut PgConnection,
    def: &TableDef,
    name: &str,
    period: Period,
) -> StoreResult<()> {
    let partition_col = partition_key(def);
    sqlx::query(&format!(
        "create table {} ({}, \
         constraint idem_partition_bound check ({partition_col} is not null and {partition_col} = {}))",
        staging_table(name),
        column_ddl(def),
        period_literal(def, period),
    ))
    .execute(&mut *tx)
    .await?;
    if distribute::stages_distributed(def) {
        distribute::place_beside(tx, def, &staging_table(name)).await?;
    }
    Ok(())
}

/// Whether stage `name` has its partition bound already (a part adopted as
/// a stage by an earlier attempt to publish its load).
pub(super) async fn has_bound(conn: &mut PgConnection, name: &str) -> StoreResult<bool> {
    // language=PostgreSQL
    Ok(sqlx::query_scalar(
        "select exists (select 1 from pg_constraint c
                          join pg_class t on t.oid = c.conrelid
                          join pg_namespace n on n.oid = t.relnamespace
                         where n.nspname = $1 and t.relname = $2
                           and c.conname = 'idem_partition_bound')",
    )
    .bind(STAGING_SCHEMA)
    .bind(name)
    .fetch_one(conn)
    .await?)
}

/// Whether stage `name` has a unique index (its key's).
pub(super) async fn has_key_index(conn: &mut PgConnection, name: &str) -> StoreResult<bool> {
    // language=PostgreSQL
    Ok(sqlx::query_scalar(
        "select exists (select 1 from pg_index i
                          join pg_class t on t.oid = i.indrelid
                          join pg_namespace n on n.oid = t.relnamespace
                         where n.nspname = $1 and t.relname = $2 and i.indisunique)",
    )
    .bind(STAGING_SCHEMA)
    .bind(name)
    .fetch_one(conn)
    .await?)
}

/// Builds `stage`'s unique index on the key unless two of its rows share a
/// key (then it is left without one, and the caller's transaction goes on).
pub(super) async fn try_key_index(
    tx: &mut PgConnection,
    def: &TableDef,
    stage: &Ident,
) -> StoreResult<()> {
    sqlx::query("set local maintenance_work_mem = '256MB'")
        .execute(&mut *tx)
        .await?;
    let index = format!(
        "create unique index on {stage} ({})",
        key_index_columns(def)
    );
    checked_ddl(&mut *tx, &index, UNIQUE_VIOLATION).await?;
    Ok(())
}

/// Every column a stage holds, user and system, quoted and comma-separated.
pub(super) fn copied_columns(def: &TableDef) -> String {
    sql::join(&all_columns(def))
}

/// Builds the stage's unique index on the key, resolving duplicates first
/// when the build says there are some; returns the digests of the versions
/// not written.
pub(super) async fn build_unique_index(
    tx: &mut PgConnection,
    def: &TableDef,
    stage: &Ident,
    repeats: Resolve,
) -> StoreResult<Vec<[u8; 32]>> {
    let index_sql = format!(
        "create unique index on {stage} ({})",
        key_index_columns(def)
    );
    // Enough to sort a large day's keys in memory rather than on disk.
    sqlx::query("set local maintenance_work_mem = '256MB'")
        .execute(&mut *tx)
        .await?;
    // Most bodies carry no duplicates; they pay nothing for what follows.
    if checked_ddl(&mut *tx, &index_sql, UNIQUE_VIOLATION).await? {
        return Ok(Vec::new());
    }
    let dropped = if distribute::stages_distributed(def) {
        resolve_on_coordinator(&mut *tx, def, stage, repeats).await?
    } else {
        resolve_repeats(&mut *tx, def, stage, repeats).await?
    };
    sqlx::query(&index_sql).execute(&mut *tx).await?;
    Ok(dropped)
}

/// Leaves `table` one row per id: a keyed table's versions of one key
/// resolved by its `duplicates` policy, a keyless table's identical rows
/// numbered apart.
async fn resolve_repeats(
    tx: &mut PgConnection,
    def: &TableDef,
    table: &Ident,
    repeats: Resolve,
) -> StoreResult<Vec<[u8; 32]>> {
    if def.primary_key.is_empty() {
        number_identical_rows(&mut *tx, table).await?;
        Ok(Vec::new())
    } else {
        duplicates::resolve(&mut *tx, def, table, repeats).await
    }
}

/// `resolve_repeats` for a distributed stage, whose rows Citus cannot
/// address by `ctid`, return through functions that are not immutable, or
/// move between shards by an UPDATE of their distribution column: the rows
/// of repeated ids (few, in a body that has any) are moved to a temporary
/// table on the coordinator, resolved there, and what stays is put back.
async fn resolve_on_coordinator(
    tx: &mut PgConnection,
    def: &TableDef,
    stage: &Ident,
    repeats: Resolve,
) -> StoreResult<Vec<[u8; 32]>> {
    let local = Ident::stage("idem_repeats");
    let columns = copied_columns(def);
    let statements = [
        format!("create temp table {local} ({}) on commit drop", column_ddl(def)),
        format!(
            "insert into {local} ({columns}) select {columns} from {stage}
              where {ROW_ID} in (select {ROW_ID} from {stage} group by {ROW_ID} having count(*) > 1)"
        ),
        format!("delete from {stage} where {ROW_ID} in (select {ROW_ID} from {local})"),
    ];
    for sql in statements {
        sqlx::query(&sql).execute(&mut *tx).await?;
    }
    let dropped = resolve_repeats(&mut *tx, def, &local, repeats).await?;
    for sql in [
        format!("insert into {stage} ({columns}) select {columns} from {local}"),
        format!("drop table {local}"),
    ] {
        sqlx::query(&sql).execute(&mut *tx).await?;
    }
    Ok(dropped)
}

/// COPYs binary tuples (see `ingest::encode`) into `table`: the user
/// columns, the system columns (`store::system_columns`), then `extra` columns. A
/// failing source aborts the COPY; the caller's transaction is then void.
pub(super) async fn copy_binary(
    conn: &mut PgConnection,
    table: &Ident,
    def: &TableDef,
    extra: &[Ident],
    freeze: Freeze,
    mut rows: impl Stream<Item = io::Result<Bytes>> + Unpin,
) -> StoreResult<u64> {
    let columns: Vec<Ident> = all_columns(def)
        .into_iter()
        .chain(extra.iter().cloned())
        .collect();
    let freeze = match freeze {
        Freeze::Yes => ", freeze",
        Freeze::No => "",
    };
    let mut copy = conn
        .copy_in_raw(&format!(
            "copy {table} ({}) from stdin with (format binary{freeze})",
            sql::join(&columns)
        ))
        .await?;
    while let Some(chunk) = rows.next().await {
        match chunk {
            Ok(bytes) => {
                copy.send(bytes).await?;
            }
            Err(e) => {
                let _ = copy.abort("the row source failed").await;
                return Err(StoreError::RowSource(e));
            }
        }
    }
    Ok(copy.finish().await?)
}

/// Without a key, identical rows stay distinct rows: the n-th copy (n >= 1)
/// of a row gets `sha256(row id || n)`, so every re-send numbers them alike.
pub(super) async fn number_identical_rows(
    conn: &mut PgConnection,
    stage: &Ident,
) -> StoreResult<()> {
    // language=PostgreSQL
    let sql = format!(
        "update {stage} s
            set {ROW_ID} = sha256(s.{ROW_ID} || int8send(numbered.occurrence))
           from (select ctid, row_number() over (partition by {ROW_ID}) - 1 as occurrence
                   from {stage}) numbered
          where s.ctid = numbered.ctid and numbered.occurrence > 0"
    );
    sqlx::query(&sql).execute(conn).await?;
    Ok(())
}
