//! What an Arrow field says beyond its data type, as idem writes it in a
//! Parquet file or Arrow stream it answers and reads it in a body: the one
//! owner of these names and values, so that a file idem wrote loads back
//! with the types it was read with.

/// The field metadata key naming a canonical extension type.
pub const EXTENSION_NAME_KEY: &str = "ARROW:extension:name";
/// The canonical extension of a text column that holds JSON (`jsonb`).
pub const JSON_EXTENSION: &str = "arrow.json";
/// The canonical extension of a 16-byte fixed-size binary uuid.
pub const UUID_EXTENSION: &str = "arrow.uuid";
/// idem's own key, on a text column that holds another type's text: a
/// `numeric` column whose values no one decimal type holds exactly (their
/// scales differ, or they have more than 38 digits, or `NaN`).
pub const IDEM_TYPE_KEY: &str = "idem.type";

/// Postgres's `infinity` and `-infinity` as an Arrow date (days) or
/// timestamp (microseconds): the largest value and its negation, as DuckDB
/// writes them. No finite date or instant Postgres holds comes near.
pub const DATE_INFINITY: i32 = i32::MAX;
pub const TIMESTAMP_INFINITY: i64 = i64::MAX;
