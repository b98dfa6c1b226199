//! Where a POST's rows wait for the merge: the session's temporary table
//! (one per session and table definition, emptied at each commit), filled
//! by `copy_incoming`, or a small body's arrays (`small_body`, and
//! `small_bodies` for a batch), read from the encoder's COPY tuples; and
//! what the decoder learnt of them (`Incoming`). `merge` reads them from
//! here; it needs nothing of how they got in.

use std::collections::{BTreeMap, BTreeSet};
use std::io;

use bytes::Bytes;
use futures::Stream;
use sha2::{Digest, Sha256};
use sqlx::PgConnection;

use super::arrays::{field_of_each, split_tuples, ElementType, TupleArrays};
use super::stage::{copy_binary, Freeze};
use crate::ingest::{ContentDelta, ContentHash};
use crate::period::Period;
use crate::schema::{MergeMode, TableDef};
use crate::store::sql::{column_ddl, Ident, DELETED, PRESENT};
use crate::store::StoreResult;

/// The temporary table a POST's rows land in first: one per session and
/// table definition, made on first use and kept (emptied at each commit),
/// so that a write pays no catalog changes for it, and its statements keep
/// one text (and their prepared form) from request to request.
pub(super) fn incoming_table(def: &TableDef) -> Ident {
    let digest = Sha256::digest(incoming_ddl(def).as_bytes());
    Ident::stage(&format!("idem_incoming_{}", hex::encode(&digest[..8])))
}

fn incoming_ddl(def: &TableDef) -> String {
    format!(
        "{}, {DELETED} boolean not null default false, {PRESENT} bytea",
        column_ddl(def)
    )
}

/// The session's table of incoming rows, made if this session has none yet.
pub(super) async fn session_incoming(
    conn: &mut PgConnection,
    def: &TableDef,
) -> StoreResult<Ident> {
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
    let extra: &[Ident] = match mode {
        MergeMode::Merge => &[DELETED],
        MergeMode::Patch => &[DELETED, PRESENT],
        MergeMode::Append | MergeMode::InsertMissing | MergeMode::Versions => &[],
    };
    copy_binary(conn, &incoming, def, extra, Freeze::No, rows).await
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
    /// The rows are in the order of the table's unique index, where the
    /// merge reads them (see `MergeSql::upsert`).
    pub in_key_order: bool,
    /// A repeated key refuses the load (`Resolve::refuse`).
    pub refuse_repeats: bool,
    /// A version stored already with other content refuses the load (a
    /// versions write with bad rows refused); otherwise it is held.
    pub refuse_conflicts: bool,
    /// The partitions the rows belong to (the decoder saw each row's).
    pub periods: BTreeSet<Period>,
    /// What the rows other than tombstones add to each partition if every
    /// one of them is written.
    pub additions: BTreeMap<Period, ContentDelta>,
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
