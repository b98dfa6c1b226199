//! `idem.staged_loads` and `idem.load_parts`: loads that outlive a request
//! (`POST /loads`), their status and the parts staged for them.
//!
//! A load is opened once per (principal, Idempotency-Key); its parts wait in
//! stage tables of their own (`write::parts`) until it is published,
//! abandoned or expired. Whoever publishes a load holds its session lock
//! (`locks::load_lock_key`) from the first read of its parts to the commit;
//! a part is registered under the same lock, shared, so a publish never
//! reads a part that is being replaced.

use chrono::{DateTime, Utc};
use sqlx::{PgConnection, Row};

use super::locks::{lock_load_exclusive, try_lock_load};
use super::sql::staging_table;
use super::{stored_count, Store, StoreResult};
use crate::ids::LoadId;
use crate::ids::{Principal, TokenId};
use crate::names::TableName;

/// A staged load's status is the wire's.
pub use crate::wire::status::StagedStatus;

/// A load as opened, before it is stored.
pub struct NewLoad<'a> {
    pub load_id: LoadId,
    pub table: &'a TableName,
    pub target: serde_json::Value,
    pub audits: serde_json::Value,
    pub principal: &'a Principal,
    pub idempotency_key: &'a str,
    pub fingerprint: &'a str,
    pub token_id: Option<TokenId>,
    pub expires_at: DateTime<Utc>,
}

/// A staged load's row.
#[derive(Clone, Debug)]
pub struct StagedLoad {
    pub load_id: LoadId,
    pub table: String,
    pub target: serde_json::Value,
    pub audits: serde_json::Value,
    pub status: StagedStatus,
    pub principal: Principal,
    pub fingerprint: String,
    pub created_at: DateTime<Utc>,
    pub expires_at: DateTime<Utc>,
    pub audit_report: Option<serde_json::Value>,
    pub receipt: Option<serde_json::Value>,
    pub forced: Option<serde_json::Value>,
}

/// One staged part.
#[derive(Clone, Debug)]
pub struct LoadPart {
    pub part: i32,
    pub stage_name: String,
    pub rows: u64,
    pub rows_received: u64,
    pub rejected: u64,
    pub content_sha256: String,
    /// `{"ds": {"rows": n, "sum": hex}}`
    pub additions: serde_json::Value,
    /// The table definition its rows were staged for (`parts::definition_digest`).
    pub definition_sha256: String,
    pub uploaded_at: DateTime<Utc>,
}

// language=PostgreSQL
const LOAD_COLUMNS: &str = "load_id, table_name, target, audits, status, principal, fingerprint,
    created_at, expires_at, audit_report, receipt, forced";

fn staged_load(row: &sqlx::postgres::PgRow) -> StoreResult<StagedLoad> {
    Ok(StagedLoad {
        load_id: row.try_get("load_id")?,
        table: row.try_get("table_name")?,
        target: row.try_get("target")?,
        audits: row.try_get("audits")?,
        status: row.try_get("status")?,
        principal: row.try_get("principal")?,
        fingerprint: row.try_get("fingerprint")?,
        created_at: row.try_get("created_at")?,
        expires_at: row.try_get("expires_at")?,
        audit_report: row.try_get("audit_report")?,
        receipt: row.try_get("receipt")?,
        forced: row.try_get("forced")?,
    })
}

/// Opens `load`, or finds the load its principal opened under the same
/// key before (the caller compares fingerprints); the bool says whether it
/// is new.
pub async fn open(conn: &mut PgConnection, load: &NewLoad<'_>) -> StoreResult<(StagedLoad, bool)> {
    // language=PostgreSQL
    let inserted = sqlx::query(&format!(
        "insert into idem.staged_loads (load_id, table_name, target, audits, status, principal,
                                        idempotency_key, fingerprint, token_id, expires_at)
         values ($1, $2, $3, $4, 'open', $5, $6, $7, $8, $9)
         on conflict (principal, idempotency_key) do nothing
         returning {LOAD_COLUMNS}"
    ))
    .bind(load.load_id)
    .bind(load.table.as_str())
    .bind(&load.target)
    .bind(&load.audits)
    .bind(load.principal)
    .bind(load.idempotency_key)
    .bind(load.fingerprint)
    .bind(load.token_id)
    .bind(load.expires_at)
    .fetch_optional(&mut *conn)
    .await?;
    if let Some(row) = inserted {
        return Ok((staged_load(&row)?, true));
    }
    let row = sqlx::query(&format!(
        "select {LOAD_COLUMNS} from idem.staged_loads where principal = $1 and idempotency_key = $2"
    ))
    .bind(load.principal)
    .bind(load.idempotency_key)
    .fetch_one(&mut *conn)
    .await?;
    Ok((staged_load(&row)?, false))
}

