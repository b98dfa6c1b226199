//! Names to SQL: every helper that turns a table, a column, a partition or
//! a stage into SQL text lives here, so that quoting has one owner.
//!
//! Identifiers are `Ident`s, the quoted form, built only from validated
//! `TableName`s and `ColumnName`s, the fixed schema names below, or names
//! idem makes itself (stages, partitions, system columns). The statements
//! that take a table take an `Ident`, so an unquoted name cannot reach them.
//! Values travel as bind parameters or COPY data; the few literals written
//! into SQL text (a period's bound, a column's name in a log or in a row
//! read back as JSON) are built by `period_literal` and `quote_literal`.
//! Every quoted name goes through `names::quote_ident`.

use std::borrow::Cow;
use std::fmt;

use crate::names::{quote_ident, ColumnName, TableName};
use crate::period::{Grain, Period};
use crate::schema::{ColumnType, Distribution, DistributionColumn, SchemaChange, TableDef};
use crate::store::{StoreError, StoreResult};

/// Postgres schemas that hold user data (see the first migration).
pub const DATA_SCHEMA: &str = "idem_data";
pub const PARTS_SCHEMA: &str = "idem_parts";
pub const STAGING_SCHEMA: &str = "idem_staging";
/// The schema of the tables that keep a table's versions (`"history"`).
pub const HISTORY_SCHEMA: &str = "idem_history";

/// A quoted SQL identifier, possibly schema-qualified: `idem_data."orders"`.
/// `Display` writes it as SQL.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Ident(Cow<'static, str>);

/// One of idem's own columns, quoted here once: `"_row_hash"`.
macro_rules! system_column {
    ($name:literal) => {
        Ident(Cow::Borrowed(concat!("\"", $name, "\"")))
    };
}

// idem's own columns. Every statement names them through these; a user
// column cannot take their names (`names::ColumnName` refuses a leading `_`).
/// The start of a row's period, where a table's partitions are keyed by it
/// (see `partition_key`).
pub const PART: Ident = system_column!("_part");
/// The load that wrote a row (or a version).
pub const LOAD_ID: Ident = system_column!("_load_id");
/// A row's deterministic id: a function of its identity.
pub const ROW_ID: Ident = system_column!("_row_id");
/// SHA-256 of a row's canonical encoding.
pub const ROW_HASH: Ident = system_column!("_row_hash");
/// Set only by a merge's update, to the row hash it replaced (see
/// `merge::upsert_rows`); NULL otherwise.
pub const PREV_HASH: Ident = system_column!("_prev_hash");
/// A merge's incoming row is a tombstone; a version is a removal.
pub const DELETED: Ident = system_column!("_deleted");
/// A patch's incoming row: which of its fields the body carried (a bit each).
pub const PRESENT: Ident = system_column!("_present");
/// A version's start (its cursor), and its end as read back.
pub const VALID_FROM: Ident = system_column!("_valid_from");
pub const VALID_TO: Ident = system_column!("_valid_to");
/// A version read back is its key's latest.
pub const IS_CURRENT: Ident = system_column!("_is_current");
/// When a version was recorded.
pub const RECORDED_AT: Ident = system_column!("_recorded_at");

impl Ident {
    /// A user table's name.
    pub fn table(name: &TableName) -> Ident {
        Ident(Cow::Owned(name.quoted()))
    }

    /// A user column's name.
    pub fn column(name: &ColumnName) -> Ident {
        Ident(Cow::Owned(name.quoted()))
    }

    /// A name idem makes itself, quoted; the named constructors below say
    /// which.
    fn system(name: &str) -> Ident {
        Ident(Cow::Owned(quote_ident(name)))
    }

    /// A stage's or a session's table, unqualified (`staging_table` puts it
    /// in its schema).
    pub fn stage(name: &str) -> Ident {
        Ident::system(name)
    }

    /// A partition's table, unqualified (`partition_table` puts it in its
    /// schema).
    pub fn partition(table: &TableName, period: Period) -> Ident {
        Ident::system(&partition_name(table, period))
    }

    /// An index of `table`'s that idem makes: `orders__key`.
    pub fn index(table: &TableName, suffix: &str) -> Ident {
        Ident::system(&format!("{table}__{suffix}"))
    }

    /// The `i`th column a read selects under a name of its own (`_c0`).
    pub fn read_column(i: usize) -> Ident {
        Ident::system(&format!("_c{i}"))
    }

    /// `name` in one of idem's fixed schemas.
    fn qualified(schema: &'static str, name: Ident) -> Ident {
        Ident(Cow::Owned(format!("{schema}.{}", name.0)))
    }

    /// The SQL text.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The name inside the quotes: a JSON field's name for one of idem's
    /// own columns (their names need no escaping).
    pub fn unquoted(&self) -> &str {
        self.0.trim_matches('"')
    }
}

