//! The names (tables, columns) that reach SQL: validated once, where they
//! enter, into types that cannot hold anything else, and quoted in one place.
//!
//! `TableName::parse` and `ColumnName::parse` are the only ways to make one
//! (deserializing a stored definition goes through them too), so a string
//! that was never checked cannot reach a statement: the store takes these
//! types, never `&str`, for user identifiers.

use std::fmt;
use std::ops::Deref;

use serde::{Deserialize, Serialize};

/// The longest name: 48 bytes leave room for the suffixes idem adds to
/// partition and index names within Postgres's 63-byte identifier limit.
pub const MAX_NAME_LEN: usize = 48;

/// A name that does not follow the contract, and why.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{kind} name {name:?} {reason}")]
pub struct NameError {
    pub kind: &'static str,
    pub name: String,
    pub reason: &'static str,
}

const PATTERN: &str = "must match ^[a-z_][a-z0-9_]{0,47}$";

/// Postgres's system columns: every table has them, so no column can take
/// their names (`oid` has been an ordinary name since Postgres 12).
const SYSTEM_COLUMNS: [&str; 6] = ["tableoid", "xmin", "cmin", "xmax", "cmax", "ctid"];

/// Checks `^[a-z_][a-z0-9_]{0,47}$`.
fn is_valid_name(name: &str) -> bool {
    let bytes = name.as_bytes();
    !bytes.is_empty()
        && bytes.len() <= MAX_NAME_LEN
        && (bytes[0].is_ascii_lowercase() || bytes[0] == b'_')
        && bytes
            .iter()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || *b == b'_')
}

/// Double-quotes an identifier for SQL. Callers pass validated names or
/// names idem made itself from them; quoting is the second fence, so a name
/// is never spliced raw.
pub(crate) fn quote_ident(name: &str) -> String {
    format!("\"{}\"", name.replace('"', "\"\""))
}

macro_rules! name_type {
    ($(#[$doc:meta])* $name:ident) => {
        $(#[$doc])*
        #[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
        #[serde(try_from = "String", into = "String")]
        pub struct $name(String);

        impl $name {
            pub fn as_str(&self) -> &str {
                &self.0
            }

            /// The name as a quoted SQL identifier.
            pub fn quoted(&self) -> String {
                quote_ident(&self.0)
            }
        }

        impl Deref for $name {
            type Target = str;
            fn deref(&self) -> &str {
                &self.0
            }
        }

        impl AsRef<str> for $name {
            fn as_ref(&self) -> &str {
                &self.0
            }
        }

        // Shown as the string it is, so messages read `column "amount"`.
        impl fmt::Debug for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                fmt::Debug::fmt(&self.0, f)
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(&self.0)
            }
        }

        impl PartialEq<str> for $name {
            fn eq(&self, other: &str) -> bool {
                self.0 == other
            }
        }

        impl PartialEq<&str> for $name {
            fn eq(&self, other: &&str) -> bool {
                self.0 == *other
            }
        }

        impl TryFrom<String> for $name {
            type Error = NameError;
            fn try_from(name: String) -> Result<Self, NameError> {
                Self::parse(&name)
            }
        }

        impl From<$name> for String {
            fn from(name: $name) -> String {
                name.0
            }
        }
    };
}

name_type!(
    /// A user table's name.
    TableName
);

name_type!(
    /// A user column's name: never one that starts with `_`, which is
    /// reserved for idem's system columns (`_load_id`, `_row_id`, ...).
    ColumnName
);

impl TableName {
    pub fn parse(name: &str) -> Result<TableName, NameError> {
        let error = |reason| NameError {
            kind: "table",
            name: truncated(name),
            reason,
        };
        if !is_valid_name(name) {
            return Err(error(PATTERN));
        }
        // Postgres's own namespaces: legal inside idem's schemas, but a
        // table by that name reads as if it were the system's.
        if name.starts_with("pg_") || name == "information_schema" {
            return Err(error(
                "is reserved (pg_* and information_schema name Postgres's own)",
            ));
        }
        Ok(TableName(name.to_string()))
    }
}

/// A name as quoted back in an error: never more than a line of it.
fn truncated(name: &str) -> String {
    const MAX: usize = 2 * MAX_NAME_LEN;
    match name.char_indices().nth(MAX) {
        Some((cut, _)) => format!("{}…", &name[..cut]),
        None => name.to_string(),
    }
}

impl ColumnName {
    pub fn parse(name: &str) -> Result<ColumnName, NameError> {
        let error = |reason| NameError {
            kind: "column",
            name: truncated(name),
            reason,
        };
        if !is_valid_name(name) {
            return Err(error(PATTERN));
        }
        if name.starts_with('_') {
            return Err(error(
                "starts with '_', which is reserved for system columns",
            ));
        }
        if SYSTEM_COLUMNS.contains(&name) {
            return Err(error(
                "is reserved: Postgres gives every table a system column of that name",
            ));
        }
        Ok(ColumnName(name.to_string()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_follow_the_contract_pattern() {
        assert!(is_valid_name("orders"));
        assert!(is_valid_name("_x9"));
        assert!(is_valid_name(&"a".repeat(48)));
        assert!(!is_valid_name(&"a".repeat(49)));
        assert!(!is_valid_name("Orders"));
        assert!(!is_valid_name("9lives"));
        assert!(!is_valid_name("a-b"));
        assert!(!is_valid_name("a\"; drop table x; --"));
        assert!(!is_valid_name(""));
    }

    #[test]
    fn system_prefix_is_reserved_for_columns() {
        assert!(ColumnName::parse("_load_id").is_err());
        assert!(ColumnName::parse("load_id").is_ok());
        assert!(TableName::parse("_staging").is_ok());
    }

    #[test]
    fn postgres_system_column_names_are_refused_for_columns_with_the_reason() {
        for name in ["xmin", "xmax", "cmin", "cmax", "ctid", "tableoid"] {
            let err = ColumnName::parse(name).unwrap_err();
            assert!(err.to_string().contains("system column"), "{err}");
            assert!(
                TableName::parse(name).is_ok(),
                "a table may be called {name}"
            );
        }
        assert!(ColumnName::parse("oid").is_ok());
        assert!(ColumnName::parse("xmin_at").is_ok());
    }

    #[test]
    fn postgres_namespaces_are_reserved_for_tables() {
        assert!(TableName::parse("pg_catalog").is_err());
        assert!(TableName::parse("information_schema").is_err());
        assert!(TableName::parse("pgx").is_ok());
        assert!(ColumnName::parse("pg_size").is_ok());
    }

    #[test]
    fn a_refused_name_is_quoted_back_short() {
        let err = ColumnName::parse(&"X".repeat(10_000)).unwrap_err();
        assert!(err.to_string().len() < 300, "{err}");
    }

    #[test]
    fn a_stored_name_is_checked_again_when_read() {
        assert!(serde_json::from_str::<TableName>("\"orders\"").is_ok());
        assert!(serde_json::from_str::<TableName>("\"x\\\"; drop\"").is_err());
    }

    #[test]
    fn quoting_doubles_quotes() {
        assert_eq!(quote_ident("a\"b"), "\"a\"\"b\"");
    }
}
