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
//! delta, which the caller records before it commits (`store::write::closing`).
//!
//! This file runs the statements and tallies what each load did; the
//! statements' SQL is built in `merge_sql`, the incoming rows are COPYed or
//! turned into arrays in `incoming`, and the touched partitions are locked
//! (and made) by `touched`.

use std::collections::{BTreeMap, BTreeSet};

use futures::TryStreamExt;
use serde::Serialize;
use sqlx::postgres::PgRow;
use sqlx::{Connection, PgConnection, Row};

use super::arrays::TupleArrays;
use super::duplicates::{self, Resolve};
use super::history;
use super::incoming::{fits_arrays, Incoming, IncomingRows};
pub use super::merge_sql::Rehash;
use super::merge_sql::{fill_in_patches, partition_gone_is_busy, period_of, MergeSql, UpsertShape};
use super::stage::number_identical_rows;
use super::touched::lock_touched_partitions;
use super::versions;
use crate::ids::LoadId;
use crate::ingest::{ContentDelta, ContentHash};
use crate::period::{Grain, Period};
use crate::schema::MergeMode;
use crate::schema::TableDef;
use crate::store::sql::row_hash;
use crate::store::{StoreError, StoreResult};

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
    /// Rows not written because the same row (for a versions write, the
    /// same version) is stored already.
    pub already_present: u64,
    /// Versions stored already with other content, held in the duplicates
    /// log (a versions write under a quarantine).
    pub conflicts: u64,
    /// Versions written to the table's history (`"history": "scd2"`): a
    /// late version is one though it leaves the current rows alone.
    pub history_written: u64,
    pub partitions: Vec<PartitionAfter>,
    /// What the write changed in each partition, not recorded yet: the
    /// caller records them before it commits (`closing::close_rows_write`),
    /// under the partitions' locks, which the transaction holds.
    pub deltas: Vec<(Period, ContentDelta)>,
}

/// What this write changes in each partition it touches.
type Deltas = BTreeMap<Period, ContentDelta>;

