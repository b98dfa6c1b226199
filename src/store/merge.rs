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

/// The temporary table a POST's rows land in first; one per session,
/// dropped at commit, so statements over it keep one text (and their
/// prepared form) from request to request.
const INCOMING: &str = "idem_incoming";

/// COPYs the body's rows into the session's temporary table.
#[tracing::instrument(skip_all, fields(table = %def.name, mode = mode.as_str()))]
pub async fn copy_incoming(
    conn: &mut PgConnection,
    def: &TableDef,
    mode: MergeMode,
    rows: impl Stream<Item = io::Result<Bytes>> + Unpin,
) -> Result<u64, StageError> {
    sqlx::query(&format!(
        "create temp table {INCOMING} ({}, \"_deleted\" boolean not null default false) on commit drop",
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
    copy_binary(conn, INCOMING, def, extra, rows).await
}

/// What the decoder learnt of the incoming rows.
#[derive(Clone, Copy, Debug)]
pub struct Incoming {
    pub rows: u64,
    /// The content hash of all incoming rows, as the decoder took it.
    pub content: ContentHash,
    pub tombstones: u64,
    /// Two rows may share a row id: duplicates must be resolved.
    pub maybe_repeated: bool,
}

/// Writes the incoming rows (see `copy_incoming`) into their partitions.
#[tracing::instrument(skip_all, fields(table = %def.name, mode = mode.as_str(), %load_id))]
pub async fn apply_incoming(
    conn: &mut PgConnection,
    def: &TableDef,
    mode: MergeMode,
    load_id: Uuid,
    incoming: Incoming,
) -> Result<Merged, sqlx::Error> {
    let duplicates = match (incoming.maybe_repeated, def.primary_key.is_empty()) {
        (false, _) => 0,
        (true, true) => {
            number_identical_rows(conn, INCOMING).await?;
            0
        }
        (true, false) => drop_losing_versions(conn, def, INCOMING).await?.len() as u64,
    };

    let partition_col = quote_ident(&def.partition_by);
    let touched: Vec<NaiveDate> = sqlx::query_scalar(&format!(
        "select distinct {partition_col} from {INCOMING} order by 1"
    ))
    .fetch_all(&mut *conn)
    .await?;
    let mut contents: BTreeMap<NaiveDate, ContentHash> = BTreeMap::new();
    let mut was_empty = true;
    for &ds in &touched {
        // Date order: two merges touching the same days cannot deadlock.
        sqlx::query("select pg_advisory_xact_lock($1)")
            .bind(partition_lock_key(&def.name, ds))
            .execute(&mut *conn)
            .await?;
        let content = ensure_partition(conn, def, ds, load_id).await?;
        was_empty &= content.rows() == 0;
        contents.insert(ds, content);
    }

    let parent = parent_table(&def.name);
    let all_columns = format!(
        "{}, \"_load_id\", \"_row_id\", \"_row_hash\"",
        column_list(def)
    );
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
        rows_after_dedup: incoming.rows - duplicates,
        ..Default::default()
    };

    if mode == MergeMode::Merge && incoming.tombstones > 0 && !was_empty {
        // language=PostgreSQL
        let delete = format!(
            "delete from {parent} t using {INCOMING} s
              where s.\"_deleted\" and {join} and {tomb_newer}
          returning t.{partition_col}, t.\"_row_hash\""
        );
        let mut gone = sqlx::query(&delete).fetch(&mut *conn);
        while let Some(row) = gone.try_next().await? {
            let (ds, hash) = digest_of(&row)?;
            if let Some(content) = contents.get_mut(&ds) {
                content.remove(&hash);
            }
            merged.deleted += 1;
        }
    }

    // New keys first: a plain insert that leaves existing keys alone. When
    // every row was new (the common case of a feed), that is all.
    let on_conflict = match mode {
        MergeMode::Append => String::new(),
        MergeMode::InsertMissing | MergeMode::Merge => {
            format!("on conflict ({conflict}) do nothing")
        }
    };
    // language=PostgreSQL
    let insert = format!(
        "insert into {parent} as t ({all_columns})
         select {all_columns} from {INCOMING} s where not s.\"_deleted\"
         {on_conflict}"
    );
    match (
        touched.as_slice(),
        incoming.maybe_repeated,
        incoming.tombstones,
    ) {
        // Distinct rows into one day, all of them new: the decoder's hash of
        // the rows is exactly what the day gains, and no row needs to come back.
        ([ds], false, 0) => {
            let written = sqlx::query(&insert)
                .execute(&mut *conn)
                .await?
                .rows_affected();
            if written == incoming.rows {
                if let Some(content) = contents.get_mut(ds) {
                    content.add_all(&incoming.content);
                }
                merged.inserted = written;
            } else {
                // Some keys existed: the rows this load inserted carry its id.
                // language=PostgreSQL
                let ours = format!(
                    "select t.{partition_col}, t.\"_row_hash\", null::bytea
                       from {INCOMING} s join {parent} t on {join} where t.\"_load_id\" = $1"
                );
                let inserted = sqlx::query(&ours)
                    .bind(load_id)
                    .fetch_all(&mut *conn)
                    .await?;
                fold(&mut contents, inserted, &mut merged)?;
            }
        }
        _ => {
            let returning =
                format!("{insert} returning t.{partition_col}, t.\"_row_hash\", null::bytea");
            let inserted = sqlx::query(&returning).fetch_all(&mut *conn).await?;
            fold(&mut contents, inserted, &mut merged)?;
        }
    }

    // (With tombstones, the count of upserts is not known exactly here.)
    let upserts = merged.rows_after_dedup.saturating_sub(incoming.tombstones);
    if mode == MergeMode::Merge && (merged.inserted < upserts || incoming.tombstones > 0) {
        // Then the keys that exist: replaced when newer and different. The
        // old version's digest comes along (read on the statement's snapshot,
        // under the partition lock), to leave the content hash. Rows this
        // load just inserted carry its id and are skipped.
        let set = def
            .columns
            .iter()
            .map(|c| c.name.as_str())
            .chain(["_load_id", "_row_id", "_row_hash"])
            .map(|c| format!("{0} = s.{0}", quote_ident(c)))
            .collect::<Vec<_>>()
            .join(", ");
        let key_match = std::iter::once(&def.partition_by)
            .chain(&def.primary_key)
            .map(|c| format!("t.{0} = s.{0}", quote_ident(c)))
            .collect::<Vec<_>>()
            .join(" and ");
        // language=PostgreSQL
        let update = format!(
            "update {parent} t set {set}
               from (select s.*, t.\"_row_hash\" as idem_replaced
                       from {INCOMING} s join {parent} t on {join}
                      where not s.\"_deleted\" and {} and t.\"_row_hash\" <> s.\"_row_hash\"
                        and t.\"_load_id\" <> $1) s
              where {key_match}
          returning t.{partition_col}, t.\"_row_hash\", s.idem_replaced",
            newer("s")
        );
        let updated = sqlx::query(&update)
            .bind(load_id)
            .fetch_all(&mut *conn)
            .await?;
        fold(&mut contents, updated, &mut merged)?;
    }

    for (ds, content) in contents {
        // language=PostgreSQL
        sqlx::query(
            "update idem.partitions
                set row_count = $3, content_sum = $4, content_sha256 = $5,
                    body_sha256 = '', rows_received = 0, load_id = $6, published_at = now()
              where table_name = $1 and ds = $2",
        )
        .bind(&def.name)
        .bind(ds)
        .bind(content.rows() as i64)
        .bind(&content.sum_bytes()[..])
        .bind(content.hex())
        .bind(load_id)
        .execute(&mut *conn)
        .await?;
        merged.partitions.push(PartitionAfter {
            ds,
            row_count: content.rows(),
            content_sha256: content.hex(),
        });
    }
    Ok(merged)
}

/// Folds written rows (partition, new digest, replaced digest or NULL) into
/// the partitions' content hashes and the counts.
fn fold(
    contents: &mut BTreeMap<NaiveDate, ContentHash>,
    rows: Vec<sqlx::postgres::PgRow>,
    merged: &mut Merged,
) -> Result<(), sqlx::Error> {
    for row in rows {
        let (ds, hash) = digest_of(&row)?;
        let Some(content) = contents.get_mut(&ds) else {
            continue;
        };
        content.add(&hash);
        // An update also returns the version it replaced.
        let replaced: Option<Vec<u8>> = row.try_get(2)?;
        match replaced {
            None => merged.inserted += 1,
            Some(old) => {
                let old: [u8; 32] = old
                    .try_into()
                    .map_err(|_| sqlx::Error::Protocol("a row hash is not 32 bytes".into()))?;
                content.remove(&old);
                merged.updated += 1;
            }
        }
    }
    Ok(())
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
