//! What a write of rows answers: a POST's receipt, a replay's, each with
//! what is left to record before the commit, and the ledger's entry.

use crate::channel::ChannelCommitted;
use crate::ids::LoadId;
use crate::ingest::ContentDelta;
use crate::metrics::RowCounts;
use crate::names::TableName;
use crate::period::Period;
use crate::pipeline::intake::decode::Decoded;
use crate::pipeline::intake::ticket::LoadTicket;
use crate::schema::{MergeMode, TableDef};
use crate::store::ledger::{LoadEntry, LoadStatus};
use crate::store::write::merge::{Merged, PartitionAfter};

/// What an accepted POST did (its HTTP form is `http::receipts`).
#[derive(Clone, Debug)]
pub struct RowsReceipt {
    pub load_id: LoadId,
    pub table: TableName,
    pub mode: MergeMode,
    /// The partition written, when there was exactly one.
    pub ds: Option<Period>,
    /// Every partition written, with its row count and content hash after.
    pub partitions: Vec<PartitionAfter>,
    pub rows_received: u64,
    /// Inserted + updated + deleted.
    pub rows_written: u64,
    pub inserted: u64,
    pub updated: u64,
    pub deleted: u64,
    /// Rows that changed nothing: the same as stored, an older cursor, an
    /// existing key under `insert_missing`, a tombstone for nothing.
    pub unchanged: u64,
    /// The unchanged rows that are stored already as they are (a versions
    /// write's: the version is stored).
    pub already_present: u64,
    /// Versions stored already with other content, held (versions only).
    pub conflicts: u64,
    /// Versions written to the table's history (see `Merged`).
    pub history_written: u64,
    pub duplicates: u64,
    /// Bad rows kept in the rejects store (`bad_rows: quarantine`).
    pub rejected: u64,
    /// Values of fields the table has no column for, dropped under
    /// `schema: discard_unknown`.
    pub discarded_fields: u64,
    pub changed: bool,
    /// The channel offset the write committed, for a POST on a channel.
    pub channel: Option<ChannelCommitted>,
    /// No one had declared the table: this write made it, from its body.
    pub table_created: bool,
}

impl RowsReceipt {
    pub fn new(
        ticket: &LoadTicket,
        def: &TableDef,
        mode: MergeMode,
        decoded: &Decoded,
        merged: Merged,
    ) -> Self {
        let rows_written = merged.inserted + merged.updated + merged.deleted;
        // A held conflict was neither written nor left as it is stored.
        let left_alone = rows_written + merged.conflicts;
        RowsReceipt {
            load_id: ticket.load_id,
            table: def.name.clone(),
            mode,
            ds: match merged.partitions.as_slice() {
                [one] => Some(one.ds),
                _ => None,
            },
            rows_received: decoded.rows_received,
            rows_written,
            inserted: merged.inserted,
            updated: merged.updated,
            deleted: merged.deleted,
            unchanged: merged.rows_after_dedup - left_alone,
            already_present: merged.already_present,
            conflicts: merged.conflicts,
            history_written: merged.history_written,
            duplicates: merged.duplicates,
            rejected: 0,
            discarded_fields: decoded.discarded_fields,
            // What the write stored anywhere: a late version changes the
            // history alone.
            changed: rows_written > 0 || merged.history_written > 0,
            partitions: merged.partitions,
            channel: None,
            table_created: false,
        }
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

    /// The ledger's row for this write.
    pub fn entry<'a>(&'a self, ticket: &'a LoadTicket) -> LoadEntry<'a> {
        LoadEntry {
            status: LoadStatus::of_merge(self.changed),
            ds: self.ds,
            mode: self.mode.as_str(),
            rows_received: self.rows_received,
            rows_written: self.rows_written,
            duplicates: self.duplicates,
            rejected: self.rejected,
            changed: self.changed,
            ..ticket.entry()
        }
    }
}

/// A POST's rows as written, and what is left to record before the commit.
pub struct RowsWritten {
    pub receipt: RowsReceipt,
    /// What the write changed in each partition it touched.
    pub deltas: Vec<(Period, ContentDelta)>,
}

/// What a replay of rejects did (its HTTP form is `http::receipts`).
#[derive(Clone, Debug, Default)]
pub struct ReplayReceipt {
    pub load_id: LoadId,
    pub table: String,
    pub mode: &'static str,
    /// Pending rejects tried now.
    pub tried: u64,
    /// Of them, written now (their status is `replayed`).
    pub rows_replayed: u64,
    /// Of them, still bad (pending, one more try, their new problems).
    pub still_pending: u64,
    /// Rejects past the table's retry window, made `expired` now.
    pub expired: u64,
    /// More rejects are pending than one replay takes: replay again.
    pub more_pending: bool,
    pub rows_written: u64,
    pub inserted: u64,
    pub updated: u64,
    pub unchanged: u64,
    /// Versions written to the table's history (see `Merged`).
    pub history_written: u64,
    pub duplicates: u64,
    /// Every partition written, with the rows it gained or lost.
    pub partitions: Vec<PartitionAfter>,
    pub changed: bool,
}

impl ReplayReceipt {
    pub fn counts(&self) -> RowCounts {
        RowCounts {
            received: self.tried,
            written: self.rows_written,
            duplicates: self.duplicates,
            rejected: self.still_pending,
        }
    }

    pub fn entry<'a>(&'a self, ticket: &'a LoadTicket) -> LoadEntry<'a> {
        LoadEntry {
            status: LoadStatus::of_merge(self.changed),
            rows_received: self.tried,
            rows_written: self.rows_written,
            duplicates: self.duplicates,
            rejected: self.still_pending,
            changed: self.changed,
            ..ticket.entry()
        }
    }
}

/// A replay done, and what is left to record before its commit.
pub struct ReplayWritten {
    pub receipt: ReplayReceipt,
    pub deltas: Vec<(Period, ContentDelta)>,
}