/// One load's share of the incoming rows: a POST's, or one of a batch of
/// POSTs written together (see `apply_batch`).
#[derive(Clone, Debug)]
pub struct LoadRows {
    pub load_id: LoadId,
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

type Tallies = BTreeMap<LoadId, Tally>;

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
    load_id: LoadId,
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
/// `fits_arrays`; `RowIds` finds repeats across loads). The partitions in
/// `locked` the batch has locked already.
#[tracing::instrument(level = "debug", skip_all, fields(table = %def.name, mode = mode.as_str(), loads = loads.len()))]
pub async fn apply_batch(
    conn: &mut PgConnection,
    def: &TableDef,
    mode: MergeMode,
    loads: &[LoadRows],
    arrays: TupleArrays,
    tombstones: u64,
    locked: &BTreeSet<Period>,
) -> StoreResult<BTreeMap<LoadId, Merged>> {
    if mode == MergeMode::Patch {
        return Err(StoreError::Corrupt("a patch came in a batch"));
    }
    let incoming = Incoming {
        rows: loads.iter().map(|l| l.rows).sum(),
        content: ContentHash::default(),
        tombstones,
        // A batch's rows repeat no row id.
        maybe_repeated: false,
        // Its POSTs' rows follow each other, each POST's in its own order.
        in_key_order: false,
        refuse_repeats: false,
        // A conflict fails the batch: its POSTs then go alone, where the
        // table's policy refuses or holds it.
        refuse_conflicts: true,
        // Those the batch has not locked already (`lock_existing_partitions`).
        periods: loads
            .iter()
            .flat_map(|l| l.periods.iter().copied())
            .filter(|ds| !locked.contains(ds))
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
    /// On a Citus table, the upsert's shards are written one at a time
    /// (`citus.multi_shard_modify_mode`, see `Store::connect_with`), which
    /// keeps that order too; the retry stays for what Citus orders
    /// otherwise.
    fn may_deadlock(&self) -> bool {
        (self.incoming.tombstones > 0 && self.mode.replaces())
            || self.def.distribution.needs_citus()
    }

    async fn run(
        &self,
        conn: &mut PgConnection,
        rehash: Rehash<'_>,
    ) -> StoreResult<BTreeMap<LoadId, Merged>> {
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
    ) -> StoreResult<BTreeMap<LoadId, Merged>> {
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
    ) -> StoreResult<BTreeMap<LoadId, Merged>> {
        let (def, sql, mode) = (self.def, self.sql, self.mode);
        let alone = mode == MergeMode::Patch;
        let creator = self.loads.first().map_or(LoadId::NONE, |l| l.load_id);
        lock_touched_partitions(conn, def, &self.incoming.periods, creator, alone).await?;
        let mut tallies: Tallies = self.loads.iter().map(Tally::of).collect();
        if mode == MergeMode::Patch {
            fill_in_patches(conn, def, sql, rehash).await?;
        }
        if mode.replaces() && self.incoming.tombstones > 0 {
            delete_tombstoned(conn, sql, &mut tallies).await?;
        }
        let shape = UpsertShape {
            in_key_order: self.incoming.in_key_order,
            one_load: self.loads.len() == 1,
        };
        upsert_rows(conn, sql, mode, shape, self.loads, &mut tallies).await?;
        if mode != MergeMode::Append && tallies.values().any(Tally::left_rows_alone) {
            self.count_stored(conn, &mut tallies).await?;
        }
        for (load_id, versions) in history::record_incoming(conn, def, sql, mode).await? {
            if let Some(tally) = tallies.get_mut(&load_id) {
                tally.merged.history_written = count_from(versions)?;
            }
        }
        Ok(tallies
            .into_iter()
            .map(|(load_id, tally)| (load_id, tally.into_merged()))
            .collect())
    }

    /// Tells each load how many rows the upsert left alone because their
    /// identity is stored already: as the same row (`already_present`), or,
    /// for a versions write, as another version (conflicts, which refuse
    /// the write or are held; see `versions`).
    async fn count_stored(
        &self,
        conn: &mut PgConnection,
        tallies: &mut Tallies,
    ) -> StoreResult<()> {
        let count = self.sql.stored_matches();
        let rows = self.sql.query(&count).fetch_all(&mut *conn).await?;
        let versions = self.mode == MergeMode::Versions;
        let mut conflicts = 0;
        for row in rows {
            let Some(tally) = tallies.get_mut(&row.try_get::<LoadId, _>(0)?) else {
                continue;
            };
            tally.merged.already_present += count_from(row.try_get(1)?)?;
            if versions {
                let other = count_from(row.try_get(2)?)?;
                tally.merged.conflicts += other;
                conflicts += other;
            }
        }
        if conflicts == 0 {
            return Ok(());
        }
        if self.incoming.refuse_conflicts {
            return Err(versions::refusal(conn, self.def, self.sql, conflicts).await?);
        }
        versions::hold(conn, self.def, self.sql).await?;
        Ok(())
    }
}

impl Tally {
    /// Whether the statements left some of the load's rows alone.
    fn left_rows_alone(&self) -> bool {
        let m = &self.merged;
        m.rows_after_dedup > m.inserted + m.updated + m.deleted
    }

    /// A load's tally before any statement: each of its partitions changed
    /// by nothing yet.
    fn of(load: &LoadRows) -> (LoadId, Tally) {
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

/// Versions of one key in the body collapse to one (by the rule a PUT's
/// stage uses); identical rows of a keyless table are numbered apart.
/// Returns how many versions were dropped.
async fn collapse_duplicates(
    conn: &mut PgConnection,
    def: &TableDef,
    sql: &MergeSql,
    incoming: &Incoming,
    load_id: LoadId,
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

async fn delete_tombstoned(
    conn: &mut PgConnection,
    sql: &MergeSql,
    tallies: &mut Tallies,
) -> StoreResult<()> {
    let delete = sql.delete_tombstoned();
    let mut gone = sql.query(&delete).fetch(&mut *conn);
    while let Some(row) = gone.try_next().await? {
        let (ds, hash) = digest_of(&row, sql.grain)?;
        let Some(tally) = tallies.get_mut(&row.try_get::<LoadId, _>(2)?) else {
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
    shape: UpsertShape,
    loads: &[LoadRows],
    tallies: &mut Tallies,
) -> StoreResult<()> {
    let shares = upsert(conn, sql, mode, shape, loads).await?;
    let mut written: BTreeMap<(LoadId, Period), u64> = BTreeMap::new();
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
    load_id: LoadId,
    rows: u64,
    /// The hashes of the stored versions its rows replaced.
    replaced: Vec<[u8; 32]>,
}

/// The upsert itself (see `upsert_rows`).
async fn upsert(
    conn: &mut PgConnection,
    sql: &MergeSql,
    mode: MergeMode,
    shape: UpsertShape,
    loads: &[LoadRows],
) -> StoreResult<Vec<WrittenShare>> {
    let upsert = sql.upsert(mode, shape);
    let rows = sql
        .query(&upsert)
        .fetch_all(&mut *conn)
        .await
        .map_err(partition_gone_is_busy)?;
    // A single load's answer has no load column (see `MergeSql::upsert`).
    let one_load = loads.first().filter(|_| shape.one_load).map(|l| l.load_id);
    let next = usize::from(one_load.is_none());
    rows.iter()
        .map(|row| {
            let replaced: Vec<Vec<u8>> = row.try_get(2 + next)?;
            Ok(WrittenShare {
                ds: period_of(&row.try_get::<String, _>(0)?, sql.grain)?,
                load_id: match one_load {
                    Some(load_id) => load_id,
                    None => row.try_get(1)?,
                },
                rows: count_from(row.try_get(1 + next)?)?,
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
    load_id: LoadId,
    additions: &BTreeMap<Period, ContentDelta>,
    written: &BTreeMap<(LoadId, Period), u64>,
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
    loads: &[LoadId],
    tallies: &mut Tallies,
) -> StoreResult<()> {
    let read = sql.written_hashes();
    let rows = sql.query(&read).bind(loads).fetch_all(&mut *conn).await?;
    for row in rows {
        let ds = period_of(&row.try_get::<String, _>(0)?, sql.grain)?;
        let Some(tally) = tallies.get_mut(&row.try_get::<LoadId, _>(1)?) else {
            continue;
        };
        let delta = tally.deltas.entry(ds).or_default();
        for hash in row.try_get::<Vec<Vec<u8>>, _>(2)? {
            delta.add(&row_hash(hash)?);
        }
    }
    Ok(())
}

fn count_from(n: i64) -> StoreResult<u64> {
    u64::try_from(n).map_err(|_| StoreError::Corrupt("a negative count"))
}

fn count_of<T>(items: &[T]) -> u64 {
    u64::try_from(items.len()).expect("a count fits u64")
}

fn digest_of(row: &PgRow, grain: Grain) -> StoreResult<(Period, [u8; 32])> {
    let label: String = row.try_get(0)?;
    Ok((period_of(&label, grain)?, row_hash(row.try_get(1)?)?))
}
