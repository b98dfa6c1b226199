//! A table's shape as stored in the catalog: the column types idem knows,
//! `Column`, `TableDef` and its lookups, and the limits of what Postgres can
//! hold (`check_width`). Validating a declaration into a `TableDef` lives in
//! `declaration`, evolving one into another in `change`.

use serde::{Deserialize, Serialize};

use super::audits::Audits;
use super::distribution::{Distribution, DistributionColumn};
use super::error::SchemaError;
use super::policy::{
    BadRowPolicy, DuplicatePolicy, HistoryKind, MergeMode, RetryWindow, SchemaPolicy,
};
use super::retention::Retention;
use crate::names::{ColumnName, TableName};
use crate::period::Grain;

/// The column types idem validates and stores.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ColumnType {
    Text,
    Bigint,
    Integer,
    #[serde(rename = "double precision")]
    DoublePrecision,
    Numeric,
    Boolean,
    Date,
    Timestamptz,
    Jsonb,
    Uuid,
}

impl ColumnType {
    /// Parses a Postgres type name, accepting the usual aliases.
    pub fn parse(name: &str) -> Option<Self> {
        let lower = name.trim().to_ascii_lowercase();
        Some(match lower.as_str() {
            "text" | "varchar" | "character varying" | "string" => Self::Text,
            "bigint" | "int8" => Self::Bigint,
            "integer" | "int" | "int4" => Self::Integer,
            "double precision" | "float8" | "double" | "float" => Self::DoublePrecision,
            "numeric" | "decimal" => Self::Numeric,
            "boolean" | "bool" => Self::Boolean,
            "date" => Self::Date,
            "timestamptz" | "timestamp with time zone" => Self::Timestamptz,
            "jsonb" | "json" => Self::Jsonb,
            "uuid" => Self::Uuid,
            _ => return None,
        })
    }

    pub fn sql_name(self) -> &'static str {
        match self {
            Self::Text => "text",
            Self::Bigint => "bigint",
            Self::Integer => "integer",
            Self::DoublePrecision => "double precision",
            Self::Numeric => "numeric",
            Self::Boolean => "boolean",
            Self::Date => "date",
            Self::Timestamptz => "timestamptz",
            Self::Jsonb => "jsonb",
            Self::Uuid => "uuid",
        }
    }

    /// The bytes a value takes in a row and its alignment, for a type of
    /// fixed width; `None` for text, numeric and jsonb, whose values take
    /// what they take: a short one its bytes, a long one the 18-byte
    /// pointer it leaves once moved out of line (TOAST).
    pub fn fixed_width(self) -> Option<(usize, usize)> {
        match self {
            Self::Bigint | Self::DoublePrecision | Self::Timestamptz => Some((8, 8)),
            Self::Integer | Self::Date => Some((4, 4)),
            Self::Boolean => Some((1, 1)),
            Self::Uuid => Some((16, 1)),
            Self::Text | Self::Numeric | Self::Jsonb => None,
        }
    }

    /// Whether every value of `self` converts losslessly to `to`, so that
    /// `ALTER COLUMN ... TYPE to` is a safe change.
    pub fn widens_to(self, to: Self) -> bool {
        use ColumnType::*;
        matches!(
            (self, to),
            (Integer, Bigint)
                | (Integer, Numeric)
                | (Bigint, Numeric)
                | (Integer, DoublePrecision)
                | (Date, Timestamptz)
        )
    }
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Column {
    pub name: ColumnName,
    #[serde(rename = "type")]
    pub ty: ColumnType,
    pub nullable: bool,
}

fn yes() -> bool {
    true
}

/// A validated table definition, as stored in the catalog.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TableDef {
    pub name: TableName,
    pub columns: Vec<Column>,
    /// The partition column; `None` for a plain table, which holds one
    /// pseudo-partition, `Period::whole()`, keyed by `_part`.
    pub partition_by: Option<ColumnName>,
    /// How much time one partition holds (days unless declared; `whole`
    /// for a plain table).
    #[serde(default)]
    pub grain: Grain,
    pub primary_key: Vec<ColumnName>,
    pub cursor: Option<ColumnName>,
    /// Unknown fields (definitions stored before the policy existed read
    /// as `freeze`, what they did).
    #[serde(default)]
    pub schema: SchemaPolicy,
    /// Bad rows (definitions stored before the policy existed read as
    /// `reject`, what they did).
    #[serde(default)]
    pub bad_rows: BadRowPolicy,
    #[serde(default)]
    pub reject_retry_window: RetryWindow,
    /// Repeated keys in one body.
    #[serde(default)]
    pub duplicates: DuplicatePolicy,
    /// Whether versions set aside by `duplicates` are logged (`GET
    /// /duplicates`).
    #[serde(default = "yes")]
    pub duplicate_log: bool,
    /// Checks a load's staged rows must pass before they are published
    /// (boxed: most tables have none, and a definition travels in every
    /// write's request).
    #[serde(default, skip_serializing_if = "Audits::is_empty")]
    pub audits: Box<Audits>,
    /// A POST's mode when it names none (`None`: merge with a key, append
    /// without). `versions` also decides how rows are stored: every version
    /// of a key, identified by key and cursor (see `identity`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub write_mode: Option<MergeMode>,
    /// What the table keeps beside its current rows (`None`: nothing).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub history: Option<HistoryKind>,
    /// Where its rows live on a Citus cluster (definitions stored before
    /// distribution existed read as `local`, what they were).
    #[serde(default = "local")]
    pub distribution: Distribution,
    /// How long a partition is kept once its period ended (`None`: for
    /// ever); see `retention`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retention: Option<Retention>,
}

