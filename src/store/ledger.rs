//! The loads ledger: what each write received, wrote, dropped and refused.

use chrono::{DateTime, NaiveDate, Utc};
use serde::Serialize;
use sqlx::PgConnection;
use uuid::Uuid;

use super::Store;
use crate::error::ApiResult;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum LoadStatus {
    Published,
    Unchanged,
    Rejected,
    Failed,
}

impl LoadStatus {
    fn as_str(self) -> &'static str {
        match self {
            LoadStatus::Published => "published",
            LoadStatus::Unchanged => "unchanged",
            LoadStatus::Rejected => "rejected",
            LoadStatus::Failed => "failed",
        }
    }
}

/// One ledger row.
#[derive(Clone, Debug, Serialize, sqlx::FromRow)]
pub struct Load {
    pub load_id: Uuid,
    #[sqlx(rename = "table_name")]
    #[serde(rename = "table")]
    pub table_name: String,
    pub ds: Option<NaiveDate>,
    pub mode: String,
    pub status: String,
    pub rows_received: i64,
    pub rows_written: i64,
    pub duplicates: i64,
    pub rejected: i64,
    pub content_sha256: Option<String>,
    pub changed: bool,
    pub idempotency_key: Option<String>,
    pub error: Option<serde_json::Value>,
    pub started_at: DateTime<Utc>,
    pub finished_at: DateTime<Utc>,
}

/// What a finished load reports to the ledger.
pub struct LoadEntry<'a> {
    pub load_id: Uuid,
    pub table: &'a str,
    pub ds: Option<NaiveDate>,
    pub mode: &'a str,
    pub status: LoadStatus,
    pub rows_received: u64,
    pub rows_written: u64,
    pub duplicates: u64,
    pub rejected: u64,
    pub content_sha256: Option<&'a str>,
    pub changed: bool,
    pub idempotency_key: Option<&'a str>,
    pub error: Option<serde_json::Value>,
    pub started_at: DateTime<Utc>,
}

pub async fn record_load(
    conn: &mut PgConnection,
    entry: &LoadEntry<'_>,
) -> Result<(), sqlx::Error> {
    // language=PostgreSQL
    sqlx::query(
        "insert into idem.loads (load_id, table_name, ds, mode, status, rows_received, rows_written,
                                 duplicates, rejected, content_sha256, changed, error, started_at,
                                 idempotency_key)
         values ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14)",
    )
    .bind(entry.load_id)
    .bind(entry.table)
    .bind(entry.ds)
    .bind(entry.mode)
    .bind(entry.status.as_str())
    .bind(entry.rows_received as i64)
    .bind(entry.rows_written as i64)
    .bind(entry.duplicates as i64)
    .bind(entry.rejected as i64)
    .bind(entry.content_sha256)
    .bind(entry.changed)
    .bind(&entry.error)
    .bind(entry.started_at)
    .bind(entry.idempotency_key)
    .execute(conn)
    .await
    .map(|_| ())
}

impl Store {
    /// Records a load outside any other transaction (refusals and failures).
    pub async fn record_load(&self, entry: &LoadEntry<'_>) -> ApiResult<()> {
        let mut conn = self.pool().acquire().await?;
        record_load(&mut conn, entry).await?;
        Ok(())
    }

    pub async fn load(&self, load_id: Uuid) -> ApiResult<Option<Load>> {
        Ok(
            sqlx::query_as("select * from idem.loads where load_id = $1")
                .bind(load_id)
                .fetch_optional(self.pool())
                .await?,
        )
    }

    /// The newest loads first, optionally of one table and partition.
    pub async fn loads(
        &self,
        table: Option<&str>,
        ds: Option<NaiveDate>,
        limit: i64,
    ) -> ApiResult<Vec<Load>> {
        // language=PostgreSQL
        Ok(sqlx::query_as(
            "select * from idem.loads
              where ($1::text is null or table_name = $1) and ($2::date is null or ds = $2)
              order by started_at desc, load_id desc
              limit $3",
        )
        .bind(table)
        .bind(ds)
        .bind(limit)
        .fetch_all(self.pool())
        .await?)
    }
}
