//! Every SQL statement idem runs. `write/` holds the write path, one file
//! per step (stage → publish for a PUT; incoming → merge → closing for a
//! POST); beside it, one file per table idem keeps for itself (catalog,
//! ledger, rejects, tokens, idempotency keys, channels) and the reads of
//! partitions.
//! This file holds the `Store` handle: connect, pool, acquire, begin,
//! migrate, ping.
//!
//! User identifiers arrive as `names::TableName` / `ColumnName` (validated
//! where they entered) and reach SQL only as `sql::Ident`, which is always
//! quoted; `locks` owns the advisory lock keys; values travel as bind
//! parameters or COPY data.

pub mod adopt_key;
pub mod audits;
pub mod catalog;
pub mod channels;
pub mod cluster;
pub mod console;
pub mod console_signin;
pub mod contents;
pub mod distribute;
pub mod drop_table;
pub mod duplicates_log;
pub mod error;
pub mod history;
pub mod idempotency;
pub mod ledger;
pub mod load_events;
pub mod locks;
pub mod partitions;
pub mod read;
pub mod rejects;
pub mod sql;
pub mod staged_loads;
pub mod tokens;
pub mod write;

use std::str::FromStr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use sqlx::postgres::{PgConnectOptions, PgPool, PgPoolOptions, PgSslMode};

use crate::schema::DistributionDefault;

pub use error::{StoreError, StoreResult};

pub static MIGRATOR: sqlx::migrate::Migrator = sqlx::migrate!("./migrations");

#[derive(Clone)]
pub struct Store {
    pool: PgPool,
    /// Calls of `acquire` waiting for a connection now (sqlx does not say).
    waiting: Arc<AtomicU64>,
    /// Completed keys remembered (see `idempotency::completed`): held here
    /// so that `store::idempotency` reads through them and `drop_table`
    /// forgets them.
    completed: Arc<crate::idempotency::completed::CompletedKeys>,
    /// Set while the database is known to be away (see `acquire`).
    away: Arc<AtomicBool>,
    /// Where tables made without a `"distribution"` live on Citus.
    distribution_default: DistributionDefault,
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

/// Prepared statements a connection keeps by default (sqlx's own default).
/// A write to a user table runs a statement of that table's own text, so
/// writes spread over more tables than this prepare their statement again
/// now and then (a round trip and a plan, and another table's statement
/// dropped). Measured over 1,000 tables (`bench/small_writes.sh` (f)), a
/// cache of 1,000 wrote no faster than one of 100, and each connection's
/// Postgres backend held about 50 MB more (some 50 KB per statement).
pub const STATEMENT_CACHE: u64 = 100;

impl Store {
    /// A pool of `max_connections`, each keeping up to `statement_cache`
    /// prepared statements.
    pub async fn connect(
        url: &str,
        max_connections: u32,
        statement_cache: u64,
    ) -> StoreResult<Store> {
        let capacity = usize::try_from(statement_cache).unwrap_or(usize::MAX);
        let options = PgConnectOptions::from_str(url)?.statement_cache_capacity(capacity);
        Self::connect_with(options, max_connections).await
    }