fn local() -> Distribution {
    Distribution::Local
}

impl TableDef {
    pub fn column(&self, name: &str) -> Option<&Column> {
        self.columns.iter().find(|c| c.name == name)
    }

    pub fn column_index(&self, name: &str) -> Option<usize> {
        self.columns.iter().position(|c| c.name == name)
    }

    /// The partition column's index; none for a plain table.
    pub fn partition_index(&self) -> Option<usize> {
        let column = self.partition_by.as_ref()?;
        let index = self.column_index(column);
        debug_assert!(
            index.is_some(),
            "a validated table has its partition column"
        );
        index
    }

    /// Whether the table stores every version of a key (`"write_mode":
    /// "versions"`), not one row per key.
    pub fn keeps_versions(&self) -> bool {
        self.write_mode == Some(MergeMode::Versions)
    }

    /// The columns that identify a stored row within its partition: the
    /// primary key, and the cursor too where the table keeps versions
    /// (empty for a table without a key).
    pub fn identity(&self) -> Vec<&ColumnName> {
        let cursor = self.cursor.as_ref().filter(|_| self.keeps_versions());
        self.primary_key.iter().chain(cursor).collect()
    }

    /// Whether `column` is the table's hash distribution column.
    pub fn distributed_by(&self, column: &ColumnName) -> bool {
        matches!(
            self.distribution.hash_column(),
            Some(DistributionColumn::Column(c)) if c == column
        )
    }

    /// Whether the table has no partition column (`"partition_by": null`).
    pub fn is_plain(&self) -> bool {
        self.partition_by.is_none()
    }

    /// The type of the partition key: the partition column's, `date` or
    /// `timestamptz`; a plain table's `_part` is a `date`.
    pub fn partition_type(&self) -> ColumnType {
        self.partition_index()
            .map_or(ColumnType::Date, |i| self.columns[i].ty)
    }

    /// Whether partitions are keyed by the system column `_part` (the start
    /// of each row's period) rather than by the partition column itself: all
    /// tables but a `date` column by day, whose value is its period, and
    /// plain tables, which have no partition column.
    pub fn keyed_by_part(&self) -> bool {
        self.is_plain() || !(self.partition_type() == ColumnType::Date && self.grain == Grain::Day)
    }
}

/// Postgres's limit on a table's columns; idem adds `_load_id`, `_row_id`,
/// `_row_hash`, and a merge's incoming rows `_deleted`.
pub const MAX_USER_COLUMNS: usize = 1600 - 4;

/// The most a row may take: Postgres's 8 kB page, less its headers
/// (`MaxHeapTupleSize`; a row must fit one page once long values are moved
/// out).
pub const MAX_ROW_BYTES: usize = 8160;

/// Checks that a table of `columns` can exist and hold a row: at most
/// `MAX_USER_COLUMNS`, and a row of all its fixed-width values fits a page.
/// Text, numeric and jsonb values are not counted: whether a row of them
/// fits depends on the values sent (`ingest::tuple_size` checks each row),
/// and a table of 1,500 text columns holds rows of short or long values.
pub fn check_width(columns: &[Column]) -> Result<(), SchemaError> {
    if columns.len() > MAX_USER_COLUMNS {
        return Err(SchemaError::TooWide(format!(
            "{} columns; a table holds at most {MAX_USER_COLUMNS}",
            columns.len()
        )));
    }
    // Row header and null bitmap, then idem's own columns (a uuid and two
    // 32-byte digests), then the user columns, each aligned.
    let mut width = 24 + columns.len().div_ceil(8) + 16 + 2 * 33;
    for (size, align) in columns.iter().filter_map(|c| c.ty.fixed_width()) {
        width = width.next_multiple_of(align) + size;
    }
    if width > MAX_ROW_BYTES {
        return Err(SchemaError::TooWide(format!(
            "a row of these columns' fixed-width values takes {width} bytes; Postgres holds at most {MAX_ROW_BYTES}"
        )));
    }
    Ok(())
}
