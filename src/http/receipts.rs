//! The pipeline's receipts as the wire's (`wire::receipts`): the fields a
//! client reads, the link to a load's rejects, and `replayed`. An unkeyed
//! PUT is answered with its `PutReceipt` as it serializes; a keyed write's
//! answer is stored and sent as a JSON value (`ReceiptForm`, the form
//! `pipeline/keyed/` stores it in).

use serde::Serialize;

use crate::channel::{ChannelName, ChannelSkipped, Offset};
use crate::ids::LoadId;
use crate::names::TableName;
use crate::pipeline::{AnswerForm, DropReceipt, Receipt, ReplayReceipt, RowsReceipt};
use crate::store::write::merge::PartitionAfter;
use crate::wire::receipts as wire;

/// The form keyed writes store their answers in.
pub static RECEIPTS: &dyn AnswerForm = &ReceiptForm;

/// Each receipt as its JSON answer, with `replayed: false` (a stored answer
/// sent again says `true`: see `super::write::keyed_response`).
pub struct ReceiptForm;

impl AnswerForm for ReceiptForm {
    fn partition(&self, receipt: &Receipt) -> serde_json::Value {
        json(&put(receipt))
    }

    fn rows(&self, receipt: &RowsReceipt) -> serde_json::Value {
        json(&rows(receipt))
    }

    fn replay(&self, receipt: &ReplayReceipt) -> serde_json::Value {
        json(&replay(receipt))
    }

    fn channel_skipped(&self, skipped: &ChannelSkipped) -> serde_json::Value {
        json(&wire::SkippedReceipt {
            table: skipped.table.clone(),
            channel: skipped_fields(skipped),
            replayed: false,
        })
    }
}

fn json(value: &impl Serialize) -> serde_json::Value {
    serde_json::to_value(value).expect("a receipt serializes")
}

/// Where a load's rejects are listed, when it has any.
pub fn rejects_link(table: &TableName, load_id: LoadId, rejected: u64) -> Option<String> {
    (rejected > 0).then(|| format!("/rejects?table={table}&load_id={load_id}"))
}

/// The answer to an accepted PUT (the receipt; see docs/guide/partitions.md).
pub fn put(r: &Receipt) -> wire::PutReceipt {
    wire::PutReceipt {
        load_id: r.load_id,
        table: r.table.clone(),
        ds: r.ds,
        mode: r.mode.to_string(),
        rows_received: r.rows_received,
        rows_written: r.rows_written,
        duplicates: r.duplicates,
        rejected: r.rejected,
        rejects: rejects_link(&r.table, r.rejected_by, r.rejected),
        discarded_fields: r.discarded_fields,
        row_count: r.row_count,
        content_sha256: r.content_sha256.clone(),
        changed: r.changed,
        table_created: r.table_created,
        replayed: false,
    }
}

/// The answer to a drop of a table.
pub fn dropped(r: &DropReceipt) -> wire::DropReceipt {
    wire::DropReceipt {
        load_id: r.load_id,
        table: r.table.clone(),
        mode: crate::pipeline::DROP_MODE.to_string(),
        idempotency_keys_removed: r.removed.idempotency_keys,
        channels_removed: r.removed.channels,
        loads_abandoned: r.removed.open_loads,
        changed: true,
    }
}

/// Each partition a write moved, and by how many rows.
fn deltas(partitions: &[PartitionAfter]) -> Vec<wire::PartitionDelta> {
    partitions
        .iter()
        .map(|p| wire::PartitionDelta {
            ds: p.ds,
            row_delta: p.row_delta,
        })
        .collect()
}

/// A POST on a channel that committed `offset`.
fn committed_fields(name: &ChannelName, offset: &Offset) -> wire::ChannelFields {
    wire::ChannelFields {
        channel: name.as_str().to_string(),
        offset: offset.to_string(),
        offset_kind: offset.kind().as_str().to_string(),
        committed: true,
        committed_offset: offset.to_string(),
    }
}

/// A POST whose offset was not after the channel's committed one.
fn skipped_fields(skipped: &ChannelSkipped) -> wire::ChannelFields {
    wire::ChannelFields {
        channel: skipped.name.as_str().to_string(),
        offset: skipped.offset.to_string(),
        offset_kind: skipped.offset.kind().as_str().to_string(),
        committed: false,
        committed_offset: skipped.committed.to_string(),
    }
}

fn rows(r: &RowsReceipt) -> wire::RowsReceipt {
    wire::RowsReceipt {
        load_id: r.load_id,
        table: r.table.clone(),
        mode: r.mode,
        ds: r.ds,
        partitions: deltas(&r.partitions),
        rows_received: r.rows_received,
        rows_written: r.rows_written,
        inserted: r.inserted,
        updated: r.updated,
        deleted: r.deleted,
        unchanged: r.unchanged,
        already_present: r.already_present,
        conflicts: r.conflicts,
        history_written: r.history_written,
        duplicates: r.duplicates,
        rejected: r.rejected,
        rejects: rejects_link(&r.table, r.load_id, r.rejected),
        discarded_fields: r.discarded_fields,
        changed: r.changed,
        channel: r
            .channel
            .as_ref()
            .map(|c| committed_fields(&c.name, &c.offset)),
        table_created: r.table_created,
        replayed: false,
    }
}

fn replay(r: &ReplayReceipt) -> wire::ReplayReceipt {
    wire::ReplayReceipt {
        load_id: r.load_id,
        table: r.table.clone(),
        mode: r.mode.to_string(),
        tried: r.tried,
        rows_replayed: r.rows_replayed,
        still_pending: r.still_pending,
        expired: r.expired,
        more_pending: r.more_pending,
        rows_written: r.rows_written,
        inserted: r.inserted,
        updated: r.updated,
        unchanged: r.unchanged,
        history_written: r.history_written,
        duplicates: r.duplicates,
        partitions: deltas(&r.partitions),
        changed: r.changed,
        replayed: false,
    }
}
