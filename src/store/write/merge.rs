//! `POST /rows`: rows appended or merged by key into their partitions,
//! inside the caller's transaction (the one that also records the
//! idempotency key), so rows and key commit together or not at all.
//!
//! A small body's rows come as arrays bound to the statements
//! (`small_body`; several POSTs' at once in a batch, `apply_batch`); a large
//! one's are COPYed into a temporary table first, where versions of one key
//! collapse by the same rule as a PUT's. Then, under each touched
//! partition's advisory lock (shared by writers; a PUT's swap takes it
//! alone), tombstones delete and one upsert writes the rows. What each load
//! changed in each partition's row count and content hash comes back as a
//! delta, which the caller records before it commits (`store::closing`).

use std::collections::{BTreeMap, BTreeSet};
use std::io;

use bytes::Bytes;
use futures::{Stream, TryStreamExt};
use serde::Serialize;
use sha2::{Digest, Sha256};
use sqlx::postgres::{PgArguments, PgRow};
use sqlx::query::Query;
use sqlx::{Connection, PgConnection, Postgres, Row};
use uuid::Uuid;

use super::arrays::{field_of_each, split_tuples, ElementType, TupleArrays};
use super::duplicates::{self, Resolve};
use super::stage::{copy_binary, number_identical_rows};
use crate::ingest::{ContentDelta, ContentHash};
use crate::period::{Grain, Period};
use crate::schema::TableDef;
use crate::store::locks::{lock_partition, partition_lock_key};
use crate::store::sql::{
    self, all_columns, column_ddl, key_index_column_list, key_index_columns, label_of, label_sql,
    parent_table, partition_key, partition_table, period_literal, row_hash, Ident,
    PREV_HASH_COLUMN,
};
use crate::store::{StoreError, StoreResult};

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

    /// The mode `as_str` names.
    pub fn from_name(name: &str) -> Option<Self> {
        [
            MergeMode::Merge,
            MergeMode::Append,
            MergeMode::InsertMissing,
            MergeMode::Patch,
        ]
        .into_iter()
        .find(|m| m.as_str() == name)
    }
}

/// A partition a merge wrote to, and how its row count moved. (Its count
/// and ETag after the write are not in the answer: other writers of the
/// partition commit beside it, so a figure taken then would be a moment
/// that never settled; `GET`/`HEAD` of the partition tell them.)
#[derive(Clone, Debug, Serialize)]
pub struct PartitionAfter {
    pub ds: Period,
    /// Rows inserted minus rows deleted.
    pub row_delta: i64,
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
    /// What the write changed in each partition, not recorded yet: the
    /// caller records them before it commits (`closing::close_rows_write`),
    /// under the partitions' locks, which the transaction holds.
    pub deltas: Vec<(Period, ContentDelta)>,
}

/// The temporary table a POST's rows land in first: one per session and
/// table definition, made on first use and kept (emptied at each commit),
/// so that a write pays no catalog changes for it, and its statements keep
/// one text (and their prepared form) from request to request.
fn incoming_table(def: &TableDef) -> Ident {
    let digest = Sha256::digest(incoming_ddl(def).as_bytes());
    Ident::system(&format!("idem_incoming_{}", hex::encode(&digest[..8])))
}

fn incoming_ddl(def: &TableDef) -> String {
    format!(
        "{}, \"_deleted\" boolean not null default false, \"_present\" bytea",
        column_ddl(def)
    )
}

/// COPYs the body's rows into the session's temporary table.
#[tracing::instrument(level = "debug", skip_all, fields(table = %def.name, mode = mode.as_str()))]
pub async fn copy_incoming(
    conn: &mut PgConnection,
    def: &TableDef,
    mode: MergeMode,
    rows: impl Stream<Item = io::Result<Bytes>> + Unpin,
) -> StoreResult<u64> {
    let incoming = session_incoming(&mut *conn, def).await?;
    // Merges read tombstones: their tuples carry `_deleted`; a patch's
    // also carry `_present`, a bitmap of the columns each row gave.
    let extra: &[&str] = match mode {
        MergeMode::Merge => &["_deleted"],
        MergeMode::Patch => &["_deleted", "_present"],
        MergeMode::Append | MergeMode::InsertMissing => &[],
    };
    copy_binary(conn, &incoming, def, extra, rows).await
}

