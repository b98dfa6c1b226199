//! Every SQL statement idem runs. `write/` holds the write path, one file
//! per step (stage → publish for a PUT; incoming → merge → closing for a
//! POST); beside it, one file per table idem keeps for itself (catalog,
//! ledger, rejects, tokens, idempotency keys) and the reads of partitions.
//! This file holds the `Store` handle: connect, pool, acquire, begin,
//! migrate, ping.
//!
//! User identifiers arrive as `names::TableName` / `ColumnName` (validated
//! where they entered) and are written quoted; values travel as bind
//! parameters or COPY data.

pub mod catalog;
pub mod completed_keys;
pub mod drop_table;
pub mod error;
pub mod idempotency;
pub mod ledger;
pub mod partitions;
pub mod rejects;
pub mod tokens;
pub mod write;

// moved: the write path's steps live in `write/`; these keep the old paths.
pub use write::{arrays, closing, contents, duplicates, janitor, merge, publish, stage};

use std::str::FromStr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use sha2::{Digest, Sha256};
use sqlx::postgres::{PgConnectOptions, PgPool, PgPoolOptions};
use sqlx::PgConnection;

pub use error::{StoreError, StoreResult};

use crate::names::{quote_ident, TableName};
use crate::period::Period;
use crate::schema::{ColumnType, TableDef};

pub static MIGRATOR: sqlx::migrate::Migrator = sqlx::migrate!("./migrations");

/// Postgres schemas that hold user data (see the first migration).
pub const DATA_SCHEMA: &str = "idem_data";
pub const PARTS_SCHEMA: &str = "idem_parts";
pub const STAGING_SCHEMA: &str = "idem_staging";

#[derive(Clone)]
pub struct Store {
    pool: PgPool,
    /// Calls of `acquire` waiting for a connection now (sqlx does not say).
    waiting: Arc<AtomicU64>,
    /// Completed keys remembered (see `completed_keys`).
    completed: Arc<completed_keys::CompletedKeys>,
    /// Set while the database is known to be away (see `acquire`).
    away: Arc<AtomicBool>,
}

/// While the database is known to be away, how often it is asked whether
/// it is back, and how long each question waits.
const AWAY_CHECK_EVERY: Duration = Duration::from_millis(500);
const AWAY_CHECK_WAIT: Duration = Duration::from_secs(1);

/// The pool as it is now.
#[derive(Clone, Copy, Debug)]
pub struct PoolState {
    /// Connections open, idle or in use.
    pub open: u32,
    pub idle: u64,
    /// Tasks waiting in `Store::acquire`.
    pub waiting: u64,
    pub max: u32,
}

/// Counts a wait for a connection until it ends, however it ends (a
/// request dropped mid-wait included).
struct Waiting<'a>(&'a AtomicU64);

impl<'a> Waiting<'a> {
    fn start(count: &'a AtomicU64) -> Self {
        count.fetch_add(1, Ordering::Relaxed);
        Waiting(count)
    }
}

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

impl Store {
    pub async fn connect(url: &str, max_connections: u32) -> StoreResult<Store> {
        Self::connect_with(PgConnectOptions::from_str(url)?, max_connections).await
    }

    pub async fn connect_with(
        options: PgConnectOptions,
        max_connections: u32,
    ) -> StoreResult<Store> {
        let options = options
            .application_name("idem")
            // Timestamps read back (JSON, CSV) in UTC whatever the server's setting.
            .options([("TimeZone", "UTC")]);
        let pool = PgPoolOptions::new()
            .max_connections(max_connections)
            .acquire_timeout(Duration::from_secs(10))
            // No ping before each checkout: it doubled the round trips of a
            // small request. A connection that died is found by its next
            // statement, which fails as `Unavailable` (503, Retry-After), and
            // is dropped from the pool.
            .test_before_acquire(false)
            .connect_with(options)
            .await
            // No connection at all yet: the database is away, not busy.
            .map_err(|e| match e {
                sqlx::Error::PoolTimedOut => StoreError::Unavailable(e),
                e => e.into(),
            })?;
        Ok(Store::from_pool(pool))
    }

