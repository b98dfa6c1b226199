//! `POST /rows`: rows appended or merged by key into their partitions,
//! inside the caller's transaction (the one that also records the
//! idempotency key), so rows and key commit together or not at all.
//!
//! Rows are COPYed into a temporary table first; duplicates of a key in the
//! body collapse there by the same rule as a PUT's. Then, under each touched
//! partition's advisory lock (taken in date order, the same lock a PUT's swap
//! takes), one statement per kind of change writes them, and the registry's
//! row count and content hash follow the change row by row.

use std::collections::BTreeMap;
use std::io;

use bytes::Bytes;
use chrono::NaiveDate;
use futures::{Stream, TryStreamExt};
use serde::Serialize;
use sqlx::{PgConnection, Row};
use uuid::Uuid;

use super::stage::{copy_binary, drop_losing_versions, number_identical_rows, StageError};
use super::{
    column_list, date_literal, key_index_columns, parent_table, partition_lock_key, partition_table,
};
use crate::ingest::ContentHash;
use crate::names::quote_ident;
use crate::schema::TableDef;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum MergeMode {
    /// Upsert by key; with a cursor, only a larger-or-equal version replaces.
    Merge,
    /// Plain insert (tables without a key).
    Append,
    /// Insert keys that are absent; the stored version stays.
    InsertMissing,
}

impl MergeMode {
    pub fn as_str(self) -> &'static str {
        match self {
            MergeMode::Merge => "merge",
            MergeMode::Append => "append",
            MergeMode::InsertMissing => "insert_missing",
        }
    }
}

/// A partition after the merge.
#[derive(Clone, Debug, Serialize)]
pub struct PartitionAfter {
    pub ds: NaiveDate,
    pub row_count: u64,
    pub content_sha256: String,
}

#[derive(Clone, Debug, Default)]
pub struct Merged {
    pub inserted: u64,
    pub updated: u64,
    pub deleted: u64,
    /// Rows after in-body duplicates collapsed (tombstones included).
    pub rows_after_dedup: u64,
    pub duplicates: u64,
    pub partitions: Vec<PartitionAfter>,
}

struct Delta {
    content: ContentHash,
}

