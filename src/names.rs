//! Validation and quoting of the names (tables, columns) that reach SQL.
//!
//! Every dynamic identifier passes `validate_name` once at the edge and
//! `quote_ident` whenever it is written into a statement.

use crate::error::ApiError;

/// The longest name: 48 bytes leave room for the suffixes idem adds to
/// partition and index names within Postgres's 63-byte identifier limit.
pub const MAX_NAME_LEN: usize = 48;

/// Checks `^[a-z_][a-z0-9_]{0,47}$`.
pub fn is_valid_name(name: &str) -> bool {
    let bytes = name.as_bytes();
    !bytes.is_empty()
        && bytes.len() <= MAX_NAME_LEN
        && (bytes[0].is_ascii_lowercase() || bytes[0] == b'_')
        && bytes
            .iter()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || *b == b'_')
}

pub fn validate_table_name(name: &str) -> Result<(), ApiError> {
    if is_valid_name(name) {
        Ok(())
    } else {
        Err(ApiError::InvalidName(format!(
            "table name {name:?} must match ^[a-z_][a-z0-9_]{{0,47}}$"
        )))
    }
}

/// A user column: a valid name that does not start with `_`, which is
/// reserved for idem's system columns (`_load_id`, `_row_id`, ...).
pub fn validate_column_name(name: &str) -> Result<(), ApiError> {
    if !is_valid_name(name) {
        return Err(ApiError::InvalidName(format!(
            "column name {name:?} must match ^[a-z_][a-z0-9_]{{0,47}}$"
        )));
    }
    if name.starts_with('_') {
        return Err(ApiError::InvalidName(format!(
            "column name {name:?} starts with '_', which is reserved for system columns"
        )));
    }
    Ok(())
}

/// Double-quotes an identifier for SQL. Names are validated before they get
/// here; quoting is the second fence, so a name is never spliced raw.
pub fn quote_ident(name: &str) -> String {
    format!("\"{}\"", name.replace('"', "\"\""))
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
        assert!(validate_column_name("_load_id").is_err());
        assert!(validate_column_name("load_id").is_ok());
    }

    #[test]
    fn quoting_doubles_quotes() {
        assert_eq!(quote_ident("a\"b"), "\"a\"\"b\"");
    }
}
