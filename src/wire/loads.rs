//! Loads of several partitions: the requests that open and publish a staged
//! load (`POST /loads`, `POST /loads/{id}/publish`), a staged load as it is
//! shown, a part's receipt, the receipt of a load (a publish, a range or
//! whole-table PUT, a dry run or an audit), and a load as the ledger has it
//! (`GET /loads`).

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use super::status::{LoadStatus, ReceiptStatus, StagedStatus};
use crate::ids::LoadId;
use crate::ids::TokenId;
use crate::names::TableName;
use crate::period::Period;
use crate::schema::AuditReport;

/// What a load replaces, as `POST /loads` names it: partitions by their
/// labels, a range of them (both ends included), or the whole table.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Target {
    Partitions(Vec<String>),
    Range {
        from: String,
        to: String,
    },
    /// Always `true`: `{"table": true}`.
    Table(bool),
}

impl Target {
    /// The whole table.
    pub const TABLE: Target = Target::Table(true);

    /// As a request carries it (and the server keeps it).
    pub fn to_value(&self) -> serde_json::Value {
        serde_json::to_value(self).expect("a target serializes")
    }
}

/// The body of `POST /loads`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OpenRequest {
    pub table: String,
    /// A `Target`, which the server reads as it was sent, to say what is
    /// wrong with it.
    pub target: serde_json::Value,
    /// Audits over the table's own (`schema::Audits`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub audits: Option<serde_json::Value>,
    /// How long it stays open (`IDEM_LOAD_TTL` when absent).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ttl_seconds: Option<u64>,
}

/// The body of `POST /loads/{id}/publish` (none: a plain publish).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PublishRequest {
    /// Publish despite failed audits (an admin's), for `reason`.
    #[serde(default)]
    pub force: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

/// A staged load as `GET /loads/{id}` (and its opening, and its
/// abandonment) shows it. Its fields are in name order, as it has always
/// been answered.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct LoadView {
    /// The latest audit's report, as kept.
    pub audit_report: Option<serde_json::Value>,
    /// The load's own audits, as kept.
    pub audits: serde_json::Value,
    pub created_at: DateTime<Utc>,
    pub expires_at: DateTime<Utc>,
    /// Who published it despite failed audits, and why.
    pub forced: Option<serde_json::Value>,
    pub load_id: LoadId,
    /// Rows staged per partition, over every part.
    pub partitions: BTreeMap<String, u64>,
    pub parts: Vec<PartView>,
    /// Its publish's receipt, once published.
    pub receipt: Option<serde_json::Value>,
    pub status: StagedStatus,
    pub table: String,
    /// As `Target` says it.
    pub target: serde_json::Value,
}

/// A staged part in a `LoadView` (name order too).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PartView {
    pub content_sha256: String,
    pub part: i32,
    pub rejected: u64,
    pub rows: u64,
    pub rows_received: u64,
    pub uploaded_at: DateTime<Utc>,
}

/// What a part upload did (`PUT /loads/{id}/parts/{n}`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PartReceipt {
    pub load_id: LoadId,
    pub part: u32,
    pub rows_received: u64,
    pub rows_staged: u64,
    pub rejected: u64,
    pub discarded_fields: u64,
    pub content_sha256: String,
    /// False when part `n` already held these rows.
    pub changed: bool,
    /// Rows per partition.
    pub partitions: BTreeMap<String, u64>,
}

/// What a load of several partitions did (or, in a dry run, would do).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct LoadReceipt {
    pub load_id: LoadId,
    pub table: TableName,
    /// `load` (a staged load), `replace_range`, `replace_table`.
    pub mode: String,
    /// The one partition of a one-partition load.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ds: Option<Period>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub from: Option<Period>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub to: Option<Period>,
    pub status: ReceiptStatus,
    pub partitions: Vec<PartitionReceipt>,
    pub rows_received: u64,
    pub rows_written: u64,
    pub duplicates: u64,
    pub rejected: u64,
    pub discarded_fields: u64,
    /// Rows in the target after the load.
    pub row_count: u64,
    pub content_sha256: String,
    pub changed: bool,
    pub dry_run: bool,
    pub audit: Option<AuditReport>,
    pub forced: Option<serde_json::Value>,
    /// A publish's answer only: whether it is the receipt an earlier
    /// publish stored (absent from a PUT's, and from the stored receipt).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replayed: Option<bool>,
}