/// The session's table of incoming rows, made if this session has none yet.
async fn session_incoming(conn: &mut PgConnection, def: &TableDef) -> StoreResult<Ident> {
    let incoming = incoming_table(def);
    sqlx::query(&format!(
        "create temp table if not exists {incoming} ({}) on commit delete rows",
        incoming_ddl(def)
    ))
    .execute(conn)
    .await?;
    Ok(incoming)
}

/// Empties the session's table of incoming rows, for another write in the
/// same transaction (its rows are otherwise emptied only at commit).
pub async fn clear_incoming(conn: &mut PgConnection, def: &TableDef) -> StoreResult<()> {
    let incoming = session_incoming(&mut *conn, def).await?;
    sqlx::query(&format!("delete from {incoming}"))
        .execute(conn)
        .await?;
    Ok(())
}

/// What the decoder learnt of the incoming rows.
#[derive(Clone, Debug)]
pub struct Incoming {
    pub rows: u64,
    /// The content hash of all incoming rows, as the decoder took it.
    pub content: ContentHash,
    pub tombstones: u64,
    /// Two rows may share a row id: duplicates must be resolved.
    pub maybe_repeated: bool,
    /// A repeated key refuses the load (`Resolve::refuse`).
    pub refuse_repeats: bool,
    /// The partitions the rows belong to (the decoder saw each row's).
    pub periods: BTreeSet<Period>,
    /// What the rows other than tombstones add to each partition if every
    /// one of them is written.
    pub additions: BTreeMap<Period, ContentDelta>,
}

/// What this write changes in each partition it touches.
type Deltas = BTreeMap<Period, ContentDelta>;

/// One load's share of the incoming rows: a POST's, or one of a batch of
/// POSTs written together (see `apply_batch`).
#[derive(Clone, Debug)]
pub struct LoadRows {
    pub load_id: Uuid,
    pub rows: u64,
    /// The partitions its rows belong to.
    pub periods: BTreeSet<Period>,
    /// What its rows (tombstones aside) add to each partition if every one
    /// is written, when the decoder's hashes are the written ones (not for
    /// a patch, whose rows are hashed again, nor for rows whose duplicates
    /// collapse). When the upsert wrote as many rows of each partition, the
    /// delta is this minus what they replaced, and the statement needs to
    /// answer no hash of an inserted row.
    pub additions: Option<BTreeMap<Period, ContentDelta>>,
}

/// What the statements did for one load, as they run.
#[derive(Default)]
struct Tally {
    merged: Merged,
    deltas: Deltas,
}

type Tallies = BTreeMap<Uuid, Tally>;

/// Deadlocks a merge retries (from its savepoint) before it gives up.
const DEADLOCK_RETRIES: usize = 3;

