//! Text values as idem takes them: JSON strings unescaped, NUL refused,
//! and the messages that quote a refused value.

use std::borrow::Cow;

use crate::schema::ColumnType;

/// A raw JSON string's value, borrowed when it has no escapes.
pub(super) fn json_str(raw: &str) -> Result<Cow<'_, str>, String> {
    let inner = &raw[1..raw.len() - 1];
    if inner.contains('\\') {
        let unescaped = serde_json::from_str::<String>(raw).map_err(|e| e.to_string())?;
        Ok(Cow::Owned(unescaped))
    } else {
        Ok(Cow::Borrowed(inner))
    }
}

/// A value quoted in a message: its first 40 characters.
pub(super) fn snippet(s: &str) -> String {
    let mut out: String = s.chars().take(40).collect();
    if out.len() < s.len() {
        out.push('…');
    }
    format!("{out:?}")
}

/// The message for a value that is not of type `ty`.
pub(super) fn expected(ty: ColumnType, got: &str) -> String {
    format!("expected {}, got {}", ty.sql_name(), snippet(got))
}

pub(super) const NUL_REFUSED: &str =
    "contains a NUL character (\\u0000), which Postgres cannot store";
