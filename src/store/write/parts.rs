//! A part of a staged load (`PUT /loads/{id}/parts/{n}`): its rows COPYed
//! into a table of its own, then registered in `idem.load_parts` in a
//! second, short transaction that replaces an earlier part `n`.
//!
//! Between the two the table is claimed (as a stage is, see `stage`); once
//! registered, the janitor leaves it to its load (it is dropped when the
//! load is published, abandoned or expired), so a crash at any moment
//! leaves either a registered part or nothing.

use std::io;

use bytes::Bytes;
use futures::Stream;
use sha2::Digest;
use sqlx::{Connection, PgConnection};
use uuid::Uuid;

use super::stage::{begin_copy, copy_binary, try_key_index};
use crate::ids::LoadId;
use crate::period::Period;
use crate::schema::TableDef;
use crate::store::locks::lock_load_shared;
use crate::store::sql::staging_table;
use crate::store::staged_loads::{self, StagedStatus};
use crate::store::{count, StoreResult};

/// A new part's table name: the load, the part, and this upload (a part
/// sent twice at once stages twice; the later registration wins).
pub fn part_stage_name(load_id: LoadId, part: u32) -> String {
    let upload = Uuid::now_v7().simple().to_string();
    format!("p_{}_{part}_{}", load_id.as_uuid().simple(), &upload[20..])
}

/// COPYs `rows` into a new part table `name` (committed; still claimed by
/// the caller); returns how many rows it holds. A part of one partition
/// (`bound`) is made as that partition's stage would be, its bound and its
/// key's unique index built while parts upload in parallel, so that a
/// publish that finds it alone in its partition only swaps it in.
pub async fn copy_part(
    conn: &mut PgConnection,
    def: &TableDef,
    name: &str,
    bound: Option<Period>,
    rows: impl Stream<Item = io::Result<Bytes>> + Unpin,
) -> StoreResult<u64> {
    let table = staging_table(name);
    let (mut tx, freeze) = begin_copy(conn, def, name, bound).await?;
    let copied = copy_binary(&mut tx, &table, def, &[], freeze, rows).await?;
    if bound.is_some() {
        try_key_index(&mut tx, def, &table).await?;
    }
    tx.commit().await?;
    Ok(copied)
}

/// The digest of the table definition a part's rows were staged for.
pub fn definition_digest(def: &TableDef) -> String {
    let json = serde_json::to_vec(def).expect("a definition serializes");
    hex::encode(sha2::Sha256::digest(json))
}

/// What a staged part holds, to register.
pub struct PartFacts<'a> {
    pub load_id: LoadId,
    pub part: u32,
    pub stage_name: &'a str,
    pub rows: u64,
    pub rows_received: u64,
    pub rejected: u64,
    pub content_sha256: &'a str,
    pub additions: serde_json::Value,
    /// The table definition the rows were staged for (`definition_digest`).
    pub definition_sha256: &'a str,
}

/// What registering a part did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Registered {
    /// It is part `n` now (the earlier part `n`, if any, dropped).
    Replaced,
    /// Part `n` already holds these rows: nothing changed (the caller drops
    /// the new table).
    Same,
    /// The load takes no parts any more (or is gone).
    NotOpen(Option<StagedStatus>),
}

/// Registers the part, unless the load is no longer open or its part `n`
/// holds the same rows.
pub async fn register_part(
    conn: &mut PgConnection,
    facts: &PartFacts<'_>,
) -> StoreResult<Registered> {
    let mut tx = conn.begin().await?;
    lock_load_shared(&mut tx, facts.load_id).await?;
    let load = staged_loads::get(&mut tx, facts.load_id, false).await?;
    match load.map(|l| l.status) {
        Some(status) if status.is_open() => {}
        other => return Ok(Registered::NotOpen(other)),
    }
    let part = i32::try_from(facts.part).expect("a part number is at most 10000");
    // language=PostgreSQL
    let earlier: Option<(String, String, String)> = sqlx::query_as(
        "select stage_name, content_sha256, definition_sha256 from idem.load_parts
          where load_id = $1 and part = $2 for update",
    )
    .bind(facts.load_id)
    .bind(part)
    .fetch_optional(&mut *tx)
    .await?;
    // The same rows for the same definition of the table: nothing to do.
    if earlier.as_ref().is_some_and(|(_, content, definition)| {
        content == facts.content_sha256 && definition == facts.definition_sha256
    }) {
        return Ok(Registered::Same);
    }
    // language=PostgreSQL
    sqlx::query(
        "insert into idem.load_parts (load_id, part, stage_name, rows, rows_received, rejected,
                                      content_sha256, additions, definition_sha256)
         values ($1, $2, $3, $4, $5, $6, $7, $8, $9)
         on conflict (load_id, part) do update
            set stage_name = excluded.stage_name, rows = excluded.rows,
                rows_received = excluded.rows_received, rejected = excluded.rejected,
                content_sha256 = excluded.content_sha256, additions = excluded.additions,
                definition_sha256 = excluded.definition_sha256, uploaded_at = now()",
    )
    .bind(facts.load_id)
    .bind(part)
    .bind(facts.stage_name)
    .bind(count(facts.rows)?)
    .bind(count(facts.rows_received)?)
    .bind(count(facts.rejected)?)
    .bind(facts.content_sha256)
    .bind(&facts.additions)
    .bind(facts.definition_sha256)
    .execute(&mut *tx)
    .await?;
    if let Some((old, _, _)) = earlier {
        sqlx::query(&format!("drop table if exists {}", staging_table(&old)))
            .execute(&mut *tx)
            .await?;
    }
    // A part sent again after a failed audit makes the load open again.
    staged_loads::reopen(&mut tx, facts.load_id).await?;
    tx.commit().await?;
    Ok(Registered::Replaced)
}