    pub fn from_pool(pool: PgPool) -> Store {
        Store {
            pool,
            waiting: Arc::default(),
            completed: Arc::default(),
            away: Arc::default(),
        }
    }

    pub fn pool(&self) -> &PgPool {
        &self.pool
    }

    /// The most connections the pool holds.
    pub fn pool_size(&self) -> u32 {
        self.pool.options().get_max_connections()
    }

    /// How many connections are open, idle, and waited for.
    pub fn pool_state(&self) -> PoolState {
        PoolState {
            open: self.pool.size(),
            idle: u64::try_from(self.pool.num_idle()).unwrap_or(u64::MAX),
            waiting: self.waiting.load(Ordering::Relaxed),
            max: self.pool_size(),
        }
    }

    /// A connection of the pool's. Every statement of the store's takes its
    /// connection here, so that a wait that times out says why: every
    /// connection busy (`Busy`), or connections the pool could open and
    /// could not (`Unavailable`). Once the database is known to be away (it
    /// refused a new connection, see `refuses_connections`), the answer is
    /// `Unavailable` at once, without a wait, until a check in the
    /// background finds it back (see `mark_away`).
    pub async fn acquire(&self) -> StoreResult<sqlx::pool::PoolConnection<sqlx::Postgres>> {
        if self.away.load(Ordering::Relaxed) {
            return Err(StoreError::Unavailable(sqlx::Error::PoolTimedOut));
        }
        let waiting = Waiting::start(&self.waiting);
        let acquired = self.pool.acquire().await;
        drop(waiting);
        match acquired {
            Ok(conn) => Ok(conn),
            Err(sqlx::Error::PoolTimedOut) => Err(self.timed_out().await),
            Err(e) => Err(e.into()),
        }
    }

    /// What a wait for a connection that timed out means: with room in the
    /// pool, connections could not be opened (`Unavailable`; marked away
    /// only when the database refuses one outright, since a slow open under
    /// load is no outage); a full pool is busy.
    async fn timed_out(&self) -> StoreError {
        if self.pool.size() >= self.pool_size() {
            return StoreError::Busy(sqlx::Error::PoolTimedOut);
        }
        if self.refuses_connections().await {
            self.mark_away();
        }
        StoreError::Unavailable(sqlx::Error::PoolTimedOut)
    }

    /// Whether the database refuses a new connection: nothing listens, the
    /// connection is reset, or the server says it is starting up or
    /// shutting down. A connection slow to open (a loaded server), or one
    /// refused for other reasons (too many clients), is not an outage.
    async fn refuses_connections(&self) -> bool {
        use sqlx::ConnectOptions;
        let options = self.pool.connect_options();
        match tokio::time::timeout(AWAY_CHECK_WAIT, options.connect()).await {
            Ok(Ok(conn)) => {
                let _ = sqlx::Connection::close(conn).await;
                false
            }
            Ok(Err(sqlx::Error::Io(_))) => true,
            Ok(Err(sqlx::Error::Database(e))) => e.code().is_some_and(|c| c.starts_with("57P")),
            Ok(Err(_)) | Err(_) => false,
        }
    }

