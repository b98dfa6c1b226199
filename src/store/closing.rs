//! The last statement of a `POST /rows` transaction (one POST's, or a
//! batch's): what each write changed in each partition, its ledger row and
//! its key's completion, written by one statement (one round trip, not
//! three) just before the commit.

use sqlx::PgConnection;
use uuid::Uuid;

use super::contents::{bind_deltas, deltas_sql, PartitionDelta};
use super::idempotency::{bind_completions, complete_sql, Completion};
use super::ledger::{bind_entries, insert_sql, LoadEntry};
use super::StoreResult;
use crate::ingest::ContentDelta;
use crate::names::TableName;
use crate::period::Period;

/// What one merge leaves for the end of its transaction.
pub struct RowsClosing<'a> {
    pub load_id: Uuid,
    /// What the write changed in each partition it touched.
    pub deltas: &'a [(Period, ContentDelta)],
    pub entry: LoadEntry<'a>,
    pub key: Completion<'a>,
}

/// Parameters of each part: deltas, ledger rows (then the keys').
const DELTA_PARAMS: usize = 5;
const ENTRY_PARAMS: usize = 16;

/// Writes the deltas, the ledger rows and the keys' completions of writes
/// to `table` (under the partitions' locks and the keys, which the
/// transaction holds).
pub async fn close_rows_writes(
    conn: &mut PgConnection,
    table: &TableName,
    writes: &[RowsClosing<'_>],
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
    let deltas: Vec<PartitionDelta<'_>> = writes
        .iter()
        .flat_map(|w| {
            w.deltas.iter().map(|(ds, delta)| PartitionDelta {
                ds: *ds,
                load_id: w.load_id,
                delta,
            })
        })
        .collect();
    let entries: Vec<LoadEntry<'_>> = writes.iter().map(|w| w.entry.clone()).collect();
    let keys: Vec<Completion<'_>> = writes.iter().map(|w| w.key.clone()).collect();
    let query = bind_deltas(sqlx::query(&sql), table, &deltas);
    let query = bind_entries(query, &entries)?;
    bind_completions(query, &keys).execute(conn).await?;
    Ok(())
}
