//! The store's one error type: what a database call can fail with, its
//! cause kept, sorted by what the caller can do about it.

use std::io;
use std::time::Duration;

use crate::ingest::BadRow;
use crate::names::TableName;
use crate::problem::ProblemCode;
use crate::schema::SchemaError;
use crate::versions::Unmet;

pub type StoreResult<T> = Result<T, StoreError>;

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The connection failed or the server is shutting down or starting
    /// up (SQLSTATE classes 08 and 57P): the database is away for now.
    #[error("the database is unavailable")]
    Unavailable(#[source] sqlx::Error),
    /// The database's TLS certificate or handshake was refused, under an
    /// `sslmode` that does not fall back to plain TCP.
    #[error(
        "the database's TLS handshake failed ({0}); give the server a certificate \
         rustls accepts (X.509 v3) and name its CA with sslrootcert=, or, on a \
         trusted network, set sslmode=prefer (falls back to plain TCP) or \
         sslmode=disable in the database URL"
    )]
    TlsRefused(#[source] sqlx::Error),
    /// The database is a Citus worker, not the coordinator.
    #[error(
        "this database is a Citus worker (group {0}): every idem process must \
         connect to the coordinator, where its locks and idempotency keys are \
         shared; point DATABASE_URL at the coordinator"
    )]
    CitusWorker(i32),
    /// A table asks for a distribution on a database without Citus.
    #[error(
        "table {0:?} asks for a distributed or reference table, and this database has no \
         Citus extension (CREATE EXTENSION citus; see the docs' Citus page)"
    )]
    CitusNotInstalled(String),
    /// What Citus cannot do on a table's distribution: idem's reason, or
    /// Citus's own (SQLSTATE 0A000, feature not supported).
    #[error("Citus cannot do this: {0}")]
    CitusUnsupported(String),
    /// Every connection is in use (by this process's pool, or the server's
    /// `max_connections`): the database is fine, idem is busy.
    #[error("every database connection is in use")]
    Busy(#[source] sqlx::Error),
    /// A limit Postgres enforces on the data itself (a row too wide, a
    /// value out of range): the request cannot be stored as it is.
    #[error("{message}")]
    Limit {
        message: &'static str,
        #[source]
        source: sqlx::Error,
    },
    /// Anything else the database refused: a bug of idem's, not the caller's.
    #[error("a database statement failed")]
    Database(#[source] sqlx::Error),
    #[error(transparent)]
    Migrate(#[from] sqlx::migrate::MigrateError),
    /// A declaration that cannot replace the stored definition.
    #[error(transparent)]
    Schema(#[from] SchemaError),
    /// A stage built for a definition that changed before its swap.
    #[error("table {0:?} changed while this load was staged; send it again")]
    TableChanged(TableName),
    /// Keys a body repeats, under `duplicates: reject` with bad rows
    /// refused: `keys` of them, the first listed as bad rows.
    #[error("{keys} key(s) occur more than once in the body; nothing was written")]
    RepeatedKeys { keys: u64, listed: Vec<BadRow> },
    /// Versions a versions write carries that are stored already with
    /// other content, with bad rows refused: `versions` of them, the first
    /// listed as bad rows.
    #[error("{versions} version(s) are stored already with other content; nothing was written")]
    ConflictingVersions { versions: u64, listed: Vec<BadRow> },
    /// `If-Match` / `If-None-Match` did not hold.
    #[error("{0}")]
    PreconditionFailed(Unmet),
    /// Another request holds the Idempotency-Key past the wait.
    #[error("a request with this Idempotency-Key is still running")]
    KeyInFlight { retry_after: Duration },
    /// The rows fed to a COPY failed (a bad body, a client gone); the COPY
    /// was aborted and the caller knows why.
    #[error("the row source failed")]
    RowSource(#[source] io::Error),
    /// A value a read was asked for is not of its column's type (the
    /// message names the parameter).
    #[error("{0}")]
    BadValue(String),
    /// A stored value is not what idem wrote (a row hash of the wrong size).
    #[error("corrupt stored data: {0}")]
    Corrupt(&'static str),
}

impl StoreError {
    /// The stable, machine-readable code.
    pub fn code(&self) -> ProblemCode {
        match self {
            StoreError::Unavailable(_) | StoreError::TlsRefused(_) => {
                ProblemCode::DatabaseUnavailable
            }
            StoreError::Busy(_) => ProblemCode::Busy,
            StoreError::Limit { .. } => ProblemCode::LimitExceeded,
            StoreError::Schema(e) => e.code(),
            StoreError::CitusNotInstalled(_) => ProblemCode::CitusNotInstalled,
            StoreError::CitusUnsupported(_) => ProblemCode::CitusUnsupported,
            StoreError::TableChanged(_) => ProblemCode::SchemaConflict,
            StoreError::PreconditionFailed(_) => ProblemCode::PreconditionFailed,
            StoreError::RepeatedKeys { .. } | StoreError::ConflictingVersions { .. } => {
                ProblemCode::BadRows
            }
            StoreError::KeyInFlight { .. } => ProblemCode::IdempotencyKeyInFlight,
            StoreError::BadValue(_) => ProblemCode::InvalidRequest,
            StoreError::Database(_)
            | StoreError::CitusWorker(_)
            | StoreError::Migrate(_)
            | StoreError::RowSource(_)
            | StoreError::Corrupt(_) => ProblemCode::Internal,
        }
    }

    /// Whether the caller's request caused it (it can fix or retry it), as
    /// opposed to the database or idem failing.
    /// A deadlock Postgres broke by failing this statement: the statements
    /// since the last savepoint may run again.
    pub fn is_deadlock(&self) -> bool {
        let err = match self {
            StoreError::Busy(e) | StoreError::Database(e) => e,
            _ => return false,
        };
        matches!(err, sqlx::Error::Database(db) if db.code().as_deref() == Some("40P01"))
    }

    pub fn is_refusal(&self) -> bool {
        matches!(
            self,
            StoreError::Schema(_)
                | StoreError::CitusNotInstalled(_)
                | StoreError::CitusUnsupported(_)
                | StoreError::Limit { .. }
                | StoreError::TableChanged(_)
                | StoreError::PreconditionFailed(_)
                | StoreError::KeyInFlight { .. }
                | StoreError::RepeatedKeys { .. }
                | StoreError::ConflictingVersions { .. }
                | StoreError::BadValue(_)
        )
    }
}

impl From<Unmet> for StoreError {
    fn from(unmet: Unmet) -> Self {
        StoreError::PreconditionFailed(unmet)
    }
}

impl From<sqlx::Error> for StoreError {
    fn from(err: sqlx::Error) -> Self {
        if matches!(err, sqlx::Error::PoolTimedOut) {
            return StoreError::Busy(err);
        }
        if is_connection_error(&err) {
            return StoreError::Unavailable(err);
        }
        let state = match &err {
            sqlx::Error::Database(db) => db.code().map(|c| c.into_owned()),
            _ => None,
        };
        // Feature not supported: on a Citus table, what Citus cannot do
        // (its message says what, and is about the statement, not the data).
        if let (Some("0A000"), sqlx::Error::Database(db)) = (state.as_deref(), &err) {
            return StoreError::CitusUnsupported(db.message().to_owned());
        }
        if let (Some(code @ ("XX000" | "58030")), sqlx::Error::Database(db)) =
            (state.as_deref(), &err)
        {
            let routine = db
                .try_downcast_ref::<sqlx::postgres::PgDatabaseError>()
                .and_then(|pg| pg.routine());
            if citus_lost_a_node(code, db.message(), routine) {
                return StoreError::Unavailable(err);
            }
        }
        match state.as_deref().and_then(classify_sqlstate) {
            Some(Sorted::Away) => StoreError::Unavailable(err),
            Some(Sorted::Busy) => StoreError::Busy(err),
            Some(Sorted::Limit(message)) => StoreError::Limit {
                message,
                source: err,
            },
            None => StoreError::Database(err),
        }
    }
}

/// Errors that say the database is away rather than that a statement failed.
fn is_connection_error(err: &sqlx::Error) -> bool {
    matches!(
        err,
        sqlx::Error::Io(_) | sqlx::Error::PoolClosed | sqlx::Error::Tls(_)
    )
}

/// Whether an error Citus raised (SQLSTATE `state`, in `routine`) is its
/// word that a node it needed went away mid-transaction; the transaction
/// was rolled back and a retry may succeed. Citus reports a connection it
/// cannot open as 08006, as Postgres does, but not one lost while a
/// transaction used it (Citus 13's `remote_transaction.c`,
/// `placement_connection.c`, `multi_copy.c`, `worker_shard_copy.c`):
/// - XX000, for the commits and placements that fail with it (`LOST`);
/// - XX000 from `ReportResultError`, for a command whose connection broke
///   under it (no answer from the node, so no SQLSTATE of its own: "SSL
///   SYSCALL error: EOF detected", "server closed the connection
///   unexpectedly");
/// - XX000 from `ReportCopyError`, which passes on the worker's message
///   without its SQLSTATE: a shutdown, a crash or a broken connection (`GONE`)
///   is the node going away, anything else (a constraint the rows broke) is not;
/// - 58030 (I/O error), for COPY data or its end that could not be sent.
fn citus_lost_a_node(state: &str, message: &str, routine: Option<&str>) -> bool {
    const LOST: [&str; 4] = [
        "failure on connection marked as essential",
        "could not connect to any active placements",
        "could not commit transaction for shard",
        "failed to prepare transaction",
    ];
    // Postgres's own messages for a backend ended by a shutdown or a crash
    // (57P01, 57P02, 57P03), and libpq's for a connection that broke.
    const GONE: [&str; 7] = [
        "terminating connection due to",
        "terminating connection because of crash",
        "the database system is shutting down",
        "the database system is in recovery mode",
        "server closed the connection unexpectedly",
        "SSL SYSCALL error",
        "could not receive data from server",
    ];
    const COPY_NOT_SENT: [&str; 3] = [
        "failed to COPY to shard",
        "Failed to COPY to",
        "failed to complete COPY on",
    ];
    let starts_with_any = |prefixes: &[&str]| prefixes.iter().any(|p| message.starts_with(p));
    match (state, routine) {
        ("58030", _) => starts_with_any(&COPY_NOT_SENT),
        (_, Some("ReportResultError")) => true,
        (_, Some("ReportCopyError")) => starts_with_any(&GONE),
        _ => starts_with_any(&LOST),
    }
}

enum Sorted {
    Away,
    Busy,
    Limit(&'static str),
}

/// What a SQLSTATE means for the caller, where it means more than "a bug".
/// The messages are idem's own: database text never reaches a client.
fn classify_sqlstate(state: &str) -> Option<Sorted> {
    Some(match state {
        // connection exceptions; admin shutdown, crash shutdown, cannot
        // connect now (starting up), idle session timeout
        s if s.starts_with("08") || s.starts_with("57P") => Sorted::Away,
        // too_many_connections, and the server out of memory or disk
        "53300" | "53200" | "53100" => Sorted::Busy,
        // a deadlock or a serialization failure that retries did not settle
        "40P01" | "40001" => Sorted::Busy,
        // a lock waited for longer than a write's bound (see `claim_key`)
        "55P03" => Sorted::Busy,
        "54000" => Sorted::Limit("a row is larger than Postgres can store"),
        "54001" => Sorted::Limit("a statement is too complex for Postgres"),
        "54011" => Sorted::Limit("too many columns: a Postgres table holds at most 1600"),
        "22003" => Sorted::Limit("a number is out of the range its column holds"),
        "22008" => Sorted::Limit("a date or time is out of the range Postgres holds"),
        "22001" => Sorted::Limit("a value is too long for its column"),
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn citus_losing_a_node_mid_transaction_is_the_database_away() {
        let lost = citus_lost_a_node;
        assert!(lost(
            "XX000",
            "failure on connection marked as essential: 127.0.0.1:59775",
            Some("MarkRemoteTransactionFailed")
        ));
        assert!(lost(
            "XX000",
            "could not commit transaction for shard 102008 on at least one active node",
            None
        ));
        assert!(lost(
            "XX000",
            "SSL SYSCALL error: EOF detected\ninvalid socket",
            Some("ReportResultError")
        ));
        // A worker shut down while a COPY sent it rows (seen in CI).
        assert!(lost(
            "XX000",
            "terminating connection due to administrator command",
            Some("ReportCopyError")
        ));
        assert!(lost(
            "58030",
            "failed to COPY to shard 102008 on 127.0.0.1:55952",
            Some("SendCopyDataToPlacement")
        ));
        // The worker refused the rows themselves: no retry mends that.
        assert!(!lost(
            "XX000",
            "duplicate key value violates unique constraint \"orders_pkey_102008\"",
            Some("ReportCopyError")
        ));
        // Plain Postgres's own I/O errors are not a node gone away.
        assert!(!lost(
            "58030",
            "could not read block 0 in file \"base/1/2\"",
            Some("mdread")
        ));
        assert!(!lost(
            "XX000",
            "cache lookup failed for relation 1234",
            Some("RelationBuildDesc")
        ));
    }

    #[test]
    fn sqlstates_are_sorted_by_what_the_caller_can_do() {
        assert!(matches!(classify_sqlstate("57P01"), Some(Sorted::Away)));
        assert!(matches!(classify_sqlstate("08006"), Some(Sorted::Away)));
        assert!(matches!(classify_sqlstate("53300"), Some(Sorted::Busy)));
        assert!(matches!(classify_sqlstate("54011"), Some(Sorted::Limit(_))));
        assert!(classify_sqlstate("42P01").is_none());
        assert!(matches!(
            StoreError::from(sqlx::Error::PoolTimedOut),
            StoreError::Busy(_)
        ));
    }
}
