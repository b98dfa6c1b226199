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

use chrono::NaiveDate;
use sqlx::{Connection, PgConnection, Row};

use super::ledger::{record_load, LoadEntry};
use super::stage::staging_table;
use super::{
    catalog, date_literal, parent_table, partition_lock_key, partition_name, partition_table,
    table_lock_key, PARTS_SCHEMA,
};
use crate::error::{ApiError, ApiResult};
use crate::names::quote_ident;
use crate::schema::TableDef;

/// `If-Match` / `If-None-Match: *` of a PUT.
#[derive(Clone, Debug, Default)]
pub struct Conditions {
    /// `If-Match`: `None` when absent, `Some(vec![])` for `*`.
    pub if_match: Option<Vec<String>>,
    /// `If-None-Match: *`: the partition must not exist yet.
    pub if_none_match_any: bool,
}

impl Conditions {
    /// Checks the conditions against the live partition's content hash.
    pub fn check(&self, current: Option<&str>) -> ApiResult<()> {
        if self.if_none_match_any && current.is_some() {
            return Err(ApiError::PreconditionFailed(
                "If-None-Match: * but the partition exists".into(),
            ));
        }
        if let Some(tags) = &self.if_match {
            match current {
                None => {
                    return Err(ApiError::PreconditionFailed(
                        "If-Match but the partition does not exist".into(),
                    ))
                }
                Some(etag) if !tags.is_empty() && !tags.iter().any(|t| t == etag) => {
                    return Err(ApiError::PreconditionFailed(format!(
                        "If-Match does not match the partition's ETag \"{etag}\""
                    )))
                }
                Some(_) => {}
            }
        }
        Ok(())
    }
}

/// The live partition's registry entry.
#[derive(Clone, Debug)]
pub struct Current {
    pub content_sha256: String,
    pub content_sum: Vec<u8>,
    pub body_sha256: String,
    pub row_count: i64,
    pub rows_received: i64,
}

/// What the registry keeps of the body a partition was built from, so that
/// the same body sent again is known before anything is decoded.
#[derive(Clone, Copy, Debug)]
pub struct BodyFacts<'a> {
    pub sha256: &'a str,
    pub rows_received: u64,
    /// The content hash of the rows staged (what the partition will hold).
    pub content: &'a crate::ingest::ContentHash,
}

pub async fn current(
    conn: &mut PgConnection,
    table: &str,
    ds: NaiveDate,
) -> Result<Option<Current>, sqlx::Error> {
    let row = sqlx::query(
        "select content_sha256, body_sha256, row_count, rows_received, content_sum
           from idem.partitions where table_name = $1 and ds = $2",
    )
    .bind(table)
    .bind(ds)
    .fetch_optional(conn)
    .await?;
    row.map(|r| {
        Ok(Current {
            content_sha256: r.try_get(0)?,
            body_sha256: r.try_get(1)?,
            row_count: r.try_get(2)?,
            rows_received: r.try_get(3)?,
            content_sum: r.try_get(4)?,
        })
    })
    .transpose()
}

pub enum Published {
    /// The stage is now the partition.
    Swapped,
    /// The live partition already holds this content; the stage is left for
    /// the caller to drop.
    Unchanged,
}

/// Swaps stage `stage_name` in as partition `ds` of `def`, or finds the
/// partition already equal to it. The ledger entry is written in the same
/// transaction, so a load is recorded as published exactly when it is.
#[tracing::instrument(skip_all, fields(table = %def.name, %ds, load_id = %entry.load_id))]
pub async fn publish(
    conn: &mut PgConnection,
    def: &TableDef,
    ds: NaiveDate,
    stage_name: &str,
    body: BodyFacts<'_>,
    conditions: &Conditions,
    entry: &mut LoadEntry<'_>,
) -> ApiResult<Published> {
    let content_sha256 = entry
        .content_sha256
        .expect("a staged load has its content hash");
    let mut tx = conn.begin().await?;
    // The stage was built for `def`; if the table changed since, it no
    // longer fits. Schema changes hold the table's lock exclusively; like
    // every writer, take the table's lock before the partition's.
    sqlx::query("select pg_advisory_xact_lock_shared($1)")
        .bind(table_lock_key(&def.name))
        .execute(&mut *tx)
        .await?;
    sqlx::query("select pg_advisory_xact_lock($1)")
        .bind(partition_lock_key(&def.name, ds))
        .execute(&mut *tx)
        .await?;
    if catalog::table_def(&mut tx, &def.name).await?.as_ref() != Some(def) {
        return Err(ApiError::SchemaConflict(format!(
            "table {:?} changed while this load was staged; send it again",
            def.name
        )));
    }
    let live = current(&mut tx, &def.name, ds).await?;
    conditions.check(live.as_ref().map(|c| c.content_sha256.as_str()))?;

    if live
        .as_ref()
        .is_some_and(|c| c.content_sha256 == content_sha256)
    {
        entry.status = super::ledger::LoadStatus::Unchanged;
        entry.changed = false;
        entry.rows_written = 0;
        record_load(&mut tx, entry).await?;
        tx.commit().await?;
        return Ok(Published::Unchanged);
    }

    let parent = parent_table(&def.name);
    let partition = partition_table(&def.name, ds);
    if live.is_some() {
        sqlx::query(&format!(
            "alter table {parent} detach partition {partition}"
        ))
        .execute(&mut *tx)
        .await?;
        sqlx::query(&format!("drop table {partition}"))
            .execute(&mut *tx)
            .await?;
    }
    let stage = staging_table(stage_name);
    sqlx::query(&format!("alter table {stage} set schema {PARTS_SCHEMA}"))
        .execute(&mut *tx)
        .await?;
    sqlx::query(&format!(
        "alter table {PARTS_SCHEMA}.{} rename to {}",
        quote_ident(stage_name),
        quote_ident(&partition_name(&def.name, ds))
    ))
    .execute(&mut *tx)
    .await?;
    sqlx::query(&format!(
        "alter table {parent} attach partition {partition} for values in ({})",
        date_literal(ds)
    ))
    .execute(&mut *tx)
    .await?;
    // language=PostgreSQL
    sqlx::query(
        "insert into idem.partitions (table_name, ds, row_count, content_sha256, body_sha256, rows_received,
                                      load_id, content_sum, published_at)
         values ($1, $2, $3, $4, $5, $6, $7, $8, now())
         on conflict (table_name, ds) do update
            set row_count = excluded.row_count, content_sha256 = excluded.content_sha256,
                content_sum = excluded.content_sum,
                body_sha256 = excluded.body_sha256, rows_received = excluded.rows_received,
                load_id = excluded.load_id, published_at = excluded.published_at",
    )
    .bind(&def.name)
    .bind(ds)
    .bind(entry.rows_written as i64)
    .bind(content_sha256)
    .bind(body.sha256)
    .bind(body.rows_received as i64)
    .bind(entry.load_id)
    .bind(&body.content.sum_bytes()[..])
    .execute(&mut *tx)
    .await?;
    entry.status = super::ledger::LoadStatus::Published;
    entry.changed = true;
    record_load(&mut tx, entry).await?;
    tx.commit().await?;
    Ok(Published::Swapped)
}
