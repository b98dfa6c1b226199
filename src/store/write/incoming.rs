//! Where a POST's rows wait for the merge: the session's temporary table
//! (one per session and table definition, emptied at each commit), or a
//! small body's arrays; and what the decoder learnt of them (`Incoming`).

use std::collections::{BTreeMap, BTreeSet};

use sha2::{Digest, Sha256};
use sqlx::PgConnection;

use super::arrays::TupleArrays;
use crate::ingest::{ContentDelta, ContentHash};
use crate::period::Period;
use crate::schema::TableDef;
use crate::store::sql::{column_ddl, Ident};
use crate::store::StoreResult;

/// The temporary table a POST's rows land in first: one per session and
/// table definition, made on first use and kept (emptied at each commit),
/// so that a write pays no catalog changes for it, and its statements keep
/// one text (and their prepared form) from request to request.
pub(super) fn incoming_table(def: &TableDef) -> Ident {
    let digest = Sha256::digest(incoming_ddl(def).as_bytes());
    Ident::system(&format!("idem_incoming_{}", hex::encode(&digest[..8])))
}

fn incoming_ddl(def: &TableDef) -> String {
    format!(
        "{}, \"_deleted\" boolean not null default false, \"_present\" bytea",
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