/// Writes the incoming rows (see `copy_incoming`) into their partitions:
/// duplicates collapse, the touched partitions are locked, tombstones
/// delete, rows upsert, and each partition records this write's delta.
///
/// Writers of one partition run side by side (its lock shared): rows of one
/// key meet in Postgres's row locks, where the cursor rule is checked against
/// the latest version; each writer's delta is its own row. A patch reads
/// stored rows to fill in fields, so it holds its partitions alone.
#[tracing::instrument(level = "debug", skip_all, fields(table = %def.name, mode = mode.as_str(), %load_id))]
pub async fn apply_incoming(
    conn: &mut PgConnection,
    def: &TableDef,
    mode: MergeMode,
    load_id: Uuid,
    incoming: Incoming,
    rows: IncomingRows,
    rehash: Rehash<'_>,
) -> StoreResult<Merged> {
    if matches!(rows, IncomingRows::Arrays(_)) && !fits_arrays(mode, incoming.maybe_repeated) {
        return Err(StoreError::Corrupt(
            "rows that need the session's table came as arrays",
        ));
    }
    let sql = MergeSql::new(def, rows);
    let duplicates = collapse_duplicates(conn, def, &sql, &incoming, load_id).await?;
    let hashes_kept = mode != MergeMode::Patch && !incoming.maybe_repeated;
    let load = LoadRows {
        load_id,
        rows: incoming.rows - duplicates,
        periods: incoming.periods.clone(),
        additions: hashes_kept.then(|| incoming.additions.clone()),
    };
    let write = MergeWrite {
        def,
        sql: &sql,
        mode,
        loads: std::slice::from_ref(&load),
        incoming: &incoming,
    };
    let mut merged = write
        .run(conn, rehash)
        .await?
        .remove(&load_id)
        .unwrap_or_default();
    merged.duplicates = duplicates;
    Ok(merged)
}

/// Writes several POSTs' rows (`arrays`, each row carrying its load's id)
/// by the same statements as one POST's, and tells each load what it did.
/// The rows must not repeat a row id, within a load or across them (see
/// `fits_arrays`; `RowIds` finds repeats across loads).
#[tracing::instrument(level = "debug", skip_all, fields(table = %def.name, mode = mode.as_str(), loads = loads.len()))]
pub async fn apply_batch(
    conn: &mut PgConnection,
    def: &TableDef,
    mode: MergeMode,
    loads: &[LoadRows],
    arrays: TupleArrays,
    tombstones: u64,
) -> StoreResult<BTreeMap<Uuid, Merged>> {
    if mode == MergeMode::Patch {
        return Err(StoreError::Corrupt("a patch came in a batch"));
    }
    let incoming = Incoming {
        rows: loads.iter().map(|l| l.rows).sum(),
        content: ContentHash::default(),
        tombstones,
        // A batch's rows repeat no row id.
        maybe_repeated: false,
        refuse_repeats: false,
        periods: loads
            .iter()
            .flat_map(|l| l.periods.iter().copied())
            .collect(),
        additions: BTreeMap::new(),
    };
    let sql = MergeSql::new(def, IncomingRows::Arrays(arrays));
    let write = MergeWrite {
        def,
        sql: &sql,
        mode,
        loads,
        incoming: &incoming,
    };
    let no_patch = |_: &[Option<String>]| None;
    write.run(conn, &no_patch).await
}

/// One merge's statements, run (again, after a deadlock) from a savepoint.
struct MergeWrite<'a> {
    def: &'a TableDef,
    sql: &'a MergeSql,
    mode: MergeMode,
    loads: &'a [LoadRows],
    incoming: &'a Incoming,
}