#[tracing::instrument(skip_all, fields(table = %def.name, mode = mode.as_str(), %load_id))]
pub async fn merge_rows(
    conn: &mut PgConnection,
    def: &TableDef,
    mode: MergeMode,
    load_id: Uuid,
    rows: impl Stream<Item = io::Result<Bytes>> + Unpin,
) -> Result<Merged, StageError> {
    let temp = quote_ident(&format!("r_{}", load_id.simple()));
    sqlx::query(&format!(
        "create temp table {temp} ({}, \"_deleted\" boolean not null default false) on commit drop",
        super::column_ddl(def)
    ))
    .execute(&mut *conn)
    .await?;
    // Only a merge reads tombstones; its tuples carry `_deleted`.
    let extra: &[&str] = if mode == MergeMode::Merge {
        &["_deleted"]
    } else {
        &[]
    };
    let copied = copy_binary(conn, &temp, def, extra, rows).await?;
    let duplicates = if def.primary_key.is_empty() {
        number_identical_rows(conn, &temp).await?;
        0
    } else {
        drop_losing_versions(conn, def, &temp).await?.len() as u64
    };

    let partition_col = quote_ident(&def.partition_by);
    let touched: Vec<NaiveDate> = sqlx::query_scalar(&format!(
        "select distinct {partition_col} from {temp} order by 1"
    ))
    .fetch_all(&mut *conn)
    .await?;
    let mut deltas: BTreeMap<NaiveDate, Delta> = BTreeMap::new();
    for &ds in &touched {
        // Date order: two merges touching the same days cannot deadlock.
        sqlx::query("select pg_advisory_xact_lock($1)")
            .bind(partition_lock_key(&def.name, ds))
            .execute(&mut *conn)
            .await?;
        let content = ensure_partition(conn, def, ds, load_id).await?;
        deltas.insert(ds, Delta { content });
    }

    let parent = parent_table(&def.name);
    let columns = column_list(def);
    let all_columns = format!("{columns}, \"_load_id\", \"_row_id\", \"_row_hash\"");
    let conflict = key_index_columns(def);
    let join = std::iter::once(&def.partition_by)
        .chain(&def.primary_key)
        .map(|c| format!("t.{0} = s.{0}", quote_ident(c)))
        .collect::<Vec<_>>()
        .join(" and ");
    // Whether the incoming version (alias `incoming`) may replace the stored
    // one (alias `t`). NULL is the smallest cursor: it never replaces a
    // stored one. A tombstone without a cursor deletes whatever is stored.
    let newer = |incoming: &str| match &def.cursor {
        None => "true".to_string(),
        Some(c) => {
            let c = quote_ident(c);
            format!("(t.{c} is null or ({incoming}.{c} is not null and {incoming}.{c} >= t.{c}))")
        }
    };
    let tomb_newer = match &def.cursor {
        None => "true".to_string(),
        Some(c) => {
            let c = quote_ident(c);
            format!("(s.{c} is null or t.{c} is null or s.{c} >= t.{c})")
        }
    };
    let mut merged = Merged {
        duplicates,
        rows_after_dedup: copied - duplicates,
        ..Default::default()
    };

    let removed = |deltas: &mut BTreeMap<NaiveDate, Delta>,
                   row: sqlx::postgres::PgRow|
     -> Result<(), sqlx::Error> {
        let (ds, hash) = digest_of(&row)?;
        if let Some(d) = deltas.get_mut(&ds) {
            d.content.remove(&hash);
        }
        Ok(())
    };

    if mode == MergeMode::Merge {
        // language=PostgreSQL
        let delete = format!(
            "delete from {parent} t using {temp} s
              where s.\"_deleted\" and {join} and {tomb_newer}
          returning t.{partition_col}, t.\"_row_hash\""
        );
        let mut gone = sqlx::query(&delete).fetch(&mut *conn);
        while let Some(row) = gone.try_next().await? {
            removed(&mut deltas, row)?;
            merged.deleted += 1;
        }
        drop(gone);
        // The versions about to be replaced: their digests leave the content hash.
        // language=PostgreSQL
        let replaced = format!(
            "select t.{partition_col}, t.\"_row_hash\" from {parent} t join {temp} s on {join}
              where not s.\"_deleted\" and {} and t.\"_row_hash\" <> s.\"_row_hash\"",
            newer("s")
        );
        let mut old = sqlx::query(&replaced).fetch(&mut *conn);
        while let Some(row) = old.try_next().await? {
            removed(&mut deltas, row)?;
            merged.updated += 1;
        }
    }

    let on_conflict = match mode {
        MergeMode::Append => String::new(),
        MergeMode::InsertMissing => format!("on conflict ({conflict}) do nothing"),
        MergeMode::Merge => {
            let set = def
                .columns
                .iter()
                .map(|c| c.name.as_str())
                .chain(["_load_id", "_row_id", "_row_hash"])
                .map(|c| format!("{0} = excluded.{0}", quote_ident(c)))
                .collect::<Vec<_>>()
                .join(", ");
            format!(
                "on conflict ({conflict}) do update set {set}
                 where {} and t.\"_row_hash\" <> excluded.\"_row_hash\"",
                newer("excluded")
            )
        }
    };
    // language=PostgreSQL
    let upsert = format!(
        "insert into {parent} as t ({all_columns})
         select {all_columns} from {temp} s where not s.\"_deleted\"
         {on_conflict}
         returning t.{partition_col}, t.\"_row_hash\""
    );
    let mut written = sqlx::query(&upsert).fetch(&mut *conn);
    let mut returned = 0u64;
    while let Some(row) = written.try_next().await? {
        let (ds, hash) = digest_of(&row)?;
        if let Some(d) = deltas.get_mut(&ds) {
            d.content.add(&hash);
        }
        returned += 1;
    }
    drop(written);
    merged.inserted = returned - merged.updated;

    for (ds, delta) in deltas {
        // language=PostgreSQL
        sqlx::query(
            "update idem.partitions
                set row_count = $3, content_sum = $4, content_sha256 = $5,
                    body_sha256 = '', rows_received = 0, load_id = $6, published_at = now()
              where table_name = $1 and ds = $2",
        )
        .bind(&def.name)
        .bind(ds)
        .bind(delta.content.rows() as i64)
        .bind(&delta.content.sum_bytes()[..])
        .bind(delta.content.hex())
        .bind(load_id)
        .execute(&mut *conn)
        .await?;
        merged.partitions.push(PartitionAfter {
            ds,
            row_count: delta.content.rows(),
            content_sha256: delta.content.hex(),
        });
    }
    Ok(merged)
}

fn digest_of(row: &sqlx::postgres::PgRow) -> Result<(NaiveDate, [u8; 32]), sqlx::Error> {
    let ds: NaiveDate = row.try_get(0)?;
    let hash: Vec<u8> = row.try_get(1)?;
    let hash = hash
        .try_into()
        .map_err(|_| sqlx::Error::Protocol("a row hash is not 32 bytes".into()))?;
    Ok((ds, hash))
}

/// The partition's content hash as registered, creating the partition (empty)
/// when it does not exist yet. Called under the partition's advisory lock.
async fn ensure_partition(
    conn: &mut PgConnection,
    def: &TableDef,
    ds: NaiveDate,
    load_id: Uuid,
) -> Result<ContentHash, sqlx::Error> {
    let row = sqlx::query(
        "select content_sum, row_count from idem.partitions where table_name = $1 and ds = $2",
    )
    .bind(&def.name)
    .bind(ds)
    .fetch_optional(&mut *conn)
    .await?;
    if let Some(row) = row {
        let sum: Vec<u8> = row.try_get(0)?;
        let count: i64 = row.try_get(1)?;
        let sum: [u8; 32] = sum
            .try_into()
            .map_err(|_| sqlx::Error::Protocol("a content sum is not 32 bytes".into()))?;
        return Ok(ContentHash::from_parts(&sum, count as u64));
    }
    sqlx::query(&format!(
        "create table {} partition of {} for values in ({})",
        partition_table(&def.name, ds),
        parent_table(&def.name),
        date_literal(ds)
    ))
    .execute(&mut *conn)
    .await?;
    let empty = ContentHash::default();
    // language=PostgreSQL
    sqlx::query(
        "insert into idem.partitions (table_name, ds, row_count, content_sha256, content_sum,
                                      body_sha256, rows_received, load_id)
         values ($1, $2, 0, $3, $4, '', 0, $5)",
    )
    .bind(&def.name)
    .bind(ds)
    .bind(empty.hex())
    .bind(&empty.sum_bytes()[..])
    .bind(load_id)
    .execute(&mut *conn)
    .await?;
    Ok(empty)
}