    /// Marks the database away, and asks it every `AWAY_CHECK_EVERY`
    /// whether it takes connections again, in the background, until it does.
    fn mark_away(&self) {
        if self.away.swap(true, Ordering::Relaxed) {
            return;
        }
        tracing::warn!("the database is away: requests that need it answer 503 until it is back");
        let store = self.clone();
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(AWAY_CHECK_EVERY).await;
                if !store.refuses_connections().await {
                    store.away.store(false, Ordering::Relaxed);
                    tracing::info!("the database answers again");
                    return;
                }
            }
        });
    }

    /// Whether the database is known to be away.
    pub fn is_away(&self) -> bool {
        self.away.load(Ordering::Relaxed)
    }

    /// A transaction on a connection from `acquire`.
    pub async fn begin(&self) -> StoreResult<sqlx::Transaction<'static, sqlx::Postgres>> {
        let conn = self.acquire().await?;
        Ok(sqlx::Transaction::begin(conn, None).await?)
    }

    pub async fn migrate(&self) -> StoreResult<()> {
        Ok(MIGRATOR.run(&self.pool).await?)
    }

    /// Whether the database answers within `within` (asked even while it
    /// is known to be away); one that refuses a new connection is marked
    /// away.
    pub async fn ping(&self, within: Duration) -> StoreResult<()> {
        let answered = self.answers(within).await;
        if let Err(StoreError::Unavailable(_)) = &answered {
            if self.refuses_connections().await {
                self.mark_away();
            }
        }
        answered
    }

    /// `select 1` on a connection of the pool's, within `within`.
    async fn answers(&self, within: Duration) -> StoreResult<()> {
        let ask = async {
            let mut conn = self.pool.acquire().await?;
            sqlx::query("select 1")
                .execute(&mut *conn)
                .await
                .map_err(StoreError::Unavailable)?;
            Ok(())
        };
        match tokio::time::timeout(within, ask).await {
            Ok(Err(StoreError::Busy(_))) | Err(_) if self.pool.size() < self.pool_size() => {
                Err(StoreError::Unavailable(sqlx::Error::PoolTimedOut))
            }
            Ok(answered) => answered,
            Err(_) => Err(StoreError::Busy(sqlx::Error::PoolTimedOut)),
        }
    }
}

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

/// `$first::type[], $first+1::type[], …`: a statement's array parameters,
/// one per type, numbered from `first` (a statement that writes many rows
/// from one array per column).
pub(crate) fn array_params(first: usize, types: &[&str]) -> String {
    types
        .iter()
        .enumerate()
        .map(|(i, ty)| format!("${}::{ty}[]", first + i))
        .collect::<Vec<_>>()
        .join(", ")
}

/// The advisory-lock key of partition `period` of `table`: writers take it
/// shared, swaps and drops exclusively (see `merge`).
pub fn partition_lock_key(table: &TableName, period: Period) -> i64 {
    lock_key("partition", &[table, &period.label()])
}

/// Every writer takes its locks in one order: the table's (shared; a schema
/// change takes it exclusively), then each partition's in date order. The
/// locks last until the transaction ends.
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

/// The parent (partitioned) table: `idem_data."orders"`.
pub fn parent_table(table: &TableName) -> String {
    format!("{DATA_SCHEMA}.{}", table.quoted())
}

/// A partition's own table name: `orders__20261012` (`…__2026101213` for an
/// hour, `…__202610` for a month). The fixed-width suffix keeps names of
/// different tables apart, and fits in 63 bytes.
pub fn partition_name(table: &TableName, period: Period) -> String {
    format!("{table}__{}", period.digits())
}

pub fn partition_table(table: &TableName, period: Period) -> String {
    format!(
        "{PARTS_SCHEMA}.{}",
        quote_ident(&partition_name(table, period))
    )
}

/// The column a table's partitions are keyed on: its partition column, or
/// `_part` (see `TableDef::keyed_by_part`).
pub fn partition_key(def: &TableDef) -> String {
    if def.keyed_by_part() {
        quote_ident(PART_COLUMN)
    } else {
        def.partition_by.quoted()
    }
}

/// The system column that holds the start of a row's period.
pub const PART_COLUMN: &str = "_part";

/// The partition key's value for `period` as a SQL literal, for the
/// statements that take no parameters (DDL, COPY); it prints only digits,
/// dashes, colons and spaces.
pub fn period_literal(def: &TableDef, period: Period) -> String {
    match def.partition_type() {
        ColumnType::Date => format!("date '{}'", period.start().format("%Y-%m-%d")),
        _ => format!(
            "timestamptz '{}+00'",
            period.start().format("%Y-%m-%d %H:%M:%S")
        ),
    }
}