/// The staged load `load_id`; with `lock`, its row locked until the
/// transaction ends (a status change waits for it).
pub async fn get(
    conn: &mut PgConnection,
    load_id: LoadId,
    lock: bool,
) -> StoreResult<Option<StagedLoad>> {
    let lock = if lock { " for update" } else { "" };
    let row = sqlx::query(&format!(
        "select {LOAD_COLUMNS} from idem.staged_loads where load_id = $1{lock}"
    ))
    .bind(load_id)
    .fetch_optional(conn)
    .await?;
    row.as_ref().map(staged_load).transpose()
}

/// The load's parts, in order.
pub async fn parts(conn: &mut PgConnection, load_id: LoadId) -> StoreResult<Vec<LoadPart>> {
    // language=PostgreSQL
    let rows = sqlx::query(
        "select part, stage_name, rows, rows_received, rejected, content_sha256, additions,
                definition_sha256, uploaded_at
           from idem.load_parts where load_id = $1 order by part",
    )
    .bind(load_id)
    .fetch_all(conn)
    .await?;
    rows.iter()
        .map(|row| {
            Ok(LoadPart {
                part: row.try_get("part")?,
                stage_name: row.try_get("stage_name")?,
                rows: stored_count(row.try_get("rows")?)?,
                rows_received: stored_count(row.try_get("rows_received")?)?,
                rejected: stored_count(row.try_get("rejected")?)?,
                content_sha256: row.try_get("content_sha256")?,
                additions: row.try_get("additions")?,
                definition_sha256: row.try_get("definition_sha256")?,
                uploaded_at: row.try_get("uploaded_at")?,
            })
        })
        .collect()
}

/// What a status change records beside the status.
#[derive(Default)]
pub struct StatusChange<'a> {
    pub audit_report: Option<&'a serde_json::Value>,
    pub receipt: Option<&'a serde_json::Value>,
    pub forced: Option<&'a serde_json::Value>,
}

/// Sets the load's status, and what `change` holds (the rest is kept).
pub async fn set_status(
    conn: &mut PgConnection,
    load_id: LoadId,
    status: StagedStatus,
    change: StatusChange<'_>,
) -> StoreResult<()> {
    // language=PostgreSQL
    sqlx::query(
        "update idem.staged_loads
            set status = $2, audit_report = coalesce($3, audit_report),
                receipt = coalesce($4, receipt), forced = coalesce($5, forced)
          where load_id = $1",
    )
    .bind(load_id)
    .bind(status.as_str())
    .bind(change.audit_report)
    .bind(change.receipt)
    .bind(change.forced)
    .execute(conn)
    .await?;
    Ok(())
}

/// Keeps the load's latest audit report; a failed one makes the load
/// `audit_failed` (an open load stays open when they pass).
pub async fn record_audit(
    conn: &mut PgConnection,
    load_id: LoadId,
    report: &serde_json::Value,
    passed: bool,
) -> StoreResult<()> {
    // language=PostgreSQL
    sqlx::query(
        "update idem.staged_loads
            set audit_report = $2,
                status = case when $3 then status else 'audit_failed' end
          where load_id = $1 and status in ('open', 'audit_failed')",
    )
    .bind(load_id)
    .bind(report)
    .bind(passed)
    .execute(conn)
    .await?;
    Ok(())
}

/// Abandons the load (its parts dropped) unless it is published or done
/// with already; waits for a publish in progress. Returns the status it
/// had, `None` when there is no such load.
pub async fn abandon(
    conn: &mut PgConnection,
    load_id: LoadId,
) -> StoreResult<Option<StagedStatus>> {
    let mut tx = sqlx::Connection::begin(&mut *conn).await?;
    lock_load_exclusive(&mut tx, load_id).await?;
    let Some(load) = get(&mut tx, load_id, true).await? else {
        return Ok(None);
    };
    if load.status.is_open() {
        set_status(
            &mut tx,
            load_id,
            StagedStatus::Abandoned,
            StatusChange::default(),
        )
        .await?;
        drop_parts(&mut tx, load_id).await?;
    }
    tx.commit().await?;
    Ok(Some(load.status))
}