    pub async fn connect_with(
        options: PgConnectOptions,
        max_connections: u32,
    ) -> StoreResult<Store> {
        let options = options
            .application_name("idem")
            // Timestamps read back (JSON, CSV) in UTC whatever the server's setting.
            .options([("TimeZone", "UTC")])
            // On Citus, a statement writes a distributed table's shards one
            // after another, in shard order, over one connection per worker:
            // two writers then lock rows in one order on every node, as on
            // one Postgres (all at once, each may lock some keys first on one
            // worker and wait on another: a distributed deadlock), and a
            // transaction may make a table and then write it (Citus refuses
            // to switch to this mode after parallel work). A Postgres without
            // Citus keeps the setting as a placeholder and ignores it.
            .options([("citus.multi_shard_modify_mode", "sequential")])
            // On Citus, a write's rows reach a table's shards through a
            // connection from this session to each shard's worker, opened
            // (with TLS) for the write and closed after it past the cached
            // count, one by default: 1-row POSTs then spent most of the
            // cluster's CPU opening connections (227 requests/s against 2,742
            // when they are kept; docs/operations/citus.md#sizing-a-cluster).
            // Kept up to 16 a worker: the shards a worker holds of a table
            // with Citus's 32 shards on two workers. Citus's shared pool
            // (citus.max_shared_pool_size) still bounds them all.
            .options([("citus.max_cached_conns_per_worker", "16")]);
        let pool = match open_pool(options.clone(), max_connections).await {
            // As libpq does under `sslmode=prefer` (the default): a TLS
            // handshake that fails is tried again without TLS. (Citus turns
            // TLS on with a self-signed X.509 v1 certificate, which rustls
            // refuses to parse even when it verifies nothing.)
            Err(e) if matches!(options.get_ssl_mode(), PgSslMode::Prefer) && is_tls_failure(&e) => {
                tracing::warn!(
                    error = %e,
                    "the database's TLS handshake failed; connected without TLS, as \
                     sslmode=prefer allows (set sslmode=require or verify-full, with \
                     sslrootcert, to insist on TLS)"
                );
                open_pool(options.ssl_mode(PgSslMode::Disable), max_connections).await
            }
            other => other,
        }
        .map_err(|e| match e {
            // No connection at all yet: the database is away, not busy.
            sqlx::Error::PoolTimedOut => StoreError::Unavailable(e),
            e if is_tls_failure(&e) => StoreError::TlsRefused(e),
            e => e.into(),
        })?;
        Ok(Store::from_pool(pool))
    }

    /// The store, making tables without a `"distribution"` as `default` says.
    pub fn with_distribution_default(self, default: DistributionDefault) -> Store {
        Store {
            distribution_default: default,
            ..self
        }
    }

    pub fn distribution_default(&self) -> DistributionDefault {
        self.distribution_default
    }

    pub fn from_pool(pool: PgPool) -> Store {
        Store {
            pool,
            waiting: Arc::default(),
            completed: Arc::default(),
            away: Arc::default(),
            distribution_default: DistributionDefault::default(),
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
    matches!(err, sqlx::Error::Database(db) if db.code().as_deref() == Some(UNIQUE_VIOLATION))
}

/// The SQLSTATE of a NOT NULL a stored row breaks, and of a unique index
/// two stored rows break.
pub const NOT_NULL_VIOLATION: &str = "23502";
pub const UNIQUE_VIOLATION: &str = "23505";

/// Runs `sql`, DDL that Postgres checks against every stored row (a NOT
/// NULL, a unique index), in a savepoint: false, the savepoint rolled back
/// and the transaction still usable, when a stored row breaks it with
/// SQLSTATE `violation`, so that the caller can say which rows do.
pub async fn checked_ddl(
    conn: &mut sqlx::PgConnection,
    sql: &str,
    violation: &str,
) -> StoreResult<bool> {
    use sqlx::Connection;
    let mut attempt = conn.begin().await?;
    match sqlx::query(sql).execute(&mut *attempt).await {
        Ok(_) => {
            attempt.commit().await?;
            Ok(true)
        }
        Err(sqlx::Error::Database(db)) if db.code().as_deref() == Some(violation) => {
            attempt.rollback().await?;
            Ok(false)
        }
        Err(e) => Err(e.into()),
    }
}

/// A pool of `max_connections`, its first connection made.
async fn open_pool(options: PgConnectOptions, max_connections: u32) -> sqlx::Result<PgPool> {
    PgPoolOptions::new()
        .max_connections(max_connections)
        .acquire_timeout(Duration::from_secs(10))
        // No ping before each checkout: it doubled the round trips of a
        // small request. A connection that died is found by its next
        // statement, which fails as `Unavailable` (503, Retry-After), and
        // is dropped from the pool.
        .test_before_acquire(false)
        .connect_with(options)
        .await
}

/// Whether a connection failed in its TLS handshake: sqlx says so itself,
/// or rustls's refusal comes through as invalid data read.
fn is_tls_failure(err: &sqlx::Error) -> bool {
    match err {
        sqlx::Error::Tls(_) => true,
        sqlx::Error::Io(io) => io.kind() == std::io::ErrorKind::InvalidData,
        _ => false,
    }
}
