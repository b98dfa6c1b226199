//! A channel as `GET /channels` lists it and `GET /channels/{name}` shows
//! it: the offset it committed last.

use crate::ids::LoadId;
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

/// A channel. Offsets are strings: an integer offset or an LSN may not fit
/// a JSON number as JavaScript reads it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChannelView {
    pub name: String,
    /// `integer`, `lsn` or `text` (`channel::OffsetKind`).
    pub offset_kind: String,
    pub committed_offset: String,
    /// The table and load of the last commit.
    pub table: Option<String>,
    pub load_id: Option<LoadId>,
    pub committed_at: Option<DateTime<Utc>>,
    pub commits: i64,
}