impl MergeWrite<'_> {
    /// Rows upserted in key order lock keys in one order in every writer,
    /// and cannot deadlock; a tombstone's DELETE locks in its own order.
    fn may_deadlock(&self) -> bool {
        self.incoming.tombstones > 0 && self.mode.replaces()
    }

    async fn run(
        &self,
        conn: &mut PgConnection,
        rehash: Rehash<'_>,
    ) -> StoreResult<BTreeMap<Uuid, Merged>> {
        if self.may_deadlock() {
            self.apply_retrying(conn, rehash).await
        } else {
            self.apply(conn, rehash).await
        }
    }

    /// `apply` from a savepoint, again when Postgres broke a deadlock by
    /// failing it.
    async fn apply_retrying(
        &self,
        conn: &mut PgConnection,
        rehash: Rehash<'_>,
    ) -> StoreResult<BTreeMap<Uuid, Merged>> {
        let mut attempt = 0;
        loop {
            let mut savepoint = conn.begin().await?;
            match self.apply(&mut savepoint, rehash).await {
                Ok(merged) => {
                    savepoint.commit().await?;
                    return Ok(merged);
                }
                Err(e) if e.is_deadlock() && attempt < DEADLOCK_RETRIES => {
                    attempt += 1;
                    tracing::info!(
                        attempt,
                        "a merge met a deadlock; retrying from its savepoint"
                    );
                    savepoint.rollback().await?;
                }
                Err(e) => return Err(e),
            }
        }
    }

    async fn apply(
        &self,
        conn: &mut PgConnection,
        rehash: Rehash<'_>,
    ) -> StoreResult<BTreeMap<Uuid, Merged>> {
        let (def, sql, mode) = (self.def, self.sql, self.mode);
        let alone = mode == MergeMode::Patch;
        let creator = self.loads.first().map_or(Uuid::nil(), |l| l.load_id);
        lock_touched_partitions(conn, def, &self.incoming.periods, creator, alone).await?;
        let mut tallies: Tallies = self.loads.iter().map(Tally::of).collect();
        if mode == MergeMode::Patch {
            fill_in_patches(conn, def, sql, rehash).await?;
        }
        if mode.replaces() && self.incoming.tombstones > 0 {
            delete_tombstoned(conn, sql, &mut tallies).await?;
        }
        upsert_rows(conn, sql, mode, self.loads, &mut tallies).await?;
        Ok(tallies
            .into_iter()
            .map(|(load_id, tally)| (load_id, tally.into_merged()))
            .collect())
    }
}

impl Tally {
    /// A load's tally before any statement: each of its partitions changed
    /// by nothing yet.
    fn of(load: &LoadRows) -> (Uuid, Tally) {
        let tally = Tally {
            merged: Merged {
                rows_after_dedup: load.rows,
                ..Merged::default()
            },
            deltas: load
                .periods
                .iter()
                .map(|&ds| (ds, ContentDelta::default()))
                .collect(),
        };
        (load.load_id, tally)
    }

    fn into_merged(self) -> Merged {
        let mut merged = self.merged;
        merged.partitions = self
            .deltas
            .iter()
            .map(|(&ds, delta)| PartitionAfter {
                ds,
                row_delta: delta.rows(),
            })
            .collect();
        merged.deltas = self.deltas.into_iter().collect();
        merged
    }
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
            let c = Ident::column(&c.name);
            format!("{c} = case when get_bit(s.\"_present\", {i}) = 1 then s.{c} else t.{c} end")
        })
        .collect::<Vec<_>>()
        .join(", ");
    let as_text = def
        .columns
        .iter()
        .map(|c| format!("s.{}::text", Ident::column(&c.name)))
        .collect::<Vec<_>>()
        .join(", ");
    let MergeSql {
        parent,
        join,
        incoming,
        ..
    } = sql;
    // language=PostgreSQL
    let filled = format!(
        "update {incoming} s set {fill}
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
        "update {incoming} s set \"_row_hash\" = v.hash
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
    sql: &MergeSql,
    incoming: &Incoming,
    load_id: Uuid,
) -> StoreResult<u64> {
    if !incoming.maybe_repeated {
        return Ok(0);
    }
    if def.primary_key.is_empty() {
        number_identical_rows(conn, &sql.incoming).await?;
        return Ok(0);
    }
    let how = Resolve {
        policy: def.duplicates,
        load_id,
        log: def.duplicate_log,
        refuse: incoming.refuse_repeats,
    };
    let dropped = duplicates::resolve(conn, def, &sql.incoming, how).await?;
    Ok(count_of(&dropped))
}

