//! Loads announced (see migration `load_events`): the statement that
//! records committed loads sends `NOTIFY idem_loads` and queues them; an
//! announcer (any process, one at a time) then gives each queued load the
//! next position in `idem.load_events` and sends `NOTIFY idem_load_events`,
//! which wakes the event streams of every process to read what follows
//! the position they sent last.

use sqlx::postgres::{PgListener, PgPoolOptions};
use sqlx::Connection;

use super::ledger::{Load, LOAD_COLUMNS};
use super::locks::lock_key;
use super::{Store, StoreResult};
use crate::names::TableName;

/// Where a committed load's trigger announces it.
pub const LOADS_CHANNEL: &str = "idem_loads";
/// Where an announcer says that positions were handed out (the payload:
/// the last one).
pub const EVENTS_CHANNEL: &str = "idem_load_events";

impl Store {
    /// Gives the committed loads queued to be announced their positions,
    /// all of them (what commits between two rounds: a queue with no
    /// order to keep needs no sort nor index, and stays small), in one
    /// transaction, unless another process's announcer is at it (then 0);
    /// the last position given.
    pub async fn announce_loads(&self) -> StoreResult<u64> {
        let mut conn = self.acquire().await?;
        let mut tx = conn.begin().await?;
        let ours: bool = sqlx::query_scalar("select pg_try_advisory_xact_lock($1)")
            .bind(lock_key("announce-loads", &[]))
            .fetch_one(&mut *tx)
            .await?;
        if !ours {
            return Ok(0);
        }
        // language=PostgreSQL
        let last: Option<i64> = sqlx::query_scalar(
            "with next as (
               delete from idem.loads_to_announce returning load_id, table_name, finished_at),
             placed as (
               insert into idem.load_events (load_id, table_name)
               select load_id, table_name from next order by finished_at, load_id
               returning position)
             select max(position) from placed",
        )
        .fetch_one(&mut *tx)
        .await?;
        let Some(last) = last else {
            return Ok(0);
        };
        sqlx::query("select pg_notify($1, $2)")
            .bind(EVENTS_CHANNEL)
            .bind(last.to_string())
            .execute(&mut *tx)
            .await?;
        tx.commit().await?;
        Ok(u64::try_from(last).unwrap_or(0))
    }

    /// The last position handed out (0 before any).
    pub async fn last_load_event(&self) -> StoreResult<i64> {
        Ok(
            sqlx::query_scalar("select coalesce(max(position), 0) from idem.load_events")
                .fetch_one(&mut *self.acquire().await?)
                .await?,
        )
    }

    /// The announced loads after position `after`, in order, of `table`
    /// (or of every table) among those `LIKE` one of `visible`.
    pub async fn load_events_after(
        &self,
        after: i64,
        table: Option<&TableName>,
        visible: &[String],
        limit: i64,
    ) -> StoreResult<Vec<(i64, Load)>> {
        // language=PostgreSQL
        let sql = format!(
            "select position, {LOAD_COLUMNS} from (
               select e.position, l.* from idem.load_events e
                 join idem.loads l on l.load_id = e.load_id
                where e.position > $1 and ($2::text is null or e.table_name = $2)
                  and e.table_name like any($3)
                order by e.position limit $4) announced
              order by position"
        );
        let rows = sqlx::query(&sql)
            .bind(after)
            .bind(table.map(TableName::as_str))
            .bind(visible)
            .bind(limit)
            .fetch_all(&mut *self.acquire().await?)
            .await?;
        rows.iter()
            .map(|row| {
                use sqlx::{FromRow, Row};
                Ok((row.try_get(0)?, Load::from_row(row)?))
            })
            .collect()
    }

    /// A listener on both channels, on a connection of its own (not one of
    /// the pool's: it is held for as long as the process runs).
    pub async fn listen_loads(&self) -> StoreResult<PgListener> {
        let own = PgPoolOptions::new()
            .max_connections(1)
            .connect_lazy_with(self.pool.connect_options().as_ref().clone());
        let mut listener = PgListener::connect_with(&own).await?;
        listener.listen_all([LOADS_CHANNEL, EVENTS_CHANNEL]).await?;
        Ok(listener)
    }
}
