//! What a PUT of a day answers: its receipt, and the ledger's entry for it.

use crate::ids::LoadId;
use crate::metrics::RowCounts;
use crate::names::TableName;
use crate::period::Period;
use crate::pipeline::intake::ticket::LoadTicket;
use crate::store::ledger::{LoadEntry, LoadStatus};
use crate::store::write::publish::Published;

/// What an accepted PUT did (its HTTP form is `http::receipts`).
#[derive(Clone, Debug)]
pub struct Receipt {
    pub load_id: LoadId,
    pub table: TableName,
    pub ds: Period,
    pub mode: &'static str,
    pub rows_received: u64,
    pub rows_written: u64,
    pub duplicates: u64,
    /// Bad rows kept in the rejects store (`bad_rows: quarantine`).
    pub rejected: u64,
    /// The load they were kept by: this one, or for the body the day was
    /// built from, the load that first wrote it.
    pub rejected_by: LoadId,
    /// Values of fields the table has no column for, dropped under
    /// `schema: discard_unknown`.
    pub discarded_fields: u64,
    /// Rows in the partition after this write.
    pub row_count: u64,
    pub content_sha256: String,
    pub changed: bool,
    /// No one had declared the table: this write made it, from its body.
    pub table_created: bool,
}

impl Receipt {
    /// The partition's entity tag after this write (its content hash).
    pub fn etag(&self) -> &str {
        &self.content_sha256
    }

    /// What this write did, in the counts `/metrics` keeps.
    pub fn counts(&self) -> RowCounts {
        RowCounts {
            received: self.rows_received,
            written: self.rows_written,
            duplicates: self.duplicates,
            rejected: self.rejected,
        }
    }

    /// The receipt as the swap left things: the day found holding this
    /// content already (nothing written), or swapped in, in a table the
    /// swap made or not.
    pub fn once_published(self, published: Published) -> Self {
        match published {
            Published::Swapped { table_created } => Receipt {
                table_created,
                ..self
            },
            Published::Unchanged => Receipt {
                changed: false,
                rows_written: 0,
                ..self
            },
        }
    }

    /// The ledger's entry for this receipt.
    pub fn entry<'a>(&'a self, ticket: &'a LoadTicket, status: LoadStatus) -> LoadEntry<'a> {
        LoadEntry {
            status,
            rows_received: self.rows_received,
            rows_written: self.rows_written,
            duplicates: self.duplicates,
            rejected: self.rejected,
            content_sha256: Some(&self.content_sha256),
            changed: self.changed,
            ..ticket.entry()
        }
    }
}
