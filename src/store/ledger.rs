//! The loads ledger: what each write received, wrote, dropped and refused.

use chrono::{DateTime, Utc};
use sqlx::postgres::PgArguments;
use sqlx::query::Query;
use sqlx::{PgConnection, Postgres};
use uuid::Uuid;

use super::{count, Store, StoreResult};
use crate::access::Actor;
use crate::ids::LoadId;
use crate::ids::TokenId;
use crate::names::TableName;
use crate::period::Period;
/// A ledger row's status is the wire's.
pub use crate::wire::status::LoadStatus;

/// One ledger row.
#[derive(Clone, Debug, sqlx::FromRow)]
pub struct Load {
    pub load_id: LoadId,
    #[sqlx(rename = "table_name")]
    pub table_name: String,
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

/// Every column of a ledger row, and its duration.
// language=PostgreSQL
pub(super) const LOAD_COLUMNS: &str =
    "load_id, table_name, ds, mode, status, rows_received, rows_written,
    duplicates, rejected, content_sha256, changed, idempotency_key, error, started_at, finished_at,
    (extract(epoch from finished_at - started_at) * 1000)::bigint as duration_ms,
    token_id, token_name, dropped_by";

/// Which loads a list shows.
pub struct LoadFilter<'a> {
    pub table: Option<&'a TableName>,
    pub ds: Option<Period>,
    pub status: Option<LoadStatus>,
    /// The name of the token that made the load.
    pub token: Option<&'a str>,
    /// `LIKE` patterns of the tables the caller may read.
    pub visible: &'a [String],
}

/// What a finished load reports to the ledger.
#[derive(Clone, Debug)]
pub struct LoadEntry<'a> {
    pub load_id: LoadId,
    pub table: &'a TableName,
    pub ds: Option<Period>,
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
    pub actor: &'a Actor,
}

impl<'a> LoadEntry<'a> {
    /// An entry for a load that has written nothing (yet): the caller sets
    /// what it did.
    pub fn new(
        load_id: LoadId,
        table: &'a TableName,
        ds: Option<Period>,
        mode: &'a str,
        idempotency_key: Option<&'a str>,
        started_at: DateTime<Utc>,
        actor: &'a Actor,
    ) -> Self {
        LoadEntry {
            load_id,
            table,
            ds,
            mode,
            status: LoadStatus::Failed,
            rows_received: 0,
            rows_written: 0,
            duplicates: 0,
            rejected: 0,
            content_sha256: None,
            changed: false,
            idempotency_key,
            error: None,
            started_at,
            actor,
        }
    }
}

/// Writes `entry` in the caller's transaction, so a load is recorded exactly
/// when its rows are.
pub async fn insert(conn: &mut PgConnection, entry: &LoadEntry<'_>) -> StoreResult<()> {
    bind_entries(sqlx::query(&insert_sql(1)), std::slice::from_ref(entry))?
        .execute(conn)
        .await?;
    Ok(())
}

/// The INSERT of ledger rows (one per element of its array parameters),
/// its parameters numbered from `first` (so that it can be part of a
/// larger statement; see `write::closing`).
pub(super) fn insert_sql(first: usize) -> String {
    let types = [
        "uuid",
        "text",
        "text",
        "text",
        "text",
        "bigint",
        "bigint",
        "bigint",
        "bigint",
        "text",
        "boolean",
        "jsonb",
        "timestamptz",
        "text",
        "uuid",
        "text",
    ];
    let arrays = super::sql::array_params(first, &types);
    // The finish is the clock at this statement, not now() (the start of
    // the transaction, which may precede the load's own start). The start is
    // idem's clock and the finish the database's: `greatest` keeps a skew
    // between the two from recording a load that ends before it began.
    // language=PostgreSQL
    format!(
        "insert into idem.loads (load_id, table_name, ds, mode, status, rows_received, rows_written,
                                 duplicates, rejected, content_sha256, changed, error, started_at,
                                 idempotency_key, token_id, token_name, finished_at)
         select *, greatest(clock_timestamp(), l.started_at)
           from unnest({arrays})
                l(load_id, table_name, ds, mode, status, rows_received, rows_written, duplicates,
                  rejected, content_sha256, changed, error, started_at, idempotency_key, token_id,
                  token_name)"
    )
}

