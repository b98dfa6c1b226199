//! A reject as `GET /rejects` lists it (a row a `quarantine` policy kept,
//! as it was sent, with why), and what `DELETE /rejects` deleted.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use super::status::RejectStatus;
use crate::ids::LoadId;
use crate::ingest::reject_spool::Problem;
use crate::names::TableName;

/// A stored reject.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RejectView {
    pub table: String,
    pub load_id: LoadId,
    pub record: u64,
    pub line: u64,
    pub ds: Option<String>,
    /// The kind of write that refused it (`put`, `post`).
    pub origin: String,
    /// A POST's mode, which a replay writes it by.
    pub mode: Option<String>,
    pub format: String,
    /// The record as sent, when it is UTF-8 (see `raw_base64`); `null` when
    /// it was too large to keep.
    pub raw: Option<String>,
    /// The record as sent, base64, when it is not UTF-8.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub raw_base64: Option<String>,
    /// The CSV header the record was read under.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub csv_header: Option<String>,
    pub errors: Vec<Problem>,
    pub idempotency_key: Option<String>,
    pub received_at: DateTime<Utc>,
    pub tries: u32,
    pub status: RejectStatus,
    pub replayed_by: Option<LoadId>,
    pub last_tried_at: DateTime<Utc>,
}

/// The answer to `DELETE /rejects`: how many of the table's rejects in one
/// status went (fields in name order: it is answered as a JSON value).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeletedRejects {
    pub deleted: u64,
    pub status: RejectStatus,
    pub table: TableName,
}