/// One target partition in a receipt (`ds` null for a plain table).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PartitionReceipt {
    pub ds: Option<String>,
    pub rows_written: u64,
    pub row_count: u64,
    pub content_sha256: String,
    pub changed: bool,
    pub dropped: bool,
}

/// A load as the ledger has it (`GET /loads`, and `GET /loads/{id}` once
/// it is no staged load).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct LedgerLoad {
    pub load_id: LoadId,
    pub table: String,
    pub ds: Option<String>,
    pub mode: String,
    pub status: LoadStatus,
    pub rows_received: i64,
    pub rows_written: i64,
    pub duplicates: i64,
    pub rejected: i64,
    pub content_sha256: Option<String>,
    pub changed: bool,
    pub idempotency_key: Option<String>,
    /// A refusal's or failure's problem (its `code`, and what it carried).
    pub error: Option<serde_json::Value>,
    pub started_at: DateTime<Utc>,
    pub finished_at: DateTime<Utc>,
    /// `finished_at - started_at`, in whole milliseconds.
    pub duration_ms: i64,
    /// The token that made the load (none for the bootstrap admin token).
    pub token_id: Option<TokenId>,
    pub token_name: Option<String>,
    /// The drop (`DELETE /tables/{table}`) that removed what this load
    /// wrote; none while its table stands.
    pub dropped_by: Option<LoadId>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_view_answered_as_a_json_value_has_its_fields_in_name_order() {
        let at = DateTime::parse_from_rfc3339("2026-10-12T10:00:00.123456Z")
            .unwrap()
            .with_timezone(&Utc);
        let view = LoadView {
            audit_report: None,
            audits: serde_json::json!({}),
            created_at: at,
            expires_at: at,
            forced: None,
            load_id: LoadId::NONE,
            partitions: BTreeMap::from([("2026-10-12".to_string(), 3)]),
            parts: vec![PartView {
                content_sha256: "ab".into(),
                part: 1,
                rejected: 0,
                rows: 3,
                rows_received: 3,
                uploaded_at: at,
            }],
            receipt: None,
            status: StagedStatus::Open,
            table: "orders".into(),
            target: Target::Range {
                from: "2026-10-12".into(),
                to: "2026-10-13".into(),
            }
            .to_value(),
        };
        let text = serde_json::to_string(&view).unwrap();
        assert_eq!(text, serde_json::to_value(&view).unwrap().to_string());
        assert_eq!(serde_json::from_str::<LoadView>(&text).unwrap(), view);
    }

    #[test]
    fn requests_say_what_the_server_reads() {
        assert_eq!(Target::TABLE.to_value().to_string(), r#"{"table":true}"#);
        let days = Target::Partitions(vec!["2026-10-01".into()]);
        assert_eq!(
            days.to_value().to_string(),
            r#"{"partitions":["2026-10-01"]}"#
        );
        let open = OpenRequest {
            table: "orders".into(),
            target: days.to_value(),
            audits: None,
            ttl_seconds: None,
        };
        let text = serde_json::to_string(&open).unwrap();
        assert_eq!(
            text,
            r#"{"table":"orders","target":{"partitions":["2026-10-01"]}}"#
        );
        assert!(serde_json::from_str::<OpenRequest>(r#"{"table":"t","target":1,"x":1}"#).is_err());
        let force = PublishRequest {
            force: true,
            reason: Some("late".into()),
        };
        let text = serde_json::to_string(&force).unwrap();
        assert_eq!(text, r#"{"force":true,"reason":"late"}"#);
        assert_eq!(
            serde_json::from_str::<PublishRequest>("{}").unwrap(),
            PublishRequest::default()
        );
    }
}