/// idem's own columns after the user columns, in the order COPY tuples
/// carry them: `_part` (for tables keyed by it), `_load_id` (the load that
/// wrote the row), `_row_id` (the row's deterministic id) and `_row_hash`
/// (SHA-256 of the row's canonical encoding; a partition's content hash is
/// built from these).
/// See `column_ddl`.
pub const PREV_HASH_COLUMN: &str = "\"_prev_hash\"";

pub fn system_columns(def: &TableDef) -> Vec<(&'static str, &'static str)> {
    let mut cols = Vec::with_capacity(4);
    if def.keyed_by_part() {
        cols.push((PART_COLUMN, def.partition_type().sql_name()));
    }
    cols.extend([
        ("_load_id", "uuid"),
        ("_row_id", "bytea"),
        ("_row_hash", "bytea"),
    ]);
    cols
}

/// The column list of a user table, system columns included, as DDL.
pub fn column_ddl(def: &TableDef) -> String {
    let user = def.columns.iter().map(|c| {
        format!(
            "{} {}{}",
            c.name.quoted(),
            c.ty.sql_name(),
            if c.nullable { "" } else { " not null" }
        )
    });
    let system = system_columns(def)
        .into_iter()
        .map(|(name, ty)| format!("{} {ty} not null", quote_ident(name)));
    // Set only by a merge's update, to the row hash it replaced (see
    // `merge::upsert_rows`); NULL otherwise.
    let replaced = std::iter::once(format!("{PREV_HASH_COLUMN} bytea"));
    user.chain(system)
        .chain(replaced)
        .collect::<Vec<_>>()
        .join(", ")
}

/// Every column a COPY tuple or a full row write carries: the user columns,
/// then the system columns, quoted.
pub fn all_columns(def: &TableDef) -> Vec<String> {
    def.columns
        .iter()
        .map(|c| c.name.quoted())
        .chain(
            system_columns(def)
                .into_iter()
                .map(|(name, _)| quote_ident(name)),
        )
        .collect()
}

/// The columns of a partition's unique index: the partition key, then
/// the primary key, or `_row_id` for a table without one. (`_row_id` is a
/// function of the key, so both say the same; a bigint key sorts far faster
/// than a 32-byte digest when the index is built.)
pub fn key_index_columns(def: &TableDef) -> String {
    key_index_column_list(def).join(", ")
}

/// The unique index's columns, quoted, one by one.
pub fn key_index_column_list(def: &TableDef) -> Vec<String> {
    let mut cols = vec![partition_key(def)];
    if def.primary_key.is_empty() {
        cols.push("\"_row_id\"".into());
    } else {
        cols.extend(def.primary_key.iter().map(|k| k.quoted()));
    }
    cols
}

/// The user columns, quoted and comma-separated.
pub fn column_list(def: &TableDef) -> String {
    def.columns
        .iter()
        .map(|c| c.name.quoted())
        .collect::<Vec<_>>()
        .join(", ")
}

/// A count as Postgres's bigint. Counts of rows never come near 2^63, but
/// a wrapped one would be a silent lie, so it is checked.
pub fn count(n: u64) -> StoreResult<i64> {
    i64::try_from(n).map_err(|_| StoreError::Corrupt("a count past the range of bigint"))
}

/// A bigint count read back: never negative where idem wrote it.
pub fn stored_count(n: i64) -> StoreResult<u64> {
    u64::try_from(n).map_err(|_| StoreError::Corrupt("a negative count"))
}

pub fn is_unique_violation(err: &sqlx::Error) -> bool {
    matches!(err, sqlx::Error::Database(db) if db.code().as_deref() == Some("23505"))
}
