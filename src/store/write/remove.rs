//! A partition dropped: `DELETE /partitions/{t}/{ds}`, and the days a
//! range's load leaves empty (`publish_many`). Its registry row, deltas and
//! table go in one transaction, its keys recorded as removed in the
//! table's history.

use sqlx::{Connection, PgConnection};

use super::history::{record_replacement, Replacement};
use crate::ids::LoadId;
use crate::period::Period;
use crate::schema::{Distribution, TableDef};
use crate::store::contents;
use crate::store::locks::lock_partition;
use crate::store::sql::{live_partition, parent_table};
use crate::store::{rejects, Store, StoreResult};

impl Store {
    /// Drops partition `ds`; false when it did not exist.
    #[tracing::instrument(skip(self, def), fields(table = %def.name))]
    pub async fn delete_partition(&self, def: &TableDef, ds: Period) -> StoreResult<bool> {
        let mut conn = self.acquire().await?;
        let mut tx = conn.begin().await?;
        lock_partition(&mut tx, &def.name, ds).await?;
        // No load removes it: its keys' removals name the nil load.
        if !remove_partition(&mut tx, def, ds, LoadId::NONE).await? {
            return Ok(false);
        }
        // The day's pending rejects belonged to a version of it that is gone:
        // a replay must not bring the day back.
        rejects::supersede(&mut tx, &def.name, ds, LoadId::NONE).await?;
        tx.commit().await?;
        Ok(true)
    }
}

/// Removes partition `ds` of `def` (its registry row, its deltas, its
/// table; its keys recorded as removed by `load_id` in the table's history,
/// if it keeps one) under the caller's lock on it; false when it did not
/// exist.
pub(crate) async fn remove_partition(
    tx: &mut PgConnection,
    def: &TableDef,
    ds: Period,
    load_id: LoadId,
) -> StoreResult<bool> {
    let deleted = sqlx::query("delete from idem.partitions where table_name = $1 and ds = $2")
        .bind(def.name.as_str())
        .bind(ds.label())
        .execute(&mut *tx)
        .await?
        .rows_affected();
    if deleted == 0 {
        return Ok(false);
    }
    contents::clear_deltas(tx, &def.name, ds).await?;
    let partition = live_partition(def, ds);
    let removal = Replacement {
        live: Some(&partition),
        stage: None,
        load_id,
    };
    record_replacement(&mut *tx, def, removal).await?;
    let statements = match def.distribution {
        Distribution::Reference => vec![format!("delete from {partition}")],
        _ => vec![
            format!(
                "alter table {} detach partition {partition}",
                parent_table(&def.name)
            ),
            format!("drop table {partition}"),
        ],
    };
    for sql in statements {
        sqlx::query(&sql).execute(&mut *tx).await?;
    }
    Ok(true)
}
