//! The last statement of a `POST /rows` transaction: what the write changed
//! in each partition, its ledger row and its key's completion, written by
//! one statement (one round trip, not three) just before the commit.

use sqlx::PgConnection;
use uuid::Uuid;

use super::contents::{bind_deltas, deltas_sql};
use super::idempotency::{bind_completion, complete_sql, Completion};
use super::ledger::{bind_entry, insert_sql, LoadEntry};
use super::StoreResult;
use crate::ingest::ContentDelta;
use crate::names::TableName;
use crate::period::Period;

/// What a merge leaves for the end of its transaction.
pub struct RowsClosing<'a> {
    pub table: &'a TableName,
    pub load_id: Uuid,
    /// What the write changed in each partition it touched.
    pub deltas: &'a [(Period, ContentDelta)],
    pub entry: &'a LoadEntry<'a>,
    pub key: &'a Completion<'a>,
}

/// Parameters of each part: deltas, ledger row, key.
const DELTA_PARAMS: usize = 5;
const ENTRY_PARAMS: usize = 16;

/// Writes the deltas, the ledger row and the key's completion (under the
/// partitions' locks and the key, which the transaction holds).
pub async fn close_rows_write(
    conn: &mut PgConnection,
    closing: &RowsClosing<'_>,
) -> StoreResult<()> {
    let entry_from = 1 + DELTA_PARAMS;
    let key_from = entry_from + ENTRY_PARAMS;
    // language=PostgreSQL
    let sql = format!(
        "with deltas as ({}), ledger as ({}) {}",
        deltas_sql(1),
        insert_sql(entry_from),
        complete_sql(key_from)
    );
    let query = bind_deltas(
        sqlx::query(&sql),
        closing.table,
        closing.load_id,
        closing.deltas,
    );
    let query = bind_entry(query, closing.entry)?;
    bind_completion(query, closing.key).execute(conn).await?;
    Ok(())
}
