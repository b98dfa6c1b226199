//! Removes stages that no live idem process owns: left by a crash or a kill
//! between staging and publishing. Safe with several processes on one
//! database, because a stage's owner holds its advisory lock until it is done.
//! The parts of open staged loads (`parts`) are their loads' to drop.

use sqlx::Row;

use crate::store::locks::stage_lock_key;
use crate::store::sql::{staging_table, STAGING_SCHEMA};
use crate::store::{Store, StoreResult};

impl Store {
    /// Drops every unowned stage; returns how many.
    pub async fn sweep_stages(&self) -> StoreResult<usize> {
        let mut conn = self.acquire().await?;
        let names: Vec<String> = sqlx::query(
            "select c.relname from pg_class c join pg_namespace n on n.oid = c.relnamespace
              where n.nspname = $1 and c.relkind = 'r'",
        )
        .bind(STAGING_SCHEMA)
        .fetch_all(&mut *conn)
        .await?
        .iter()
        .map(|r| r.try_get(0))
        .collect::<Result<_, _>>()?;
        let mut dropped = 0;
        for name in names {
            let key = stage_lock_key(&name);
            let free: bool = sqlx::query_scalar("select pg_try_advisory_lock($1)")
                .bind(key)
                .fetch_one(&mut *conn)
                .await?;
            if !free {
                continue; // its owner is alive
            }
            // A registered part belongs to its load until the load is done
            // with it (it may have been registered since the list was read).
            let result = match is_load_part(&mut conn, &name).await {
                Ok(true) => Ok(false),
                Ok(false) => sqlx::query(&format!("drop table if exists {}", staging_table(&name)))
                    .execute(&mut *conn)
                    .await
                    .map(|_| true)
                    .map_err(Into::into),
                Err(e) => Err(e),
            };
            sqlx::query("select pg_advisory_unlock($1)")
                .bind(key)
                .execute(&mut *conn)
                .await?;
            if !result? {
                continue;
            }
            tracing::info!(stage = %name, "dropped a stage left behind");
            dropped += 1;
        }
        Ok(dropped)
    }
}

/// Whether `name` is a registered part of a load still open. A done
/// load's parts are left only by a kill between its publish's commit and
/// their drop: nobody else will drop them.
async fn is_load_part(conn: &mut sqlx::PgConnection, name: &str) -> StoreResult<bool> {
    // language=PostgreSQL
    Ok(sqlx::query_scalar(
        "select exists (select 1 from idem.load_parts p join idem.staged_loads l using (load_id)
                         where p.stage_name = $1 and l.status in ('open', 'audit_failed'))",
    )
    .bind(name)
    .fetch_one(conn)
    .await?)
}