/// The pieces of SQL a merge is made of, written once per request from the
/// table's (validated) definition.
struct MergeSql {
    parent: Ident,
    /// The label of stored row `t`'s partition, as SQL (see `label_sql`).
    label: String,
    /// The partition key column.
    part_key: Ident,
    /// The label of the partition `w.part` (an upsert's written rows).
    written_label: String,
    grain: Grain,
    all_columns: String,
    conflict: String,
    /// Incoming `s` and stored `t` rows of one key.
    join: String,
    /// The session's table of incoming rows (see `incoming_table`).
    incoming: Ident,
    /// Where statements read the incoming rows `s` from: that table, or
    /// the arrays of a small body.
    from_incoming: String,
    /// The arrays `from_incoming` reads, bound to every statement.
    arrays: Option<TupleArrays>,
    /// `col = excluded.col` for every column (an upsert's update).
    excluded: String,
    /// Whether the incoming version (`excluded`, in an upsert) may replace
    /// the stored one `t`. NULL is the smallest cursor: it never replaces a
    /// stored one.
    newer: String,
    /// Whether a tombstone `s` may delete the stored `t`; without a cursor it
    /// deletes whatever is stored.
    tombstone_newer: String,
}

impl MergeSql {
    fn new(def: &TableDef, rows: IncomingRows) -> Self {
        let join = key_index_column_list(def)
            .into_iter()
            .map(|c| format!("t.{c} = s.{c}"))
            .collect::<Vec<_>>()
            .join(" and ");
        let columns = all_columns(def);
        let excluded = columns
            .iter()
            .map(|c| format!("{c} = excluded.{c}"))
            .collect::<Vec<_>>()
            .join(", ");
        let cursor = def.cursor.as_ref().map(Ident::column);
        let incoming = incoming_table(def);
        let (from_incoming, arrays) = match rows {
            IncomingRows::Session => (format!("{incoming} s"), None),
            IncomingRows::Arrays(arrays) => (unnest_arrays(def, &arrays), Some(arrays)),
        };
        MergeSql {
            parent: parent_table(&def.name),
            label: label_sql(def, "t"),
            part_key: partition_key(def),
            written_label: label_of(def, "w.part"),
            grain: def.grain,
            all_columns: sql::join(&columns),
            conflict: key_index_columns(def),
            join,
            incoming,
            from_incoming,
            arrays,
            excluded,
            newer: cursor.as_ref().map_or("true".into(), |c| {
                format!("(t.{c} is null or (excluded.{c} is not null and excluded.{c} >= t.{c}))")
            }),
            tombstone_newer: cursor.as_ref().map_or("true".into(), |c| {
                format!("(s.{c} is null or t.{c} is null or s.{c} >= t.{c})")
            }),
        }
    }

    /// A statement that reads `from_incoming`, with its arrays bound.
    fn query<'q>(&'q self, sql: &'q str) -> Query<'q, Postgres, PgArguments> {
        let mut query = sqlx::query(sql);
        for column in self.arrays.iter().flat_map(|a| &a.columns) {
            query = query.bind(column);
        }
        query
    }
}

/// `unnest($1, $2, …) s(…)`: the arrays as rows `s`, with the columns a COPY
/// into the session's table would fill (see `small_body`).
fn unnest_arrays(def: &TableDef, arrays: &TupleArrays) -> String {
    let params = arrays
        .columns
        .iter()
        .enumerate()
        .map(|(i, column)| column.cast_param(i + 1))
        .collect::<Vec<_>>()
        .join(", ");
    let names: Vec<Ident> = all_columns(def)
        .into_iter()
        .chain([Ident::system("_deleted")])
        .collect();
    format!("unnest({params}) s({})", sql::join(&names))
}

/// Where a merge reads the incoming rows from.
pub enum IncomingRows {
    /// The session's table, filled by `copy_incoming`.
    Session,
    /// A small body's arrays (see `small_body`).
    Arrays(TupleArrays),
}

impl IncomingRows {
    /// How many rows the arrays hold (0 for the session's table, whose
    /// COPY counts them).
    pub fn rows(&self) -> u64 {
        match self {
            IncomingRows::Session => 0,
            IncomingRows::Arrays(arrays) => u64::try_from(arrays.rows).unwrap_or(0),
        }
    }
}

