//! `idem.duplicates`, the log of the versions a load did not write (see
//! `write::duplicates`, which writes it): its pages as listed, and the cursor
//! that walks them. A version is listed only once its load is in the ledger
//! as published or unchanged.

use chrono::{DateTime, Utc};
use serde::Serialize;

use crate::ids::LoadId;
use crate::names::TableName;
use crate::store::{Store, StoreResult};

/// The log.
pub const LOG_TABLE: &str = "idem.duplicates";

/// A logged version, as listed.
#[derive(Clone, Debug, Serialize, sqlx::FromRow)]
pub struct LoggedVersion {
    #[sqlx(rename = "table_name")]
    pub table: String,
    pub load_id: LoadId,
    /// None for a plain table (its one partition is stored as `''`).
    pub ds: Option<String>,
    /// The key's row id, hex.
    pub row_id: String,
    pub key: sqlx::types::Json<serde_json::Value>,
    pub version: i32,
    pub row: sqlx::types::Json<serde_json::Value>,
    pub row_hash: String,
    /// The row hash of the version written instead (`keep_one`).
    pub kept_row_hash: Option<String>,
    pub policy: String,
    pub logged_at: DateTime<Utc>,
}

/// Where a page of the log starts: after this version.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LogCursor {
    pub load_id: LoadId,
    pub row_id: Vec<u8>,
    pub version: i32,
}

impl LogCursor {
    pub fn of(v: &LoggedVersion) -> Self {
        LogCursor {
            load_id: v.load_id,
            row_id: hex::decode(&v.row_id).unwrap_or_default(),
            version: v.version,
        }
    }

    pub fn text(&self) -> String {
        format!(
            "{}.{}.{}",
            self.load_id,
            hex::encode(&self.row_id),
            self.version
        )
    }

    pub fn parse(text: &str) -> Option<Self> {
        let mut parts = text.split('.');
        let cursor = LogCursor {
            load_id: parts.next()?.parse().ok()?,
            row_id: hex::decode(parts.next()?).ok()?,
            version: parts.next()?.parse().ok()?,
        };
        parts.next().is_none().then_some(cursor)
    }
}

impl Store {
    /// A page of the log, oldest load first, then by key and version.
    pub async fn duplicates(
        &self,
        table: Option<&TableName>,
        load_id: Option<LoadId>,
        visible: &[String],
        after: Option<&LogCursor>,
        limit: i64,
    ) -> StoreResult<Vec<LoggedVersion>> {
        // language=PostgreSQL
        let rows = sqlx::query_as(
            "select table_name, load_id, nullif(ds, '') as ds, encode(row_id, 'hex') as row_id, key, version, row,
                    encode(row_hash, 'hex') as row_hash, encode(kept_row_hash, 'hex') as kept_row_hash,
                    policy, logged_at
               from idem.duplicates d
              where ($1::text is null or table_name = $1) and ($2::uuid is null or load_id = $2)
                and ($3::uuid is null or (load_id, row_id, version) > ($3, $4, $5))
                and table_name like any($7)
                and exists (select from idem.loads l
                             where l.load_id = d.load_id and l.status in ('published', 'unchanged'))
              order by load_id, row_id, version
              limit $6",
        )
        .bind(table.map(TableName::as_str))
        .bind(load_id)
        .bind(after.map(|c| c.load_id))
        .bind(after.map(|c| c.row_id.clone()))
        .bind(after.map(|c| c.version))
        .bind(limit)
        .bind(visible)
        .fetch_all(&mut *self.acquire().await?)
        .await?;
        Ok(rows)
    }
}