/// Abandons every open load of `table` (it is being dropped), their parts
/// dropped.
pub async fn abandon_all(conn: &mut PgConnection, table: &TableName) -> StoreResult<u64> {
    // language=PostgreSQL
    let open: Vec<LoadId> = sqlx::query_scalar(
        "update idem.staged_loads set status = 'abandoned'
          where table_name = $1 and status in ('open', 'audit_failed')
         returning load_id",
    )
    .bind(table.as_str())
    .fetch_all(&mut *conn)
    .await?;
    for &load_id in &open {
        drop_parts(&mut *conn, load_id).await?;
    }
    Ok(u64::try_from(open.len()).unwrap_or(u64::MAX))
}

/// Makes a load whose audits failed open again (a part was sent again).
pub async fn reopen(conn: &mut PgConnection, load_id: LoadId) -> StoreResult<()> {
    sqlx::query(
        "update idem.staged_loads set status = 'open' where load_id = $1 and status = 'audit_failed'",
    )
    .bind(load_id)
    .execute(conn)
    .await?;
    Ok(())
}

/// Drops the tables of the load's parts (their rows are no longer wanted,
/// or were moved into partitions); the parts' rows stay, for the load's
/// view.
pub async fn drop_parts(conn: &mut PgConnection, load_id: LoadId) -> StoreResult<()> {
    let names: Vec<String> =
        sqlx::query_scalar("select stage_name from idem.load_parts where load_id = $1")
            .bind(load_id)
            .fetch_all(&mut *conn)
            .await?;
    for name in names {
        sqlx::query(&format!("drop table if exists {}", staging_table(&name)))
            .execute(&mut *conn)
            .await?;
    }
    Ok(())
}

impl Store {
    /// Drops the tables of a published load's parts (best effort: the
    /// load is published whatever becomes of them).
    pub async fn drop_published_parts(&self, load_id: LoadId) {
        let dropped = async { drop_parts(&mut *self.acquire().await?, load_id).await }.await;
        if let Err(e) = dropped {
            tracing::warn!(error = %e, %load_id, "could not drop a published load's parts");
        }
    }

    /// The staged load `load_id`, if there is one.
    pub async fn staged_load(&self, load_id: LoadId) -> StoreResult<Option<StagedLoad>> {
        get(&mut *self.acquire().await?, load_id, false).await
    }

    /// The parts of load `load_id`.
    pub async fn load_parts(&self, load_id: LoadId) -> StoreResult<Vec<LoadPart>> {
        parts(&mut *self.acquire().await?, load_id).await
    }

    /// Marks the open loads past their time as expired and drops their
    /// parts, one load per transaction; returns how many.
    pub async fn expire_loads(&self) -> StoreResult<usize> {
        let mut conn = self.acquire().await?;
        let due: Vec<LoadId> = sqlx::query_scalar(
            "select load_id from idem.staged_loads
              where status in ('open', 'audit_failed') and expires_at < now()",
        )
        .fetch_all(&mut *conn)
        .await?;
        let mut expired = 0;
        for load_id in due {
            if expire_due(&mut conn, load_id).await? {
                expired += 1;
            }
        }
        Ok(expired)
    }

    /// Expires load `load_id` if it is open past its time (a load is
    /// expired when next touched, not only by the sweep).
    pub async fn expire_if_due(&self, load_id: LoadId) -> StoreResult<()> {
        expire_due(&mut *self.acquire().await?, load_id).await?;
        Ok(())
    }
}

/// Expires the load if it is open past its time and no publish holds it
/// (a load being published holds its lock and is not expired under it);
/// true when it did.
async fn expire_due(conn: &mut PgConnection, load_id: LoadId) -> StoreResult<bool> {
    let mut tx = sqlx::Connection::begin(&mut *conn).await?;
    // language=PostgreSQL
    let due: Option<LoadId> = sqlx::query_scalar(
        "select load_id from idem.staged_loads
          where load_id = $1 and status in ('open', 'audit_failed') and expires_at < now()
          for update skip locked",
    )
    .bind(load_id)
    .fetch_optional(&mut *tx)
    .await?;
    if due.is_none() || !try_lock_load(&mut tx, load_id).await? {
        return Ok(false);
    }
    set_status(
        &mut tx,
        load_id,
        StagedStatus::Expired,
        StatusChange::default(),
    )
    .await?;
    drop_parts(&mut tx, load_id).await?;
    tx.commit().await?;
    tracing::info!(%load_id, "a staged load expired");
    Ok(true)
}
