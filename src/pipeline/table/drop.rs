//! Dropping a table (`DELETE /tables/{table}`): a load of mode `drop` in the
//! ledger, and this process's memory of the table let go.

use crate::access::Actor;
use crate::ids::LoadId;
use crate::names::TableName;
use crate::pipeline::error::WriteResult;
use crate::pipeline::intake::ticket::LoadTicket;
use crate::pipeline::Pipeline;
use crate::store::drop_table::Dropped;
use crate::store::ledger::{LoadEntry, LoadStatus};

pub const MODE: &str = "drop";

/// What a drop did (its HTTP form is `http::receipts`).
#[derive(Clone, Debug)]
pub struct DropReceipt {
    /// The drop's own load in the ledger.
    pub load_id: LoadId,
    pub table: TableName,
    pub removed: Dropped,
}

impl Pipeline {
    /// Drops `table` with everything idem keeps of it but its ledger; `None`
    /// when there was no such table (nothing is recorded then).
    #[tracing::instrument(skip(self, actor))]
    pub async fn drop_table(
        &self,
        table: &TableName,
        actor: &Actor,
    ) -> WriteResult<Option<DropReceipt>> {
        let ticket = LoadTicket::new(table, None, MODE, None, actor);
        let entry = LoadEntry {
            status: LoadStatus::Published,
            changed: true,
            ..ticket.entry()
        };
        let wait = self.settings.idempotency_wait();
        let dropped = self.store.drop_table(table, &entry, wait).await?;
        self.definitions.forget(table);
        if dropped.is_some() {
            // Stages no request owns any more, this table's among them (a
            // write in flight drops its own when it finds the table gone).
            if let Err(e) = self.store.sweep_stages().await {
                tracing::warn!(error = ?e, "could not sweep stages after a drop");
            }
        }
        Ok(dropped.map(|removed| DropReceipt {
            load_id: entry.load_id,
            table: table.clone(),
            removed,
        }))
    }
}
