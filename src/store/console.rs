//! What only the web console reads or writes: its sessions
//! (`idem.console_sessions`), and the counts its pages show beside the
//! lists the API already has (a table's last published and last refused
//! load, its pending rejects by error column, its held duplicates, the
//! span of its partitions).
//!
//! Counts that could be large are capped (`COUNT_CAP`): a page shows
//! "10,000+" rather than count a million rows on every view.

use chrono::{DateTime, Utc};
use sqlx::Row;
use uuid::Uuid;

use super::{Store, StoreError, StoreResult};
use crate::names::TableName;
use crate::wire::status::LoadStatus;

/// The most rows a count on a page goes to before it says "more".
pub const COUNT_CAP: i64 = 10_000;

/// The most error columns the rejects page groups a table's rejects by.
pub const MAX_ERROR_GROUPS: i64 = 50;

/// A signed-in session, as the store keeps it.
pub struct SessionRow {
    /// The SHA-256 of the token the session signed in with.
    pub token_sha256: [u8; 32],
}

/// A load as a table's activity names it: its id, status and end.
#[derive(Clone, Debug)]
pub struct LoadMark {
    pub id: Uuid,
    pub status: LoadStatus,
    pub at: DateTime<Utc>,
}

/// A table's state beside its definition, for the console's pages.
#[derive(Clone, Debug, Default)]
pub struct TableActivity {
    /// The newest load that was taken (`published`, or `unchanged`).
    pub last_published: Option<LoadMark>,
    /// The newest load that was refused (`rejected`, `failed`,
    /// `audit_failed`): apart, since one refused after a publish leaves
    /// the table as that publish made it.
    pub last_refused: Option<LoadMark>,
    /// Pending rejects, up to `COUNT_CAP + 1`.
    pub pending_rejects: i64,
    /// Logged duplicate versions of published loads, up to `COUNT_CAP + 1`.
    pub duplicates: i64,
}

/// The pending rejects of one error column (`""` for a row's own error,
/// such as malformed JSON): how many (up to `COUNT_CAP + 1`) and the first
/// one's message.
#[derive(Clone, Debug)]
pub struct ErrorGroup {
    pub column: String,
    pub count: i64,
    pub example: String,
}

/// The load of a row of `table_activity` whose columns start with
/// `prefix`, if it names one.
fn load_mark(row: &sqlx::postgres::PgRow, prefix: &str) -> StoreResult<Option<LoadMark>> {
    let id: Option<Uuid> = row.try_get(format!("{prefix}_id").as_str())?;
    let Some(id) = id else {
        return Ok(None);
    };
    Ok(Some(LoadMark {
        id,
        status: row.try_get(format!("{prefix}_status").as_str())?,
        at: row.try_get(format!("{prefix}_at").as_str())?,
    }))
}

/// A row of `table_activity`.
fn activity(row: &sqlx::postgres::PgRow) -> StoreResult<TableActivity> {
    Ok(TableActivity {
        last_published: load_mark(row, "published")?,
        last_refused: load_mark(row, "refused")?,
        pending_rejects: row.try_get("pending")?,
        duplicates: row.try_get("duplicates")?,
    })
}

impl Store {
    /// Keeps a new session for `ttl_secs`, and drops the expired ones.
    pub async fn create_session(
        &self,
        session_sha256: &[u8; 32],
        token_sha256: &[u8; 32],
        ttl_secs: i64,
    ) -> StoreResult<()> {
        let mut conn = self.acquire().await?;
        // language=PostgreSQL
        sqlx::query("delete from idem.console_sessions where expires_at < now()")
            .execute(&mut *conn)
            .await?;
        // language=PostgreSQL
        sqlx::query(
            "insert into idem.console_sessions (session_sha256, token_sha256, expires_at)
             values ($1, $2, now() + $3 * interval '1 second')",
        )
        .bind(&session_sha256[..])
        .bind(&token_sha256[..])
        .bind(ttl_secs)
        .execute(&mut *conn)
        .await?;
        Ok(())
    }

    /// The session whose secret hashes to `session_sha256`, unless it ended
    /// or expired.
    pub async fn session(&self, session_sha256: &[u8; 32]) -> StoreResult<Option<SessionRow>> {
        // language=PostgreSQL
        let row = sqlx::query(
            "select token_sha256 from idem.console_sessions
              where session_sha256 = $1 and expires_at > now()",
        )
        .bind(&session_sha256[..])
        .fetch_optional(&mut *self.acquire().await?)
        .await?;
        let Some(row) = row else {
            return Ok(None);
        };
        let token: Vec<u8> = row.try_get("token_sha256")?;
        Ok(Some(SessionRow {
            token_sha256: token
                .try_into()
                .map_err(|_| StoreError::Corrupt("a session's token digest is not 32 bytes"))?,
        }))
    }