/// The first 16 bytes of each row's `_row_id` in a body's COPY data (see
/// `small_body` for its tuples' fields).
pub fn row_id_prefixes(def: &TableDef, mode: MergeMode, copy: &[u8]) -> StoreResult<Vec<u128>> {
    // `_row_id` follows the user columns, `_part` if any, and `_load_id`.
    let index = def.columns.len() + usize::from(def.keyed_by_part()) + 1;
    let ids = field_of_each(copy, tuple_types(def, mode).len(), index)?;
    Ok(ids
        .into_iter()
        .map(|id| {
            id.and_then(|id| id.first_chunk::<16>())
                .map_or(0, |id| u128::from_be_bytes(*id))
        })
        .collect())
}

/// Whether a body may go as arrays: a merge, append or insert_missing of
/// rows without repeated ids (a patch, and collapsing duplicates, work on
/// the session's table).
pub fn fits_arrays(mode: MergeMode, maybe_repeated: bool) -> bool {
    mode != MergeMode::Patch && !maybe_repeated
}

/// A small body's binary COPY data as arrays, one per column of the
/// session's table that its COPY would fill, plus `_deleted` (all false
/// when the mode reads no tombstones). See `fits_arrays`.
pub fn small_body(def: &TableDef, mode: MergeMode, copy: &[u8]) -> StoreResult<IncomingRows> {
    Ok(IncomingRows::Arrays(small_bodies(def, mode, &[copy])?))
}

/// Several small bodies' COPY data as one set of arrays (see `small_body`).
pub fn small_bodies(def: &TableDef, mode: MergeMode, copies: &[&[u8]]) -> StoreResult<TupleArrays> {
    let mut arrays = split_tuples(copies, &tuple_types(def, mode))?;
    if !mode.replaces() {
        arrays.push_repeated(ElementType::BOOLEAN, &[0])?;
    }
    Ok(arrays)
}

/// The types of the fields of the encoder's COPY tuples for `mode`: the
/// user columns, `_part` if any, `_load_id`, `_row_id`, `_row_hash`, and
/// `_deleted` when the mode reads tombstones.
fn tuple_types(def: &TableDef, mode: MergeMode) -> Vec<ElementType> {
    let mut types: Vec<ElementType> = def.columns.iter().map(|c| ElementType::of(c.ty)).collect();
    if def.keyed_by_part() {
        types.push(ElementType::of(def.partition_type()));
    }
    types.extend([ElementType::UUID, ElementType::BYTEA, ElementType::BYTEA]);
    if mode.replaces() {
        types.push(ElementType::BOOLEAN);
    }
    types
}

