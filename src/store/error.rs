//! The store's one error type: what a database call can fail with, its
//! cause kept, sorted by what the caller can do about it.

use std::io;
use std::time::Duration;

use crate::names::TableName;
use crate::schema::SchemaError;

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The connection or the pool failed: the database is away for now.
    #[error("the database is unavailable")]
    Unavailable(#[source] sqlx::Error),
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
    /// `If-Match` / `If-None-Match` did not hold.
    #[error("{0}")]
    PreconditionFailed(String),
    /// Another request holds the Idempotency-Key past the wait.
    #[error("a request with this Idempotency-Key is still running")]
    KeyInFlight { retry_after: Duration },
    /// The rows fed to a COPY failed (a bad body, a client gone); the COPY
    /// was aborted and the caller knows why.
    #[error("the row source failed")]
    RowSource(#[source] io::Error),
    /// A stored value is not what idem wrote (a row hash of the wrong size).
    #[error("corrupt stored data: {0}")]
    Corrupt(&'static str),
}

impl StoreError {
    /// The stable, machine-readable code.
    pub fn code(&self) -> &'static str {
        match self {
            StoreError::Unavailable(_) => "database_unavailable",
            StoreError::Schema(SchemaError::Name(_)) => "invalid_name",
            StoreError::Schema(SchemaError::Invalid(_)) => "invalid_declaration",
            StoreError::Schema(SchemaError::Conflict(_)) | StoreError::TableChanged(_) => {
                "schema_conflict"
            }
            StoreError::PreconditionFailed(_) => "precondition_failed",
            StoreError::KeyInFlight { .. } => "idempotency_key_in_flight",
            StoreError::Database(_)
            | StoreError::Migrate(_)
            | StoreError::RowSource(_)
            | StoreError::Corrupt(_) => "internal",
        }
    }

    /// Whether the caller's request caused it (it can fix or retry it), as
    /// opposed to the database or idem failing.
    pub fn is_refusal(&self) -> bool {
        matches!(
            self,
            StoreError::Schema(_)
                | StoreError::TableChanged(_)
                | StoreError::PreconditionFailed(_)
                | StoreError::KeyInFlight { .. }
        )
    }
}

impl From<sqlx::Error> for StoreError {
    fn from(err: sqlx::Error) -> Self {
        if is_connection_error(&err) {
            StoreError::Unavailable(err)
        } else {
            StoreError::Database(err)
        }
    }
}

/// Errors that say the database is away rather than that a statement failed.
fn is_connection_error(err: &sqlx::Error) -> bool {
    matches!(
        err,
        sqlx::Error::Io(_)
            | sqlx::Error::PoolTimedOut
            | sqlx::Error::PoolClosed
            | sqlx::Error::Tls(_)
    )
}

pub type StoreResult<T> = Result<T, StoreError>;
