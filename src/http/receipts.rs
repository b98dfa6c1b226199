//! The JSON form of the pipeline's receipts: the fields a client reads, the
//! link to a load's rejects, and `replayed`. An unkeyed PUT is answered with
//! these structs as they serialize (their field order on the wire); a keyed
//! write's answer is stored and sent as a JSON value (`ReceiptForm`, the
//! form `pipeline::keyed` stores it in).

use serde::Serialize;
use uuid::Uuid;

use crate::channel::{ChannelName, ChannelSkipped, Offset};
use crate::names::TableName;
use crate::period::Period;
use crate::pipeline::answer::AnswerForm;
use crate::pipeline::drop::DropReceipt;
use crate::pipeline::partition::Receipt;
use crate::pipeline::replay::ReplayReceipt;
use crate::pipeline::rows::RowsReceipt;
use crate::schema::MergeMode;
use crate::store::write::merge::PartitionAfter;

/// The form keyed writes store their answers in.
pub static RECEIPTS: &dyn AnswerForm = &ReceiptForm;

/// Each receipt as its JSON answer, with `replayed: false` (a stored answer
/// sent again says `true`: see `super::keyed_response`).
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
        json(&SkippedAnswer {
            table: &skipped.table,
            channel: ChannelFields::skipped(skipped),
            replayed: false,
        })
    }
}

fn json(value: &impl Serialize) -> serde_json::Value {
    serde_json::to_value(value).expect("a receipt serializes")
}

/// Where a load's rejects are listed, when it has any.
pub fn rejects_link(table: &TableName, load_id: Uuid, rejected: u64) -> Option<String> {
    (rejected > 0).then(|| format!("/rejects?table={table}&load_id={load_id}"))
}

/// For counts shown only when there is something to count.
fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// For flags shown only when they are set.
fn is_false(flag: &bool) -> bool {
    !flag
}

/// The answer to an accepted PUT (the receipt; see docs/guide/partitions.md).
#[derive(Serialize)]
pub struct PutAnswer<'a> {
    load_id: Uuid,
    table: &'a TableName,
    ds: Period,
    mode: &'static str,
    rows_received: u64,
    rows_written: u64,
    duplicates: u64,
    rejected: u64,
    /// Where the rejected rows are listed (absent when none).
    #[serde(skip_serializing_if = "Option::is_none")]
    rejects: Option<String>,
    #[serde(skip_serializing_if = "is_zero")]
    discarded_fields: u64,
    row_count: u64,
    content_sha256: &'a str,
    changed: bool,
    /// The write made the table, nobody having declared it (absent
    /// otherwise): a typo in a table's name shows here.
    #[serde(skip_serializing_if = "is_false")]
    table_created: bool,
    replayed: bool,
}

pub fn put(r: &Receipt) -> PutAnswer<'_> {
    PutAnswer {
        load_id: r.load_id,
        table: &r.table,
        ds: r.ds,
        mode: r.mode,
        rows_received: r.rows_received,
        rows_written: r.rows_written,
        duplicates: r.duplicates,
        rejected: r.rejected,
        rejects: rejects_link(&r.table, r.rejected_by, r.rejected),
        discarded_fields: r.discarded_fields,
        row_count: r.row_count,
        content_sha256: &r.content_sha256,
        changed: r.changed,
        table_created: r.table_created,
        replayed: false,
    }
}

/// The answer to `DELETE /tables/{table}` that dropped a table: its load
/// in the ledger, and what went with the table besides its rows.
#[derive(Serialize)]
pub struct DropAnswer<'a> {
    load_id: Uuid,
    table: &'a TableName,
    mode: &'static str,
    /// Idempotency-Keys of the table's loads: the same request sent again
    /// writes again.
    idempotency_keys_removed: u64,
    /// Channels whose last commit wrote to the table: their producers
    /// start over from the beginning.
    channels_removed: u64,
    /// Loads still open on the table, abandoned.
    loads_abandoned: u64,
    changed: bool,
}

