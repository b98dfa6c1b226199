//! What is wrong with a declaration or with a change to a table, and the
//! problem code each case answers with.

use crate::names::NameError;
use crate::problem::ProblemCode;

/// What is wrong with a declaration, or with a change to a table.
#[derive(Debug, thiserror::Error)]
pub enum SchemaError {
    #[error(transparent)]
    Name(#[from] NameError),
    /// The declaration itself is wrong (400).
    #[error("{0}")]
    Invalid(String),
    /// The declaration is fine but cannot replace the stored one (409).
    #[error("{0}")]
    Conflict(String),
    /// More columns, or wider rows, than a Postgres table can hold.
    #[error("{0}")]
    TooWide(String),
    /// A distribution Citus cannot give this table (422).
    #[error("{0}")]
    Distribution(String),
    /// A change Citus cannot make to a distributed table (409).
    #[error("{0}")]
    Citus(String),
}

impl SchemaError {
    /// The stable, machine-readable code.
    pub fn code(&self) -> ProblemCode {
        match self {
            SchemaError::Name(_) => ProblemCode::InvalidName,
            SchemaError::Invalid(_) => ProblemCode::InvalidDeclaration,
            SchemaError::Conflict(_) => ProblemCode::SchemaConflict,
            SchemaError::TooWide(_) => ProblemCode::TableTooWide,
            SchemaError::Distribution(_) => ProblemCode::InvalidDistribution,
            SchemaError::Citus(_) => ProblemCode::CitusUnsupported,
        }
    }
}

/// A declaration that is wrong in itself (400).
pub(super) fn invalid(message: String) -> SchemaError {
    SchemaError::Invalid(message)
}

/// A distribution the table cannot have (422).
pub(super) fn invalid_distribution(message: String) -> SchemaError {
    SchemaError::Distribution(message)
}