impl fmt::Display for Ident {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// `text` as a SQL string literal, its quotes doubled.
pub fn quote_literal(text: &str) -> String {
    format!("'{}'", text.replace('\'', "''"))
}

/// Identifiers joined by `, `: a column list.
pub fn join(idents: &[Ident]) -> String {
    idents
        .iter()
        .map(Ident::as_str)
        .collect::<Vec<_>>()
        .join(", ")
}

/// `l.c = r.c and …` for each of `columns`: rows of aliases `l` and `r`
/// that agree on them.
pub fn columns_equal(l: &str, r: &str, columns: &[Ident]) -> String {
    columns
        .iter()
        .map(|c| format!("{l}.{c} = {r}.{c}"))
        .collect::<Vec<_>>()
        .join(" and ")
}

/// The parent (partitioned) table: `idem_data."orders"`.
pub fn parent_table(table: &TableName) -> Ident {
    Ident::qualified(DATA_SCHEMA, Ident::table(table))
}

/// The unique index of `table`'s parent (and, through it, of each
/// partition), qualified: `idem_data.orders__key`.
pub fn key_index(table: &TableName) -> Ident {
    Ident::qualified(DATA_SCHEMA, Ident::index(table, "key"))
}

/// The DDL of `def`'s unique index, on its parent (and so on each
/// partition): on its key, or its row id (`key_index_columns`).
pub fn create_key_index(def: &TableDef) -> String {
    format!(
        "create unique index {} on {} ({})",
        Ident::index(&def.name, "key"),
        parent_table(&def.name),
        key_index_columns(def)
    )
}

/// The table that keeps `table`'s versions: `idem_history."orders"`.
pub fn history_table(table: &TableName) -> Ident {
    Ident::qualified(HISTORY_SCHEMA, Ident::table(table))
}

/// A partition's own table name: `orders__20261012` (`…__2026101213` for an
/// hour, `…__202610` for a month). The fixed-width suffix keeps names of
/// different tables apart, and fits in 63 bytes.
pub fn partition_name(table: &TableName, period: Period) -> String {
    format!("{table}__{}", period.digits())
}

pub fn partition_table(table: &TableName, period: Period) -> Ident {
    Ident::qualified(PARTS_SCHEMA, Ident::partition(table, period))
}

/// The table that holds partition `period` of `def`: its own table, or,
/// for a reference table (which Citus cannot partition), the parent
/// itself, holding the one pseudo-partition of a plain table.
pub fn live_partition(def: &TableDef, period: Period) -> Ident {
    match def.distribution {
        Distribution::Reference => parent_table(&def.name),
        _ => partition_table(&def.name, period),
    }
}

/// A stage's table (see `write::stage::staging_name`).
pub fn staging_table(name: &str) -> Ident {
    Ident::qualified(STAGING_SCHEMA, Ident::stage(name))
}

/// The column a table's partitions are keyed on: its partition column, or
/// `_part` (see `TableDef::keyed_by_part`; a plain table's one partition,
/// `Period::whole()`, holds a fixed `_part`).
pub fn partition_key(def: &TableDef) -> Ident {
    match &def.partition_by {
        Some(column) if !def.keyed_by_part() => Ident::column(column),
        _ => PART,
    }
}

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
pub fn system_columns(def: &TableDef) -> Vec<(Ident, &'static str)> {
    let mut cols = Vec::with_capacity(4);
    if def.keyed_by_part() {
        cols.push((PART, def.partition_type().sql_name()));
    }
    cols.extend([(LOAD_ID, "uuid"), (ROW_ID, "bytea"), (ROW_HASH, "bytea")]);
    cols
}

/// The column list of a user table, system columns included, as DDL.
pub fn column_ddl(def: &TableDef) -> String {
    let user = def.columns.iter().map(|c| {
        format!(
            "{} {}{}",
            Ident::column(&c.name),
            c.ty.sql_name(),
            if c.nullable { "" } else { " not null" }
        )
    });
    let system = system_columns(def)
        .into_iter()
        .map(|(column, ty)| format!("{column} {ty} not null"));
    let replaced = std::iter::once(format!("{PREV_HASH} bytea"));
    user.chain(system)
        .chain(replaced)
        .collect::<Vec<_>>()
        .join(", ")
}

/// Every column a COPY tuple or a full row write carries: the user columns,
/// then the system columns.
pub fn all_columns(def: &TableDef) -> Vec<Ident> {
    def.columns
        .iter()
        .map(|c| Ident::column(&c.name))
        .chain(system_columns(def).into_iter().map(|(column, _)| column))
        .collect()
}

/// The columns of a partition's unique index: the partition key, then
/// the row's identity (the primary key, and the cursor where the table keeps
/// versions), or `_row_id` for a table without a key. (`_row_id` is a
/// function of the identity, so both say the same; a bigint key sorts far
/// faster than a 32-byte digest when the index is built.)
pub fn key_index_columns(def: &TableDef) -> String {
    join(&key_index_column_list(def))
}

/// The unique index's columns, one by one.
pub fn key_index_column_list(def: &TableDef) -> Vec<Ident> {
    let mut cols = vec![partition_key(def)];
    let identity = def.identity();
    if identity.is_empty() {
        // Citus enforces a unique index only where it holds the
        // distribution column; a row's id covers all its values, so the
        // index says no more than it did.
        if let Some(DistributionColumn::Column(column)) = def.distribution.hash_column() {
            cols.push(Ident::column(column));
        }
        cols.push(ROW_ID);
    } else {
        cols.extend(identity.into_iter().map(Ident::column));
    }
    cols
}

/// The user columns, quoted and comma-separated.
pub fn column_list(def: &TableDef) -> String {
    let columns: Vec<Ident> = def.columns.iter().map(|c| Ident::column(&c.name)).collect();
    join(&columns)
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

/// The label of row `alias`'s partition, as SQL: its partition key printed
/// in the grain's form (a `_part` of timestamptz is read in UTC).
pub fn label_sql(def: &TableDef, alias: &str) -> String {
    label_of(def, &format!("{alias}.{}", partition_key(def)))
}

/// The label of the partition whose key is `key` (an SQL expression); a
/// plain table's is always `Period::whole()`'s, `''`.
pub fn label_of(def: &TableDef, key: &str) -> String {
    let form = match def.grain {
        Grain::Hour => "YYYY-MM-DD\"T\"HH24",
        Grain::Day => "YYYY-MM-DD",
        Grain::Month => "YYYY-MM",
        Grain::Whole => return "''::text".into(),
    };
    match def.partition_type() {
        ColumnType::Date => format!("to_char({key}, '{form}')"),
        _ => format!("to_char({key} at time zone 'UTC', '{form}')"),
    }
}

/// A version of row `_s` as the duplicates log keeps it: `to_jsonb` writes
/// SQL NULL and a jsonb `null` alike, so a SQL-NULL jsonb column is left out
/// of the object, as the rows' export leaves it out.
pub fn logged_row(def: &TableDef) -> String {
    let sql_null_jsonb: Vec<String> = def
        .columns
        .iter()
        .filter(|c| c.ty == ColumnType::Jsonb && c.nullable)
        .map(|c| {
            format!(
                "case when _s.{} is null then {} end",
                Ident::column(&c.name),
                quote_literal(c.name.as_str())
            )
        })
        .collect();
    if sql_null_jsonb.is_empty() {
        return "to_jsonb(_s)".into();
    }
    // `jsonb - text[]` skips the array's nulls: the columns that hold a value.
    format!(
        "to_jsonb(_s) - array[{}]::text[]",
        sql_null_jsonb.join(", ")
    )
}

/// A `_row_hash` as read back: 32 bytes, as idem wrote it.
pub fn row_hash(bytes: Vec<u8>) -> StoreResult<[u8; 32]> {
    bytes
        .try_into()
        .map_err(|_| StoreError::Corrupt("a row hash is not 32 bytes"))
}

/// The DDL that makes a column change (`change`, when it is one) to `table`:
/// the table itself, or its history.
pub(crate) fn column_change_ddl(table: &Ident, change: &SchemaChange) -> Option<String> {
    match change {
        SchemaChange::AddColumn { column, ty } => Some(format!(
            "alter table {table} add column {} {}",
            Ident::column(column),
            ty.sql_name()
        )),
        SchemaChange::WidenColumn { column, from, to } => {
            Some(widen_ddl(table, &Ident::column(column), *from, *to))
        }
        _ => None,
    }
}

/// Widens `column` of `table` from type `from` to `to`.
pub(crate) fn widen_ddl(table: &Ident, column: &Ident, from: ColumnType, to: ColumnType) -> String {
    match (from, to) {
        // A date becomes its midnight in UTC, as idem reads a date sent
        // for a timestamptz, whatever the session's time zone.
        (ColumnType::Date, ColumnType::Timestamptz) => format!(
            "alter table {table} alter column {column} type timestamptz using ({column}::timestamp at time zone 'UTC')"
        ),
        _ => format!(
            "alter table {table} alter column {column} type {}",
            to.sql_name()
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn literal_doubles_quotes() {
        assert_eq!(quote_literal("it's"), "'it''s'");
        assert_eq!(quote_literal("plain"), "'plain'");
    }

    #[test]
    fn system_names_are_quoted() {
        assert_eq!(Ident::system("a\"b").to_string(), "\"a\"\"b\"");
        assert_eq!(staging_table("s_1").to_string(), "idem_staging.\"s_1\"");
    }

    #[test]
    fn system_columns_are_quoted_as_quote_ident_quotes_them() {
        for column in [
            PART,
            LOAD_ID,
            ROW_ID,
            ROW_HASH,
            PREV_HASH,
            DELETED,
            PRESENT,
            VALID_FROM,
            VALID_TO,
            IS_CURRENT,
            RECORDED_AT,
        ] {
            assert_eq!(column.as_str(), quote_ident(column.unquoted()));
            assert!(column.unquoted().starts_with('_'), "{column}");
        }
    }
}