/// Binds `entries` to the parameters of `insert_sql`, a column at a time.
pub(super) fn bind_entries<'q>(
    query: Query<'q, Postgres, PgArguments>,
    entries: &[LoadEntry<'_>],
) -> StoreResult<Query<'q, Postgres, PgArguments>> {
    let column = |f: &dyn Fn(&LoadEntry<'_>) -> Option<String>| -> Vec<Option<String>> {
        entries.iter().map(f).collect()
    };
    let counts = |f: &dyn Fn(&LoadEntry<'_>) -> u64| -> StoreResult<Vec<i64>> {
        entries.iter().map(|e| count(f(e))).collect()
    };
    Ok(query
        .bind(entries.iter().map(|e| e.load_id).collect::<Vec<_>>())
        .bind(column(&|e| Some(e.table.as_str().to_string())))
        .bind(column(&|e| e.ds.and_then(|p| p.wire_label())))
        .bind(column(&|e| Some(e.mode.to_string())))
        .bind(column(&|e| Some(e.status.as_str().to_string())))
        .bind(counts(&|e| e.rows_received)?)
        .bind(counts(&|e| e.rows_written)?)
        .bind(counts(&|e| e.duplicates)?)
        .bind(counts(&|e| e.rejected)?)
        .bind(column(&|e| e.content_sha256.map(str::to_string)))
        .bind(entries.iter().map(|e| e.changed).collect::<Vec<_>>())
        .bind(
            entries
                .iter()
                .map(|e| e.error.as_ref().map(without_nul))
                .collect::<Vec<_>>(),
        )
        .bind(entries.iter().map(|e| e.started_at).collect::<Vec<_>>())
        .bind(column(&|e| e.idempotency_key.map(str::to_string)))
        .bind(
            entries
                .iter()
                .map(|e| e.actor.token_id())
                .collect::<Vec<_>>(),
        )
        .bind(column(&|e| Some(e.actor.token_name.clone()))))
}

/// `value` with every NUL character of its strings (keys included) replaced
/// by U+FFFD: a refusal may quote one from a hostile body (a field's name),
/// and Postgres's `jsonb` cannot hold `\u0000`, so the entry would be lost.
fn without_nul(value: &serde_json::Value) -> serde_json::Value {
    use serde_json::Value;
    let clean = |text: &str| text.replace('\0', "\u{FFFD}");
    match value {
        Value::String(text) => Value::String(clean(text)),
        Value::Array(items) => Value::Array(items.iter().map(without_nul).collect()),
        Value::Object(fields) => Value::Object(
            fields
                .iter()
                .map(|(name, field)| (clean(name), without_nul(field)))
                .collect(),
        ),
        other => other.clone(),
    }
}

impl Store {
    /// Records a load outside any other transaction (refusals and failures).
    pub async fn record_load(&self, entry: &LoadEntry<'_>) -> StoreResult<()> {
        let mut conn = self.acquire().await?;
        insert(&mut conn, entry).await
    }

    pub async fn load(&self, load_id: LoadId) -> StoreResult<Option<Load>> {
        Ok(sqlx::query_as(&format!(
            "select {LOAD_COLUMNS} from idem.loads where load_id = $1"
        ))
        .bind(load_id)
        .fetch_optional(&mut *self.acquire().await?)
        .await?)
    }

    /// The newest loads first (load ids are UUIDv7: time-ordered),
    /// optionally of one table and partition, older than `before`, of the
    /// tables `LIKE` one of `visible` (the caller's readable patterns).
    pub async fn loads(
        &self,
        filter: LoadFilter<'_>,
        before: Option<Uuid>,
        limit: i64,
    ) -> StoreResult<Vec<Load>> {
        // language=PostgreSQL
        Ok(sqlx::query_as(&format!(
            "select {LOAD_COLUMNS} from idem.loads
              where ($1::text is null or table_name = $1) and ($2::text is null or ds = $2)
                and ($3::uuid is null or load_id < $3) and table_name like any($5)
                and ($6::text is null or status = $6) and ($7::text is null or token_name = $7)
              order by load_id desc
              limit $4"
        ))
        .bind(filter.table.map(TableName::as_str))
        .bind(filter.ds.map(|p| p.label()))
        .bind(before)
        .bind(limit)
        .bind(filter.visible)
        .bind(filter.status.map(LoadStatus::as_str))
        .bind(filter.token)
        .fetch_all(&mut *self.acquire().await?)
        .await?)
    }
}