pub fn dropped(r: &DropReceipt) -> DropAnswer<'_> {
    DropAnswer {
        load_id: r.load_id,
        table: &r.table,
        mode: crate::pipeline::drop::MODE,
        idempotency_keys_removed: r.removed.idempotency_keys,
        channels_removed: r.removed.channels,
        loads_abandoned: r.removed.open_loads,
        changed: true,
    }
}

/// The answer to an accepted POST.
#[derive(Serialize)]
struct RowsAnswer<'a> {
    load_id: Uuid,
    table: &'a TableName,
    mode: MergeMode,
    ds: Option<Period>,
    partitions: &'a [PartitionAfter],
    rows_received: u64,
    rows_written: u64,
    inserted: u64,
    updated: u64,
    deleted: u64,
    unchanged: u64,
    already_present: u64,
    conflicts: u64,
    /// Versions written to the table's history (absent when none).
    #[serde(skip_serializing_if = "is_zero")]
    history_written: u64,
    duplicates: u64,
    rejected: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    rejects: Option<String>,
    #[serde(skip_serializing_if = "is_zero")]
    discarded_fields: u64,
    changed: bool,
    /// A POST on a channel: the offset it committed.
    #[serde(flatten)]
    channel: Option<ChannelFields<'a>>,
    /// As in `PutAnswer`.
    #[serde(skip_serializing_if = "is_false")]
    table_created: bool,
    replayed: bool,
}

/// A channel POST's fields in its answer; offsets are strings, since an
/// integer offset or an LSN may not fit a JSON number as JavaScript reads it.
#[derive(Serialize)]
struct ChannelFields<'a> {
    channel: &'a str,
    offset: String,
    offset_kind: &'static str,
    /// Whether this POST committed its offset (and wrote its rows).
    committed: bool,
    /// The channel's offset after this POST.
    committed_offset: String,
}

impl<'a> ChannelFields<'a> {
    /// A POST that committed `offset`.
    fn committed(name: &'a ChannelName, offset: &Offset) -> Self {
        ChannelFields {
            channel: name.as_str(),
            offset: offset.to_string(),
            offset_kind: offset.kind().as_str(),
            committed: true,
            committed_offset: offset.to_string(),
        }
    }

    /// A POST whose `offset` was not after the channel's `committed`.
    fn skipped(skipped: &'a ChannelSkipped) -> Self {
        ChannelFields {
            channel: skipped.name.as_str(),
            offset: skipped.offset.to_string(),
            offset_kind: skipped.offset.kind().as_str(),
            committed: false,
            committed_offset: skipped.committed.to_string(),
        }
    }
}

/// The answer to a POST on a channel whose offset was committed already:
/// nothing was written.
#[derive(Serialize)]
struct SkippedAnswer<'a> {
    table: &'a TableName,
    #[serde(flatten)]
    channel: ChannelFields<'a>,
    replayed: bool,
}

fn rows(r: &RowsReceipt) -> RowsAnswer<'_> {
    RowsAnswer {
        load_id: r.load_id,
        table: &r.table,
        mode: r.mode,
        ds: r.ds,
        partitions: &r.partitions,
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
            .map(|c| ChannelFields::committed(&c.name, &c.offset)),
        table_created: r.table_created,
        replayed: false,
    }
}

/// The answer to a replay of rejects.
#[derive(Serialize)]
struct ReplayAnswer<'a> {
    load_id: Uuid,
    table: &'a str,
    mode: &'static str,
    tried: u64,
    rows_replayed: u64,
    still_pending: u64,
    expired: u64,
    more_pending: bool,
    rows_written: u64,
    inserted: u64,
    updated: u64,
    unchanged: u64,
    #[serde(skip_serializing_if = "is_zero")]
    history_written: u64,
    duplicates: u64,
    partitions: &'a [PartitionAfter],
    changed: bool,
    replayed: bool,
}

fn replay(r: &ReplayReceipt) -> ReplayAnswer<'_> {
    ReplayAnswer {
        load_id: r.load_id,
        table: &r.table,
        mode: r.mode,
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
        partitions: &r.partitions,
        changed: r.changed,
        replayed: false,
    }
}
