//! The receipts of writes (see the README): a day's PUT, a POST of rows
//! (and, on a channel whose offset was committed already, the answer that
//! wrote nothing), a replay of rejects, and a table's drop. An unkeyed PUT
//! is answered with `PutReceipt` as it serializes, its fields in the order
//! below; a keyed write's answer is stored and sent as a JSON value
//! (`KeyedReceipt`), its members in name order.

use serde::{Deserialize, Serialize};

use super::loads::LoadReceipt;
use super::{is_false, is_zero};
use crate::ids::LoadId;
use crate::names::TableName;
use crate::period::Period;
use crate::schema::MergeMode;

/// The answer to an accepted PUT of one partition.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PutReceipt {
    pub load_id: LoadId,
    pub table: TableName,
    pub ds: Period,
    pub mode: String,
    pub rows_received: u64,
    pub rows_written: u64,
    pub duplicates: u64,
    pub rejected: u64,
    /// Where the rejected rows are listed (absent when none).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rejects: Option<String>,
    #[serde(default, skip_serializing_if = "is_zero")]
    pub discarded_fields: u64,
    pub row_count: u64,
    pub content_sha256: String,
    pub changed: bool,
    /// The write made the table, nobody having declared it (absent
    /// otherwise): a typo in a table's name shows here.
    #[serde(default, skip_serializing_if = "is_false")]
    pub table_created: bool,
    pub replayed: bool,
}

/// A partition a POST (or a replay) wrote to, and how its row count moved.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PartitionDelta {
    pub ds: Period,
    /// Rows inserted minus rows deleted.
    pub row_delta: i64,
}

/// The answer to an accepted POST of rows.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RowsReceipt {
    pub load_id: LoadId,
    pub table: TableName,
    pub mode: MergeMode,
    pub ds: Option<Period>,
    pub partitions: Vec<PartitionDelta>,
    pub rows_received: u64,
    pub rows_written: u64,
    pub inserted: u64,
    pub updated: u64,
    pub deleted: u64,
    pub unchanged: u64,
    pub already_present: u64,
    pub conflicts: u64,
    /// Versions written to the table's history (absent when none).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub history_written: u64,
    pub duplicates: u64,
    pub rejected: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rejects: Option<String>,
    #[serde(default, skip_serializing_if = "is_zero")]
    pub discarded_fields: u64,
    pub changed: bool,
    /// A POST on a channel: the offset it committed.
    #[serde(flatten)]
    pub channel: Option<ChannelFields>,
    /// As in `PutReceipt`.
    #[serde(default, skip_serializing_if = "is_false")]
    pub table_created: bool,
    pub replayed: bool,
}

/// A channel POST's fields in its answer; offsets are strings, since an
/// integer offset or an LSN may not fit a JSON number as JavaScript reads it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChannelFields {
    pub channel: String,
    pub offset: String,
    pub offset_kind: String,
    /// Whether this POST committed its offset (and wrote its rows).
    pub committed: bool,
    /// The channel's offset after this POST.
    pub committed_offset: String,
}

/// The answer to a POST on a channel whose offset was committed already:
/// nothing was written.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SkippedReceipt {
    pub table: TableName,
    #[serde(flatten)]
    pub channel: ChannelFields,
    pub replayed: bool,
}

/// The answer to a PUT of a partition: a day's receipt, or, for a PUT that
/// is a load of its own (audited, a dry run, a whole table), the load's.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum PutAnswer {
    Day(PutReceipt),
    Load(LoadReceipt),
}

impl PutAnswer {
    pub fn load_id(&self) -> LoadId {
        match self {
            PutAnswer::Day(r) => r.load_id,
            PutAnswer::Load(r) => r.load_id,
        }
    }

    pub fn changed(&self) -> bool {
        match self {
            PutAnswer::Day(r) => r.changed,
            PutAnswer::Load(r) => r.changed,
        }
    }

    /// Rows in the target after the write.
    pub fn row_count(&self) -> u64 {
        match self {
            PutAnswer::Day(r) => r.row_count,
            PutAnswer::Load(r) => r.row_count,
        }
    }
}

/// The answer to a POST of rows: what it wrote, or (on a channel) that its
/// offset was committed before.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum PostAnswer {
    Rows(RowsReceipt),
    Skipped(SkippedReceipt),
}

impl PostAnswer {
    /// A POST on a channel: its offset, and whether it committed it.
    pub fn channel(&self) -> Option<&ChannelFields> {
        match self {
            PostAnswer::Rows(r) => r.channel.as_ref(),
            PostAnswer::Skipped(r) => Some(&r.channel),
        }
    }

    /// The rows the body held (none, for a skip).
    pub fn rows_received(&self) -> u64 {
        match self {
            PostAnswer::Rows(r) => r.rows_received,
            PostAnswer::Skipped(_) => 0,
        }
    }
}

/// The answer to a replay of rejects.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReplayReceipt {
    pub load_id: LoadId,
    pub table: String,
    pub mode: String,
    pub tried: u64,
    pub rows_replayed: u64,
    pub still_pending: u64,
    pub expired: u64,
    pub more_pending: bool,
    pub rows_written: u64,
    pub inserted: u64,
    pub updated: u64,
    pub unchanged: u64,
    #[serde(default, skip_serializing_if = "is_zero")]
    pub history_written: u64,
    pub duplicates: u64,
    pub partitions: Vec<PartitionDelta>,
    pub changed: bool,
    pub replayed: bool,
}

/// What a keyed write stores under its Idempotency-Key and answers (again):
/// the receipt of a PUT, a POST, a replay of rejects, or a channel's skip.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum KeyedReceipt {
    Put(PutReceipt),
    Rows(RowsReceipt),
    Replay(ReplayReceipt),
    Skipped(SkippedReceipt),
}