/// Locks every partition the rows touch, in date order (two writers
/// touching the same days cannot deadlock on them): shared, so that writers
/// run side by side while a swap (which takes them exclusively) waits; or
/// exclusively for a writer that must be alone. A partition that does not
/// exist yet is created under the exclusive lock.
async fn lock_touched_partitions(
    conn: &mut PgConnection,
    def: &TableDef,
    periods: &BTreeSet<Period>,
    load_id: Uuid,
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

async fn delete_tombstoned(
    conn: &mut PgConnection,
    sql: &MergeSql,
    tallies: &mut Tallies,
) -> StoreResult<()> {
    let MergeSql {
        parent,
        label,
        join,
        tombstone_newer,
        from_incoming,
        ..
    } = sql;
    // DELETE answers the version it removed (the latest, locked one) and
    // the load whose tombstone removed it.
    // language=PostgreSQL
    let delete = format!(
        "delete from {parent} t using {from_incoming}
          where s.\"_deleted\" and {join} and {tombstone_newer}
      returning {label}, t.\"_row_hash\", s.\"_load_id\""
    );
    let mut gone = sql.query(&delete).fetch(&mut *conn);
    while let Some(row) = gone.try_next().await? {
        let (ds, hash) = digest_of(&row, sql.grain)?;
        let Some(tally) = tallies.get_mut(&row.try_get::<Uuid, _>(2)?) else {
            continue;
        };
        if let Some(delta) = tally.deltas.get_mut(&ds) {
            delta.remove(&hash);
        }
        tally.merged.deleted += 1;
    }
    Ok(())
}

/// Every row in one statement, in key order (so that two writers lock
/// shared keys in the same order): a new key inserts; an existing one is
/// replaced when the mode replaces, the incoming version is newer than the
/// stored one and differs from it. The check runs on the latest committed
/// version, under its row lock, so the cursor rule holds whoever commits
/// first. An update keeps the hash it replaced in `_prev_hash`.
///
/// The statement answers, per partition and load, how many rows it wrote
/// and the hashes they replaced. A load that wrote all its rows adds what
/// the decoder summed (see `LoadRows::additions`); the hashes of the others'
/// written rows are read back (`add_written_hashes`). Answering every written
/// row's hash instead costs Postgres a third more per row.
async fn upsert_rows(
    conn: &mut PgConnection,
    sql: &MergeSql,
    mode: MergeMode,
    loads: &[LoadRows],
    tallies: &mut Tallies,
) -> StoreResult<()> {
    let shares = upsert(conn, sql, mode).await?;
    let mut written: BTreeMap<(Uuid, Period), u64> = BTreeMap::new();
    for share in shares {
        let Some(tally) = tallies.get_mut(&share.load_id) else {
            continue;
        };
        let Some(delta) = tally.deltas.get_mut(&share.ds) else {
            continue;
        };
        let updated = count_of(&share.replaced);
        for hash in &share.replaced {
            delta.remove(hash);
        }
        let inserted = share.rows.checked_sub(updated);
        tally.merged.inserted +=
            inserted.ok_or(StoreError::Corrupt("more rows replaced than written"))?;
        tally.merged.updated += updated;
        written.insert((share.load_id, share.ds), share.rows);
    }
    let mut unsummed = Vec::new();
    for load in loads {
        let Some(tally) = tallies.get_mut(&load.load_id) else {
            continue;
        };
        match &load.additions {
            Some(additions) if wrote_all(load.load_id, additions, &written) => {
                for (ds, added) in additions {
                    let delta = tally.deltas.entry(*ds).or_default();
                    delta
                        .merge(added)
                        .ok_or(StoreError::Corrupt("a row count overflows"))?;
                }
            }
            _ => unsummed.push(load.load_id),
        }
    }
    if !unsummed.is_empty() {
        add_written_hashes(conn, sql, &unsummed, tallies).await?;
    }
    Ok(())
}

/// What an upsert wrote of one load into one partition.
struct WrittenShare {
    ds: Period,
    load_id: Uuid,
    rows: u64,
    /// The hashes of the stored versions its rows replaced.
    replaced: Vec<[u8; 32]>,
}

/// The upsert itself (see `upsert_rows`).
async fn upsert(
    conn: &mut PgConnection,
    sql: &MergeSql,
    mode: MergeMode,
) -> StoreResult<Vec<WrittenShare>> {
    let MergeSql {
        parent,
        all_columns,
        conflict,
        excluded,
        newer,
        from_incoming,
        part_key,
        written_label,
        ..
    } = sql;
    let on_conflict = match mode {
        MergeMode::Append => String::new(),
        MergeMode::InsertMissing => format!("on conflict ({conflict}) do nothing"),
        MergeMode::Merge | MergeMode::Patch => format!(
            "on conflict ({conflict}) do update set {excluded}, {PREV_HASH_COLUMN} = t.\"_row_hash\"
              where {newer} and t.\"_row_hash\" <> excluded.\"_row_hash\""
        ),
    };
    // One row per partition and load, not a row each: a batch of 10,000
    // costs one message.
    // language=PostgreSQL
    let upsert = format!(
        "with written as (
           insert into {parent} as t ({all_columns})
           select {all_columns} from {from_incoming} where not s.\"_deleted\" order by {conflict}
           {on_conflict}
           returning t.{part_key} as part, t.\"_load_id\" as load_id, t.{PREV_HASH_COLUMN} as replaced)
         select {written_label}, w.load_id, count(*),
                coalesce(array_agg(w.replaced) filter (where w.replaced is not null), '{{}}')
           from written w group by w.part, w.load_id"
    );
    let rows = sql
        .query(&upsert)
        .fetch_all(&mut *conn)
        .await
        .map_err(partition_gone_is_busy)?;
    rows.iter()
        .map(|row| {
            let replaced: Vec<Vec<u8>> = row.try_get(3)?;
            Ok(WrittenShare {
                ds: period_of(&row.try_get::<String, _>(0)?, sql.grain)?,
                load_id: row.try_get(1)?,
                rows: u64::try_from(row.try_get::<i64, _>(2)?)
                    .map_err(|_| StoreError::Corrupt("a negative count"))?,
                replaced: replaced
                    .into_iter()
                    .map(row_hash)
                    .collect::<Result<_, _>>()?,
            })
        })
        .collect()
}

/// Whether the upsert wrote, into each partition, as many of the load's
/// rows as it sent there (and none elsewhere).
fn wrote_all(
    load_id: Uuid,
    additions: &BTreeMap<Period, ContentDelta>,
    written: &BTreeMap<(Uuid, Period), u64>,
) -> bool {
    let mut shares = written.iter().filter(|((load, _), _)| *load == load_id);
    let same_partitions = shares.clone().count() == additions.len();
    same_partitions
        && shares.all(|((_, ds), &rows)| {
            additions.get(ds).map(ContentDelta::rows) == i64::try_from(rows).ok()
        })
}

/// Adds the hashes of the rows the upsert wrote for `loads` to their
/// tallies. Read back from the table: a written row carries its load's id
/// and stays locked by this transaction until it commits; a row the upsert
/// left alone carries another load's (each load writes a key once).
async fn add_written_hashes(
    conn: &mut PgConnection,
    sql: &MergeSql,
    loads: &[Uuid],
    tallies: &mut Tallies,
) -> StoreResult<()> {
    let MergeSql {
        parent,
        label,
        join,
        from_incoming,
        ..
    } = sql;
    let loads_param = sql.arrays.as_ref().map_or(0, |a| a.columns.len()) + 1;
    // language=PostgreSQL
    let read = format!(
        "select {label}, t.\"_load_id\", array_agg(t.\"_row_hash\")
           from {from_incoming} join {parent} t on {join} and t.\"_load_id\" = s.\"_load_id\"
          where not s.\"_deleted\" and s.\"_load_id\" = any(${loads_param}::uuid[])
          group by 1, 2"
    );
    let rows = sql.query(&read).bind(loads).fetch_all(&mut *conn).await?;
    for row in rows {
        let ds = period_of(&row.try_get::<String, _>(0)?, sql.grain)?;
        let Some(tally) = tallies.get_mut(&row.try_get::<Uuid, _>(1)?) else {
            continue;
        };
        let delta = tally.deltas.entry(ds).or_default();
        for hash in row.try_get::<Vec<Vec<u8>>, _>(2)? {
            delta.add(&row_hash(hash)?);
        }
    }
    Ok(())
}

/// "No partition of the table for a row": its day was dropped while this
/// write waited for its lock (see `lock_existing_shared`); a retry makes it.
fn partition_gone_is_busy(err: sqlx::Error) -> StoreError {
    match &err {
        sqlx::Error::Database(db) if db.code().as_deref() == Some("23514") => StoreError::Busy(err),
        _ => err.into(),
    }
}

fn count_of<T>(items: &[T]) -> u64 {
    u64::try_from(items.len()).expect("a count fits u64")
}

fn digest_of(row: &PgRow, grain: Grain) -> StoreResult<(Period, [u8; 32])> {
    let label: String = row.try_get(0)?;
    Ok((period_of(&label, grain)?, row_hash(row.try_get(1)?)?))
}

fn period_of(label: &str, grain: Grain) -> StoreResult<Period> {
    Period::parse(label, grain).ok_or(StoreError::Corrupt("a partition key out of its grain"))
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
    load_id: Uuid,
) -> StoreResult<()> {
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
    Ok(())
}
