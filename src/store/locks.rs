//! Advisory locks: their keys and the order writers take them in.
//!
//! Every writer takes its locks in one order: the table's (shared; a schema
//! change takes it exclusively), then each partition's in date order. The
//! locks last until the transaction ends. A stage is claimed by a
//! session-level lock on its name (see `write::stage`).

use sha2::{Digest, Sha256};
use sqlx::PgConnection;

use crate::ids::LoadId;
use crate::names::TableName;
use crate::period::Period;
use crate::store::StoreResult;

/// An advisory-lock key: the first 8 bytes of a SHA-256 of the parts. Keys
/// of different kinds never meet because the kind is hashed in.
pub fn lock_key(kind: &str, parts: &[&str]) -> i64 {
    let mut h = Sha256::new();
    h.update(kind.as_bytes());
    for p in parts {
        h.update(b"\0");
        h.update(p.as_bytes());
    }
    i64::from_be_bytes(h.finalize()[..8].try_into().unwrap())
}

/// The advisory-lock key of partition `period` of `table`: writers take it
/// shared, swaps and drops exclusively (see `merge`).
pub fn partition_lock_key(table: &TableName, period: Period) -> i64 {
    lock_key("partition", &[table, &period.label()])
}

/// The session-level lock that claims stage `name` for its owner.
pub fn stage_lock_key(name: &str) -> i64 {
    lock_key("stage", &[name])
}

/// The table's lock, shared: taken by every writer before its partitions'.
pub async fn lock_table_shared(conn: &mut PgConnection, table: &TableName) -> StoreResult<()> {
    sqlx::query("select pg_advisory_xact_lock_shared($1)")
        .bind(lock_key("table", &[table]))
        .execute(conn)
        .await?;
    Ok(())
}

/// Serializes a table's schema changes (see `lock_table_shared`).
pub async fn lock_table(conn: &mut PgConnection, table: &TableName) -> StoreResult<()> {
    sqlx::query("select pg_advisory_xact_lock($1)")
        .bind(lock_key("table", &[table]))
        .execute(conn)
        .await?;
    Ok(())
}

/// `lock_table`, waiting at most `wait` (then `55P03`, a busy answer);
/// the statements after it wait as long as they must.
pub async fn lock_table_within(
    conn: &mut PgConnection,
    table: &TableName,
    wait: std::time::Duration,
) -> StoreResult<()> {
    sqlx::query(&format!("set local lock_timeout = {}", wait.as_millis()))
        .execute(&mut *conn)
        .await?;
    lock_table(&mut *conn, table).await?;
    sqlx::query("set local lock_timeout to default")
        .execute(conn)
        .await?;
    Ok(())
}

/// Serializes the writers of one partition (see `lock_table_shared`).
pub async fn lock_partition(
    conn: &mut PgConnection,
    table: &TableName,
    period: Period,
) -> StoreResult<()> {
    sqlx::query("select pg_advisory_xact_lock($1)")
        .bind(partition_lock_key(table, period))
        .execute(conn)
        .await?;
    Ok(())
}

/// The lock of a staged load: held (session-level, exclusively) by whoever
/// publishes, expires or abandons it, and shared by a part being registered,
/// so that no part changes under a publish.
pub fn load_lock_key(load_id: LoadId) -> i64 {
    lock_key("load", &[&load_id.to_string()])
}

/// Takes the load's lock exclusively until the transaction ends; false when
/// someone else holds it (a publish in progress).
pub async fn try_lock_load(conn: &mut PgConnection, load_id: LoadId) -> StoreResult<bool> {
    Ok(sqlx::query_scalar("select pg_try_advisory_xact_lock($1)")
        .bind(load_lock_key(load_id))
        .fetch_one(conn)
        .await?)
}

/// Takes the load's lock shared until the transaction ends (a part's
/// registration).
pub async fn lock_load_shared(conn: &mut PgConnection, load_id: LoadId) -> StoreResult<()> {
    sqlx::query("select pg_advisory_xact_lock_shared($1)")
        .bind(load_lock_key(load_id))
        .execute(conn)
        .await?;
    Ok(())
}

/// Holds the load's lock for this session (a publish, from its first read
/// of the parts to its commit); `unlock_load` lets it go.
pub async fn lock_load(conn: &mut PgConnection, load_id: LoadId) -> StoreResult<()> {
    sqlx::query("select pg_advisory_lock($1)")
        .bind(load_lock_key(load_id))
        .execute(conn)
        .await?;
    Ok(())
}

pub async fn unlock_load(conn: &mut PgConnection, load_id: LoadId) -> StoreResult<()> {
    sqlx::query("select pg_advisory_unlock($1)")
        .bind(load_lock_key(load_id))
        .execute(conn)
        .await?;
    Ok(())
}

/// Takes the load's lock exclusively until the transaction ends, waiting
/// for a publish in progress (an abandonment).
pub async fn lock_load_exclusive(conn: &mut PgConnection, load_id: LoadId) -> StoreResult<()> {
    sqlx::query("select pg_advisory_xact_lock($1)")
        .bind(load_lock_key(load_id))
        .execute(conn)
        .await?;
    Ok(())
}