impl KeyedReceipt {
    /// The table written to.
    pub fn table(&self) -> &str {
        match self {
            KeyedReceipt::Put(r) => &r.table,
            KeyedReceipt::Rows(r) => &r.table,
            KeyedReceipt::Replay(r) => &r.table,
            KeyedReceipt::Skipped(r) => &r.table,
        }
    }

    /// The one partition written, when the receipt names one.
    pub fn ds(&self) -> Option<Period> {
        match self {
            KeyedReceipt::Put(r) => Some(r.ds),
            KeyedReceipt::Rows(r) => r.ds,
            KeyedReceipt::Replay(_) | KeyedReceipt::Skipped(_) => None,
        }
    }

    /// Whether the write changed the table (a skip says nothing).
    pub fn changed(&self) -> Option<bool> {
        match self {
            KeyedReceipt::Put(r) => Some(r.changed),
            KeyedReceipt::Rows(r) => Some(r.changed),
            KeyedReceipt::Replay(r) => Some(r.changed),
            KeyedReceipt::Skipped(_) => None,
        }
    }

    /// The rows the write wrote (a skip says nothing).
    pub fn rows_written(&self) -> Option<u64> {
        match self {
            KeyedReceipt::Put(r) => Some(r.rows_written),
            KeyedReceipt::Rows(r) => Some(r.rows_written),
            KeyedReceipt::Replay(r) => Some(r.rows_written),
            KeyedReceipt::Skipped(_) => None,
        }
    }
}

/// The answer to `DELETE /tables/{table}` that dropped a table: its load
/// in the ledger, and what went with the table besides its rows.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct DropReceipt {
    pub load_id: LoadId,
    pub table: TableName,
    pub mode: String,
    /// Idempotency-Keys of the table's loads: the same request sent again
    /// writes again.
    pub idempotency_keys_removed: u64,
    /// Channels whose last commit wrote to the table: their producers
    /// start over from the beginning.
    pub channels_removed: u64,
    /// Loads still open on the table, abandoned.
    pub loads_abandoned: u64,
    pub changed: bool,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn put() -> PutReceipt {
        PutReceipt {
            load_id: LoadId::NONE,
            table: TableName::parse("orders").unwrap(),
            ds: Period::parse_any("2026-10-12").unwrap(),
            mode: "replace".into(),
            rows_received: 3,
            rows_written: 1,
            duplicates: 0,
            rejected: 2,
            rejects: Some("/rejects?table=orders&load_id=L".into()),
            discarded_fields: 0,
            row_count: 1,
            content_sha256: "ab".repeat(32),
            changed: true,
            table_created: false,
            replayed: false,
        }
    }

    fn rows(channel: Option<ChannelFields>) -> RowsReceipt {
        RowsReceipt {
            load_id: LoadId::NONE,
            table: TableName::parse("orders").unwrap(),
            mode: MergeMode::Merge,
            ds: None,
            partitions: vec![PartitionDelta {
                ds: Period::parse_any("2026-10-12").unwrap(),
                row_delta: 2,
            }],
            rows_received: 2,
            rows_written: 2,
            inserted: 2,
            updated: 0,
            deleted: 0,
            unchanged: 0,
            already_present: 0,
            conflicts: 0,
            history_written: 0,
            duplicates: 0,
            rejected: 0,
            rejects: None,
            discarded_fields: 4,
            changed: true,
            channel,
            table_created: true,
            replayed: false,
        }
    }

    fn feed() -> ChannelFields {
        ChannelFields {
            channel: "feed".into(),
            offset: "7".into(),
            offset_kind: "integer".into(),
            committed: false,
            committed_offset: "9".into(),
        }
    }

    #[test]
    fn a_receipt_skips_what_is_zero_false_or_none_and_reads_back_the_same() {
        let text = serde_json::to_string(&put()).unwrap();
        assert!(!text.contains("discarded_fields") && !text.contains("table_created"));
        assert!(text.starts_with(r#"{"load_id":"00000000-0000-0000-0000-000000000000","table":"orders","ds":"2026-10-12","mode":"replace","#), "{text}");
        assert_eq!(serde_json::from_str::<PutReceipt>(&text).unwrap(), put());
        for receipt in [rows(None), rows(Some(feed()))] {
            let text = serde_json::to_string(&receipt).unwrap();
            assert!(!text.contains("history_written") && !text.contains("rejects"));
            assert_eq!(serde_json::from_str::<RowsReceipt>(&text).unwrap(), receipt);
        }
    }

    #[test]
    fn each_stored_receipt_reads_back_as_its_own_kind() {
        let skipped = SkippedReceipt {
            table: TableName::parse("orders").unwrap(),
            channel: feed(),
            replayed: true,
        };
        let text = serde_json::to_string(&skipped).unwrap();
        assert_eq!(
            text,
            r#"{"table":"orders","channel":"feed","offset":"7","offset_kind":"integer","committed":false,"committed_offset":"9","replayed":true}"#
        );
        fn stored(receipt: impl Serialize) -> KeyedReceipt {
            serde_json::from_value(serde_json::to_value(receipt).unwrap()).unwrap()
        }
        assert_eq!(stored(put()), KeyedReceipt::Put(put()));
        assert_eq!(
            stored(rows(Some(feed()))),
            KeyedReceipt::Rows(rows(Some(feed())))
        );
        assert_eq!(stored(&skipped), KeyedReceipt::Skipped(skipped.clone()));
        let answer: PostAnswer = serde_json::from_str(&text).unwrap();
        assert_eq!(answer, PostAnswer::Skipped(skipped));
        assert_eq!(stored(put()).ds().unwrap().label(), "2026-10-12");
        assert_eq!(stored(rows(None)).rows_written(), Some(2));
    }
}