    /// Ends a session (sign-out); nothing when it is gone already.
    pub async fn end_session(&self, session_sha256: &[u8; 32]) -> StoreResult<()> {
        // language=PostgreSQL
        sqlx::query("delete from idem.console_sessions where session_sha256 = $1")
            .bind(&session_sha256[..])
            .execute(&mut *self.acquire().await?)
            .await?;
        Ok(())
    }

    /// Each table's last published and last refused load and its capped
    /// counts of pending rejects and logged duplicates, each read by an
    /// index: one statement for a page of tables, in the order of
    /// `tables`. The last published load is found by walking the table's
    /// loads from the newest past the refused ones (few, as a rule); the
    /// last refused by an index of refused loads alone, since a table may
    /// have been published a million times since.
    pub async fn table_activity(&self, tables: &[&TableName]) -> StoreResult<Vec<TableActivity>> {
        let names: Vec<&str> = tables.iter().map(|t| t.as_str()).collect();
        // language=PostgreSQL
        let rows = sqlx::query(
            "select p.load_id as published_id, p.status as published_status,
                    p.finished_at as published_at,
                    r.load_id as refused_id, r.status as refused_status,
                    r.finished_at as refused_at,
                    (select count(*) from (select 1 from idem.rejects r
                      where r.table_name = t.name and r.status = 'pending' limit $2) c) as pending,
                    (select count(*) from (select 1 from idem.duplicates d
                      where d.table_name = t.name limit $2) c) as duplicates
               from unnest($1::text[]) with ordinality as t(name, place)
               left join lateral (select load_id, status, finished_at from idem.loads
                                   where table_name = t.name and status in ('published', 'unchanged')
                                   order by load_id desc limit 1) p on true
               left join lateral (select load_id, status, finished_at from idem.loads
                                   where table_name = t.name
                                     and status in ('rejected', 'failed', 'audit_failed')
                                   order by load_id desc limit 1) r on true
              order by t.place",
        )
        .bind(&names)
        .bind(COUNT_CAP + 1)
        .fetch_all(&mut *self.acquire().await?)
        .await?;
        rows.iter().map(activity).collect()
    }

    /// The first and last partition labels of a table, if it has any.
    pub async fn partition_span(&self, table: &TableName) -> StoreResult<Option<(String, String)>> {
        // language=PostgreSQL
        let row = sqlx::query(
            "select (select ds from idem.partitions where table_name = $1 and ds <> ''
                      order by ds limit 1) as first,
                    (select ds from idem.partitions where table_name = $1 and ds <> ''
                      order by ds desc limit 1) as last",
        )
        .bind(table.as_str())
        .fetch_one(&mut *self.acquire().await?)
        .await?;
        let first: Option<String> = row.try_get("first")?;
        let last: Option<String> = row.try_get("last")?;
        Ok(first.zip(last))
    }

    /// The table's pending rejects grouped by their first error's column:
    /// the columns found by skipping through `rejects_by_error` (one index
    /// probe each), then a capped count of each. The count is ordered as
    /// that index is, so that it reads the index: unordered, the planner
    /// took a sequential scan for a limit of 10,001 (115 ms at 1,000,000
    /// rejects, bench/console.sh).
    pub async fn reject_groups(&self, table: &TableName) -> StoreResult<Vec<ErrorGroup>> {
        // language=PostgreSQL
        let rows = sqlx::query(
            "with recursive columns(name) as (
                 (select coalesce(errors -> 0 ->> 'column', '') from idem.rejects
                   where table_name = $1 and status = 'pending'
                   order by coalesce(errors -> 0 ->> 'column', '') limit 1)
                 union all
                 select (select coalesce(errors -> 0 ->> 'column', '') from idem.rejects
                          where table_name = $1 and status = 'pending'
                            and coalesce(errors -> 0 ->> 'column', '') > columns.name
                          order by coalesce(errors -> 0 ->> 'column', '') limit 1)
                   from columns where columns.name is not null
             )
             select c.name,
                    (select count(*) from (select 1 from idem.rejects r
                      where r.table_name = $1 and r.status = 'pending'
                        and coalesce(r.errors -> 0 ->> 'column', '') = c.name
                      order by r.load_id, r.record limit $2) n) as count,
                    (select r.errors -> 0 ->> 'message' from idem.rejects r
                      where r.table_name = $1 and r.status = 'pending'
                        and coalesce(r.errors -> 0 ->> 'column', '') = c.name
                      order by r.load_id, r.record limit 1) as example
               from columns c where c.name is not null
              limit $3",
        )
        .bind(table.as_str())
        .bind(COUNT_CAP + 1)
        .bind(MAX_ERROR_GROUPS)
        .fetch_all(&mut *self.acquire().await?)
        .await?;
        rows.iter()
            .map(|row| {
                Ok(ErrorGroup {
                    column: row.try_get("name")?,
                    count: row.try_get("count")?,
                    example: row
                        .try_get::<Option<String>, _>("example")?
                        .unwrap_or_default(),
                })
            })
            .collect()
    }
}
