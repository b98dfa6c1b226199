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
use futures::{Stream, TryStreamExt};
use serde::Serialize;
use sqlx::postgres::PgRow;
use sqlx::{PgConnection, Row};
use uuid::Uuid;

use super::stage::{copy_binary, drop_losing_versions, number_identical_rows, row_hash};
use super::{
    all_columns, count, key_index_columns, lock_partition, parent_table, partition_key,
    partition_table, period_literal, stored_count, StoreError, StoreResult,
};
use crate::ingest::ContentHash;
use crate::period::{Grain, Period};
use crate::schema::ColumnType;
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
    /// Like merge, but an existing key's absent fields keep their stored
    /// values: only the fields a row gives change.
    Patch,
}

impl MergeMode {
    /// Whether an existing key's stored version may be replaced (and a
    /// tombstone may delete it).
    pub fn replaces(self) -> bool {
        matches!(self, MergeMode::Merge | MergeMode::Patch)
    }

    pub fn as_str(self) -> &'static str {
        match self {
            MergeMode::Merge => "merge",
            MergeMode::Append => "append",
            MergeMode::InsertMissing => "insert_missing",
            MergeMode::Patch => "patch",
        }
    }
}

/// A partition after the merge.
#[derive(Clone, Debug, Serialize)]
pub struct PartitionAfter {
    pub ds: Period,
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
) -> StoreResult<u64> {
    sqlx::query(&format!(
        "create temp table {INCOMING} ({}, \"_deleted\" boolean not null default false,
                                        \"_present\" bytea) on commit drop",
        super::column_ddl(def)
    ))
    .execute(&mut *conn)
    .await?;
    // Merges read tombstones: their tuples carry `_deleted`; a patch's
    // also carry `_present`, a bitmap of the columns each row gave.
    let extra: &[&str] = match mode {
        MergeMode::Merge => &["_deleted"],
        MergeMode::Patch => &["_deleted", "_present"],
        MergeMode::Append | MergeMode::InsertMissing => &[],
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

/// The content hash of each partition touched, as it moves with each change.
type Contents = BTreeMap<Period, ContentHash>;

/// Writes the incoming rows (see `copy_incoming`) into their partitions:
/// duplicates collapse, the touched partitions are locked, tombstones
/// delete, new keys insert, existing keys update, and the registry takes
/// each partition's new count and hash.
#[tracing::instrument(skip_all, fields(table = %def.name, mode = mode.as_str(), %load_id))]
pub async fn apply_incoming(
    conn: &mut PgConnection,
    def: &TableDef,
    mode: MergeMode,
    load_id: Uuid,
    incoming: Incoming,
    rehash: Rehash<'_>,
) -> StoreResult<Merged> {
    let sql = MergeSql::new(def);
    let duplicates = collapse_duplicates(conn, def, incoming).await?;
    let mut merged = Merged {
        duplicates,
        rows_after_dedup: incoming.rows - duplicates,
        ..Default::default()
    };
    let (mut contents, was_empty) = lock_touched_partitions(conn, def, &sql, load_id).await?;
    if mode == MergeMode::Patch && !was_empty {
        fill_in_patches(conn, def, &sql, rehash).await?;
    }
    if mode.replaces() && incoming.tombstones > 0 && !was_empty {
        delete_tombstoned(conn, &sql, &mut contents, &mut merged).await?;
    }
    insert_new_keys(
        conn,
        &sql,
        mode,
        load_id,
        incoming,
        &mut contents,
        &mut merged,
    )
    .await?;
    // (With tombstones, the count of upserts is not known exactly here.)
    let upserts = merged.rows_after_dedup.saturating_sub(incoming.tombstones);
    if mode.replaces() && (merged.inserted < upserts || incoming.tombstones > 0) {
        update_existing_keys(conn, &sql, load_id, &mut contents, &mut merged).await?;
    }
    merged.partitions = register_contents(conn, def, load_id, contents).await?;
    Ok(merged)
}

/// The row hash of a row given as its columns' text (NULL as `None`), in
/// the table's column order; `None` when a value does not read back.
pub type Rehash<'a> = &'a (dyn Fn(&[Option<String>]) -> Option<[u8; 32]> + Sync);

/// A patch's rows whose key is stored take the stored value of every column
/// they did not give, and then the row hash of the whole row (which only the
/// caller's canonical encoding can tell, through `rehash`). Under the
/// partitions' locks, so the stored rows cannot change meanwhile.
async fn fill_in_patches(
    conn: &mut PgConnection,
    def: &TableDef,
    sql: &MergeSql,
    rehash: Rehash<'_>,
) -> StoreResult<()> {
    let fill = def
        .columns
        .iter()
        .enumerate()
        .map(|(i, c)| {
            let c = c.name.quoted();
            format!("{c} = case when get_bit(s.\"_present\", {i}) = 1 then s.{c} else t.{c} end")
        })
        .collect::<Vec<_>>()
        .join(", ");
    let as_text = def
        .columns
        .iter()
        .map(|c| format!("s.{}::text", c.name.quoted()))
        .collect::<Vec<_>>()
        .join(", ");
    let MergeSql { parent, join, .. } = sql;
    // language=PostgreSQL
    let filled = format!(
        "update {INCOMING} s set {fill}
           from {parent} t where {join} and not s.\"_deleted\"
      returning s.\"_row_id\", {as_text}"
    );
    let rows = sqlx::query(&filled).fetch_all(&mut *conn).await?;
    let mut row_ids = Vec::with_capacity(rows.len());
    let mut hashes = Vec::with_capacity(rows.len());
    for row in rows {
        let values = (1..=def.columns.len())
            .map(|i| row.try_get::<Option<String>, _>(i))
            .collect::<Result<Vec<_>, _>>()?;
        let hash =
            rehash(&values).ok_or(StoreError::Corrupt("a stored value does not read back"))?;
        row_ids.push(row.try_get::<Vec<u8>, _>(0)?);
        hashes.push(hash.to_vec());
    }
    // language=PostgreSQL
    sqlx::query(&format!(
        "update {INCOMING} s set \"_row_hash\" = v.hash
           from unnest($1::bytea[], $2::bytea[]) v(row_id, hash)
          where s.\"_row_id\" = v.row_id"
    ))
    .bind(&row_ids)
    .bind(&hashes)
    .execute(&mut *conn)
    .await?;
    Ok(())
}

/// Versions of one key in the body collapse to one (by the rule a PUT's
/// stage uses); identical rows of a keyless table are numbered apart.
/// Returns how many versions were dropped.
async fn collapse_duplicates(
    conn: &mut PgConnection,
    def: &TableDef,
    incoming: Incoming,
) -> StoreResult<u64> {
    if !incoming.maybe_repeated {
        return Ok(0);
    }
    if def.primary_key.is_empty() {
        number_identical_rows(conn, INCOMING).await?;
        return Ok(0);
    }
    let dropped = drop_losing_versions(conn, def, INCOMING).await?;
    Ok(u64::try_from(dropped.len()).expect("a count fits u64"))
}

/// The pieces of SQL a merge is made of, written once per request from the
/// table's (validated) definition.
struct MergeSql {
    parent: String,
    /// The label of stored row `t`'s partition, as SQL (see `label_sql`).
    label: String,
    grain: Grain,
    all_columns: String,
    conflict: String,
    /// Incoming `s` and stored `t` rows of one key.
    join: String,
    /// `col = s.col` for every column.
    set: String,
    /// Whether the incoming version `s` may replace the stored one `t`. NULL
    /// is the smallest cursor: it never replaces a stored one.
    newer: String,
    /// Whether a tombstone `s` may delete the stored `t`; without a cursor it
    /// deletes whatever is stored.
    tombstone_newer: String,
}

impl MergeSql {
    fn new(def: &TableDef) -> Self {
        let join = std::iter::once(partition_key(def))
            .chain(def.primary_key.iter().map(|c| c.quoted()))
            .map(|c| format!("t.{c} = s.{c}"))
            .collect::<Vec<_>>()
            .join(" and ");
        let columns = all_columns(def);
        let set = columns
            .iter()
            .map(|c| format!("{c} = s.{c}"))
            .collect::<Vec<_>>()
            .join(", ");
        let cursor = def.cursor.as_ref().map(|c| c.quoted());
        MergeSql {
            parent: parent_table(&def.name),
            label: label_sql(def, "t"),
            grain: def.grain,
            all_columns: columns.join(", "),
            conflict: key_index_columns(def),
            join,
            set,
            newer: cursor.as_ref().map_or("true".into(), |c| {
                format!("(t.{c} is null or (s.{c} is not null and s.{c} >= t.{c}))")
            }),
            tombstone_newer: cursor.as_ref().map_or("true".into(), |c| {
                format!("(s.{c} is null or t.{c} is null or s.{c} >= t.{c})")
            }),
        }
    }
}

/// Locks every partition the rows touch, in date order (two merges touching
/// the same days cannot deadlock; a PUT's swap takes the same locks), and
/// reads their content hashes; says whether they were all empty.
async fn lock_touched_partitions(
    conn: &mut PgConnection,
    def: &TableDef,
    sql: &MergeSql,
    load_id: Uuid,
) -> StoreResult<(Contents, bool)> {
    let touched: Vec<String> = sqlx::query_scalar(&format!(
        "select distinct {} from {INCOMING} t order by 1",
        sql.label
    ))
    .fetch_all(&mut *conn)
    .await?;
    let mut contents = Contents::new();
    let mut was_empty = true;
    for label in touched {
        let ds = period_of(&label, sql.grain)?;
        lock_partition(&mut *conn, &def.name, ds).await?;
        let content = ensure_partition(conn, def, ds, load_id).await?;
        was_empty &= content.rows() == 0;
        contents.insert(ds, content);
    }
    Ok((contents, was_empty))
}

async fn delete_tombstoned(
    conn: &mut PgConnection,
    sql: &MergeSql,
    contents: &mut Contents,
    merged: &mut Merged,
) -> StoreResult<()> {
    let MergeSql {
        parent,
        label,
        join,
        tombstone_newer,
        ..
    } = sql;
    // language=PostgreSQL
    let delete = format!(
        "delete from {parent} t using {INCOMING} s
          where s.\"_deleted\" and {join} and {tombstone_newer}
      returning {label}, t.\"_row_hash\""
    );
    let mut gone = sqlx::query(&delete).fetch(&mut *conn);
    while let Some(row) = gone.try_next().await? {
        let (ds, hash) = digest_of(&row, sql.grain)?;
        if let Some(content) = contents.get_mut(&ds) {
            content.remove(&hash);
        }
        merged.deleted += 1;
    }
    Ok(())
}

/// New keys first: a plain insert that leaves existing keys alone. When
/// every row was new (the common case of a feed), that is all.
async fn insert_new_keys(
    conn: &mut PgConnection,
    sql: &MergeSql,
    mode: MergeMode,
    load_id: Uuid,
    incoming: Incoming,
    contents: &mut Contents,
    merged: &mut Merged,
) -> StoreResult<()> {
    let MergeSql {
        parent,
        label,
        all_columns,
        conflict,
        join,
        ..
    } = sql;
    let on_conflict = match mode {
        MergeMode::Append => String::new(),
        MergeMode::InsertMissing | MergeMode::Merge | MergeMode::Patch => {
            format!("on conflict ({conflict}) do nothing")
        }
    };
    // language=PostgreSQL
    let insert = format!(
        "insert into {parent} as t ({all_columns})
         select {all_columns} from {INCOMING} s where not s.\"_deleted\"
         {on_conflict}"
    );
    let one_day = contents.len() == 1;
    if !(one_day && !incoming.maybe_repeated && incoming.tombstones == 0) {
        let returning = format!("{insert} returning {label}, t.\"_row_hash\", null::bytea");
        return fold_written(conn, &returning, None, sql.grain, contents, merged).await;
    }
    // Distinct rows into one day: when all of them are new, the decoder's
    // hash of the rows is exactly what the day gains, and no row needs to
    // come back.
    let written = sqlx::query(&insert)
        .execute(&mut *conn)
        .await?
        .rows_affected();
    if written == incoming.rows {
        if let Some(content) = contents.values_mut().next() {
            content.add_all(&incoming.content);
        }
        merged.inserted = written;
        return Ok(());
    }
    // Some keys existed: the rows this load inserted carry its id.
    // language=PostgreSQL
    let ours = format!(
        "select {label}, t.\"_row_hash\", null::bytea
           from {INCOMING} s join {parent} t on {join} where t.\"_load_id\" = $1"
    );
    fold_written(conn, &ours, Some(load_id), sql.grain, contents, merged).await
}

/// Then the keys that exist: replaced when newer and different. The old
/// version's digest comes along (read on the statement's snapshot, under the
/// partition lock), to leave the content hash. Rows this load just inserted
/// carry its id and are skipped.
async fn update_existing_keys(
    conn: &mut PgConnection,
    sql: &MergeSql,
    load_id: Uuid,
    contents: &mut Contents,
    merged: &mut Merged,
) -> StoreResult<()> {
    let MergeSql {
        parent,
        label,
        join,
        set,
        newer,
        ..
    } = sql;
    // language=PostgreSQL
    let update = format!(
        "update {parent} t set {set}
           from (select s.*, t.\"_row_hash\" as idem_replaced
                   from {INCOMING} s join {parent} t on {join}
                  where not s.\"_deleted\" and {newer} and t.\"_row_hash\" <> s.\"_row_hash\"
                    and t.\"_load_id\" <> $1) s
          where {join}
      returning {label}, t.\"_row_hash\", s.idem_replaced"
    );
    fold_written(conn, &update, Some(load_id), sql.grain, contents, merged).await
}

/// The registry follows: each touched partition's row count and content hash.
async fn register_contents(
    conn: &mut PgConnection,
    def: &TableDef,
    load_id: Uuid,
    contents: Contents,
) -> StoreResult<Vec<PartitionAfter>> {
    let mut after = Vec::with_capacity(contents.len());
    for (ds, content) in contents {
        // language=PostgreSQL
        sqlx::query(
            "update idem.partitions
                set row_count = $3, content_sum = $4, content_sha256 = $5,
                    body_sha256 = '', rows_received = 0, load_id = $6, published_at = now()
              where table_name = $1 and ds = $2",
        )
        .bind(def.name.as_str())
        .bind(ds.label())
        .bind(count(content.rows())?)
        .bind(&content.sum_bytes()[..])
        .bind(content.hex())
        .bind(load_id)
        .execute(&mut *conn)
        .await?;
        after.push(PartitionAfter {
            ds,
            row_count: content.rows(),
            content_sha256: content.hex(),
        });
    }
    Ok(after)
}

/// Runs a statement that answers the rows it wrote (see `fold`), with the
/// load's id as `$1` when given, and folds them in.
async fn fold_written(
    conn: &mut PgConnection,
    statement: &str,
    load_id: Option<Uuid>,
    grain: Grain,
    contents: &mut Contents,
    merged: &mut Merged,
) -> StoreResult<()> {
    let mut query = sqlx::query(statement);
    if let Some(load_id) = load_id {
        query = query.bind(load_id);
    }
    let written = query.fetch_all(&mut *conn).await?;
    fold(contents, written, grain, merged)
}

/// Folds written rows (partition, new digest, replaced digest or NULL) into
/// the partitions' content hashes and the counts.
fn fold(
    contents: &mut Contents,
    rows: Vec<PgRow>,
    grain: Grain,
    merged: &mut Merged,
) -> StoreResult<()> {
    for row in rows {
        let (ds, hash) = digest_of(&row, grain)?;
        let Some(content) = contents.get_mut(&ds) else {
            continue;
        };
        content.add(&hash);
        // An update also returns the version it replaced.
        let replaced: Option<Vec<u8>> = row.try_get(2)?;
        match replaced {
            None => merged.inserted += 1,
            Some(old) => {
                content.remove(&row_hash(old)?);
                merged.updated += 1;
            }
        }
    }
    Ok(())
}

fn digest_of(row: &PgRow, grain: Grain) -> StoreResult<(Period, [u8; 32])> {
    let label: String = row.try_get(0)?;
    Ok((period_of(&label, grain)?, row_hash(row.try_get(1)?)?))
}

fn period_of(label: &str, grain: Grain) -> StoreResult<Period> {
    Period::parse(label, grain).ok_or(StoreError::Corrupt("a partition key out of its grain"))
}

/// The label of row `alias`'s partition, as SQL: its partition key printed
/// in the grain's form (a `_part` of timestamptz is read in UTC).
pub fn label_sql(def: &TableDef, alias: &str) -> String {
    let key = format!("{alias}.{}", partition_key(def));
    let form = match def.grain {
        Grain::Hour => "YYYY-MM-DD\"T\"HH24",
        Grain::Day => "YYYY-MM-DD",
        Grain::Month => "YYYY-MM",
    };
    match def.partition_type() {
        ColumnType::Date => format!("to_char({key}, '{form}')"),
        _ => format!("to_char({key} at time zone 'UTC', '{form}')"),
    }
}

/// The partition's content hash as registered, creating the partition (empty)
/// when it does not exist yet. Called under the partition's advisory lock.
async fn ensure_partition(
    conn: &mut PgConnection,
    def: &TableDef,
    ds: Period,
    load_id: Uuid,
) -> StoreResult<ContentHash> {
    let row = sqlx::query(
        "select content_sum, row_count from idem.partitions where table_name = $1 and ds = $2",
    )
    .bind(def.name.as_str())
    .bind(ds.label())
    .fetch_optional(&mut *conn)
    .await?;
    if let Some(row) = row {
        let sum = row_hash(row.try_get(0)?)?;
        return Ok(ContentHash::from_parts(
            &sum,
            stored_count(row.try_get(1)?)?,
        ));
    }
    sqlx::query(&format!(
        "create table {} partition of {} for values in ({})",
        partition_table(&def.name, ds),
        parent_table(&def.name),
        period_literal(def, ds)
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
    .bind(def.name.as_str())
    .bind(ds.label())
    .bind(empty.hex())
    .bind(&empty.sum_bytes()[..])
    .bind(load_id)
    .execute(&mut *conn)
    .await?;
    Ok(empty)
}
