//! The last statement of a `POST /rows` transaction (one POST's, or a
//! batch's, whatever tables its POSTs wrote): what each write changed in
//! each partition, its ledger row and its key's completion (when it has a
//! key), written by one statement (one round trip, not three a write)
//! just before the commit.

use std::collections::BTreeMap;

use sqlx::PgConnection;

use crate::ids::LoadId;
use crate::ingest::ContentDelta;
use crate::names::TableName;
use crate::period::Period;
use crate::store::contents::{bind_deltas, deltas_sql, PartitionDelta};
use crate::store::idempotency::{all_completed, bind_completions, complete_sql, Completion};
use crate::store::ledger::{bind_entries, insert_sql, LoadEntry};
use crate::store::{StoreError, StoreResult};

/// What one merge leaves for the end of its transaction.
pub struct RowsClosing<'a> {
    pub load_id: LoadId,
    /// What the write changed in each partition it touched.
    pub deltas: &'a [(Period, ContentDelta)],
    pub entry: LoadEntry<'a>,
    /// Its Idempotency-Key's completion; none for a write on a channel
    /// without a key (its channel's row is its record).
    pub key: Option<Completion<'a>>,
}

/// The writes' changes to each partition, as one delta row a partition
/// (under the first write's load id): folding adds them all the same, and a
/// batch then inserts, and the folder removes, one row a day, not one a POST.
fn per_partition<'a>(writes: &[RowsClosing<'a>]) -> StoreResult<Vec<PartitionDelta<'a>>> {
    let mut days: BTreeMap<(&TableName, Period), PartitionDelta> = BTreeMap::new();
    for write in writes {
        let table = write.entry.table;
        for (ds, delta) in write.deltas {
            let day = days.entry((table, *ds)).or_insert(PartitionDelta {
                table,
                ds: *ds,
                load_id: write.load_id,
                delta: ContentDelta::default(),
            });
            day.delta
                .merge(delta)
                .ok_or(StoreError::Corrupt("a partition's row count overflows"))?;
        }
    }
    Ok(days.into_values().collect())
}

/// Parameters of each part: deltas, ledger rows (then the keys').
const DELTA_PARAMS: usize = 5;
const ENTRY_PARAMS: usize = 16;

/// Writes the deltas, the ledger rows and the keys' completions of writes
/// (each to the table its ledger entry names; under the partitions' locks
/// and the keys, which the transaction holds).
pub async fn close_rows_writes(
    conn: &mut PgConnection,
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
    let deltas = per_partition(writes)?;
    let entries: Vec<LoadEntry<'_>> = writes.iter().map(|w| w.entry.clone()).collect();
    let keys: Vec<Completion<'_>> = writes.iter().filter_map(|w| w.key.clone()).collect();
    let query = bind_deltas(sqlx::query(&sql), &deltas);
    let query = bind_entries(query, &entries)?;
    let completed = bind_completions(query, &keys)
        .execute(conn)
        .await?
        .rows_affected();
    all_completed(completed, keys.len())
}
