//! A user table's definition: columns and types, partition column, key and
//! cursor; how a declaration is validated and how one definition may evolve
//! into another.

use serde::de::{MapAccess, Visitor};
use serde::{Deserialize, Deserializer, Serialize};

use crate::names::{ColumnName, NameError, TableName};
pub use crate::period::Grain;
use crate::problem::ProblemCode;

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

/// What a write does with a field the table has no column for.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SchemaPolicy {
    /// The row is bad (422 naming the field).
    #[default]
    Freeze,
    /// The field is dropped, the rest of the row written; the receipt
    /// counts the dropped values (`discarded_fields`).
    DiscardUnknown,
    /// The table grows to fit: a new field adds a nullable column of its
    /// values' type, a value too wide for its column widens the column
    /// where that is safe (see `SchemaWants`).
    Evolve,
}

impl SchemaPolicy {
    fn parse(text: &str) -> Result<Self, SchemaError> {
        match text {
            "freeze" => Ok(SchemaPolicy::Freeze),
            "discard_unknown" => Ok(SchemaPolicy::DiscardUnknown),
            "evolve" => Ok(SchemaPolicy::Evolve),
            other => Err(invalid(format!(
                "schema {other:?} is not \"freeze\", \"discard_unknown\" or \"evolve\""
            ))),
        }
    }
}

/// What a write does with a bad row (a value that does not fit its column,
/// an unknown field under `freeze`, a broken record).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum BadRowPolicy {
    /// The whole request is refused (422 naming every bad row); nothing is
    /// written.
    #[default]
    Reject,
    /// The good rows are written; each bad one is kept, as sent, in the
    /// rejects store (`GET /rejects`), to be replayed once the table fits it.
    Quarantine,
}

impl BadRowPolicy {
    pub fn parse(text: &str) -> Result<Self, SchemaError> {
        match text {
            "reject" => Ok(BadRowPolicy::Reject),
            "quarantine" => Ok(BadRowPolicy::Quarantine),
            other => Err(invalid(format!(
                "bad_rows {other:?} is not \"reject\" or \"quarantine\""
            ))),
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            BadRowPolicy::Reject => "reject",
            BadRowPolicy::Quarantine => "quarantine",
        }
    }
}

/// What a write does with rows of one body that share a primary key.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DuplicatePolicy {
    /// One version is written: the largest cursor, then the smallest row
    /// hash; the others are dropped (and logged).
    #[default]
    KeepOne,
    /// No version of a repeated key is written; all are set aside (and
    /// logged) for a person to look at.
    Hold,
    /// Every version of a repeated key is a bad row (`bad_rows` decides).
    Reject,
}

impl DuplicatePolicy {
    pub fn parse(text: &str) -> Result<Self, SchemaError> {
        match text {
            "keep_one" => Ok(DuplicatePolicy::KeepOne),
            "hold" => Ok(DuplicatePolicy::Hold),
            "reject" => Ok(DuplicatePolicy::Reject),
            other => Err(invalid(format!(
                "duplicates {other:?} is not \"keep_one\", \"hold\" or \"reject\""
            ))),
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            DuplicatePolicy::KeepOne => "keep_one",
            DuplicatePolicy::Hold => "hold",
            DuplicatePolicy::Reject => "reject",
        }
    }
}

fn yes() -> bool {
    true
}

/// How long a quarantined row is retried by a replay: past it, the row is
/// `expired` (kept until deleted, never retried). Written and read as a
/// count of hours, days, minutes or seconds: `72h`, `7d`, `30m`, `90s`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RetryWindow {
    pub secs: u64,
}

impl Default for RetryWindow {
    fn default() -> Self {
        RetryWindow { secs: 72 * 3600 }
    }
}

impl RetryWindow {
    const UNITS: [(char, u64); 4] = [('d', 86_400), ('h', 3_600), ('m', 60), ('s', 1)];
    /// Ten years: a longer window is a mistake, not a policy.
    const MAX_SECS: u64 = 10 * 366 * 86_400;

    pub fn parse(text: &str) -> Result<Self, SchemaError> {
        let refuse = || {
            invalid(format!(
                "reject_retry_window {text:?} is not a duration such as \"72h\", \"7d\", \"30m\" or \"90s\" (at most ten years)"
            ))
        };
        let unit = text.chars().last().ok_or_else(refuse)?;
        let (_, scale) = Self::UNITS
            .iter()
            .find(|(u, _)| *u == unit)
            .ok_or_else(refuse)?;
        let count: u64 = text[..text.len() - 1].parse().map_err(|_| refuse())?;
        let secs = count.checked_mul(*scale).ok_or_else(refuse)?;
        if secs == 0 || secs > Self::MAX_SECS {
            return Err(refuse());
        }
        Ok(RetryWindow { secs })
    }

    /// The window in whole hours when it is, else minutes, else seconds
    /// (`7d` reads back as `168h`).
    pub fn text(self) -> String {
        let (unit, scale) = Self::UNITS[1..]
            .iter()
            .find(|(_, scale)| self.secs.is_multiple_of(*scale))
            .expect("every count of seconds is whole seconds");
        format!("{}{unit}", self.secs / scale)
    }
}

impl Serialize for RetryWindow {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.text())
    }
}

impl<'de> Deserialize<'de> for RetryWindow {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = String::deserialize(d)?;
        RetryWindow::parse(&text).map_err(serde::de::Error::custom)
    }
}

/// A validated table definition, as stored in the catalog.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TableDef {
    pub name: TableName,
    pub columns: Vec<Column>,
    pub partition_by: ColumnName,
    /// How much time one partition holds (days unless declared).
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
}

impl TableDef {
    pub fn column(&self, name: &str) -> Option<&Column> {
        self.columns.iter().find(|c| c.name == name)
    }

    pub fn column_index(&self, name: &str) -> Option<usize> {
        self.columns.iter().position(|c| c.name == name)
    }

    pub fn partition_index(&self) -> usize {
        self.column_index(&self.partition_by)
            .expect("a validated table has its partition column")
    }

    /// The partition column's type: `date` or `timestamptz`.
    pub fn partition_type(&self) -> ColumnType {
        self.columns[self.partition_index()].ty
    }

    /// Whether partitions are keyed by the system column `_part` (the start
    /// of each row's period) rather than by the partition column itself: all
    /// tables but a `date` column by day, whose value is its period.
    pub fn keyed_by_part(&self) -> bool {
        !(self.partition_type() == ColumnType::Date && self.grain == Grain::Day)
    }
}

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
}

impl SchemaError {
    /// The stable, machine-readable code.
    pub fn code(&self) -> ProblemCode {
        match self {
            SchemaError::Name(_) => ProblemCode::InvalidName,
            SchemaError::Invalid(_) => ProblemCode::InvalidDeclaration,
            SchemaError::Conflict(_) => ProblemCode::SchemaConflict,
            SchemaError::TooWide(_) => ProblemCode::TableTooWide,
        }
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

/// The body of `PUT /tables/{table}`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TableDeclaration {
    #[serde(deserialize_with = "ordered_columns")]
    pub columns: Vec<(String, String)>,
    #[serde(default)]
    pub partition_by: Option<String>,
    #[serde(default)]
    pub grain: Option<String>,
    #[serde(default)]
    pub primary_key: Vec<String>,
    #[serde(default)]
    pub cursor: Option<String>,
    /// `freeze` (the default), `discard_unknown` or `evolve`.
    #[serde(default)]
    pub schema: Option<String>,
    /// `reject` (the default) or `quarantine`.
    #[serde(default)]
    pub bad_rows: Option<String>,
    /// `72h` unless declared.
    #[serde(default)]
    pub reject_retry_window: Option<String>,
    /// `keep_one` (the default), `hold` or `reject`.
    #[serde(default)]
    pub duplicates: Option<String>,
    /// `true` unless declared.
    #[serde(default)]
    pub duplicate_log: Option<bool>,
}

/// `columns` is a JSON object whose order is the column order; serde_json's
/// map would sort it, so it is read pair by pair.
fn ordered_columns<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<(String, String)>, D::Error> {
    struct Ordered;
    impl<'de> Visitor<'de> for Ordered {
        type Value = Vec<(String, String)>;
        fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
            f.write_str("an object mapping column names to types")
        }
        fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
            let mut out = Vec::new();
            while let Some((k, v)) = map.next_entry::<String, String>()? {
                out.push((k, v));
            }
            Ok(out)
        }
    }
    d.deserialize_map(Ordered)
}

pub const DEFAULT_PARTITION_COLUMN: &str = "ds";

fn invalid(message: String) -> SchemaError {
    SchemaError::Invalid(message)
}

impl TableDeclaration {
    /// Validates the declaration into a definition. The partition column is
    /// added as a `date` when the declaration does not list it.
    pub fn into_def(self, table: TableName) -> Result<TableDef, SchemaError> {
        let partition_by = ColumnName::parse(
            self.partition_by
                .as_deref()
                .unwrap_or(DEFAULT_PARTITION_COLUMN),
        )?;
        let mut columns = declared_columns(&self.columns)?;
        place_partition_column(&mut columns, &partition_by)?;
        let grain = check_grain(&columns, &partition_by, self.grain.as_deref())?;
        let primary_key = key_columns(&mut columns, &self.primary_key, &partition_by)?;
        check_width(&columns)?;
        let cursor = self
            .cursor
            .as_deref()
            .map(|cursor| check_cursor(&columns, cursor, &primary_key))
            .transpose()?;
        let schema = self
            .schema
            .as_deref()
            .map(SchemaPolicy::parse)
            .transpose()?
            .unwrap_or_default();
        let bad_rows = self
            .bad_rows
            .as_deref()
            .map(BadRowPolicy::parse)
            .transpose()?
            .unwrap_or_default();
        let reject_retry_window = self
            .reject_retry_window
            .as_deref()
            .map(RetryWindow::parse)
            .transpose()?
            .unwrap_or_default();
        let duplicates = self
            .duplicates
            .as_deref()
            .map(DuplicatePolicy::parse)
            .transpose()?
            .unwrap_or_default();
        if duplicates != DuplicatePolicy::KeepOne && primary_key.is_empty() {
            return Err(invalid(format!(
                "duplicates {:?} needs a primary_key: a repeated key is what it acts on",
                duplicates.as_str()
            )));
        }
        Ok(TableDef {
            name: table,
            columns,
            partition_by,
            grain,
            primary_key,
            cursor,
            schema,
            bad_rows,
            reject_retry_window,
            duplicates,
            duplicate_log: self.duplicate_log.unwrap_or(true),
        })
    }
}

/// The declared columns, in order, all nullable for now.
fn declared_columns(declared: &[(String, String)]) -> Result<Vec<Column>, SchemaError> {
    if declared.is_empty() {
        return Err(invalid("a table needs at least one column".into()));
    }
    let mut columns: Vec<Column> = Vec::with_capacity(declared.len() + 1);
    for (name, ty) in declared {
        let name = ColumnName::parse(name)?;
        if columns.iter().any(|c| c.name == name) {
            return Err(invalid(format!("column {name:?} is declared twice")));
        }
        let ty = ColumnType::parse(ty).ok_or_else(|| {
            invalid(format!(
                "column {name:?} has unsupported type {ty:?}; supported: text, bigint, integer, double precision, numeric, boolean, date, timestamptz, jsonb, uuid"
            ))
        })?;
        columns.push(Column {
            name,
            ty,
            nullable: true,
        });
    }
    Ok(columns)
}

/// The partition column is a non-null date, declared or added at the end.
fn place_partition_column(
    columns: &mut Vec<Column>,
    partition_by: &ColumnName,
) -> Result<(), SchemaError> {
    match columns.iter_mut().find(|c| &c.name == partition_by) {
        Some(c) if c.ty != ColumnType::Date && c.ty != ColumnType::Timestamptz => Err(invalid(
            format!("partition column {partition_by:?} must be of type date or timestamptz"),
        )),
        Some(c) => {
            c.nullable = false;
            Ok(())
        }
        None => {
            columns.push(Column {
                name: partition_by.clone(),
                ty: ColumnType::Date,
                nullable: false,
            });
            Ok(())
        }
    }
}

/// The declared grain, or days; a `date` column cannot be cut in hours.
fn check_grain(
    columns: &[Column],
    partition_by: &ColumnName,
    declared: Option<&str>,
) -> Result<Grain, SchemaError> {
    let grain = match declared {
        None => Grain::Day,
        Some(text) => Grain::parse(text)
            .ok_or_else(|| invalid(format!("grain {text:?} is not hour, day or month")))?,
    };
    let ty = columns
        .iter()
        .find(|c| &c.name == partition_by)
        .map(|c| c.ty);
    if grain == Grain::Hour && ty == Some(ColumnType::Date) {
        return Err(invalid(format!(
            "partition column {partition_by:?} is a date; an hourly table needs a timestamptz column"
        )));
    }
    Ok(grain)
}

/// The primary key's columns, made non-null.
fn key_columns(
    columns: &mut [Column],
    declared: &[String],
    partition_by: &ColumnName,
) -> Result<Vec<ColumnName>, SchemaError> {
    let mut key: Vec<ColumnName> = Vec::with_capacity(declared.len());
    for name in declared {
        if partition_by == name.as_str() {
            return Err(invalid(format!(
                "the partition column {name:?} is implied in the key; list only the business key"
            )));
        }
        let Some(c) = columns.iter_mut().find(|c| c.name == name.as_str()) else {
            return Err(invalid(format!(
                "primary key column {name:?} is not a declared column"
            )));
        };
        if c.ty == ColumnType::Jsonb {
            return Err(invalid(format!(
                "primary key column {name:?} cannot be jsonb"
            )));
        }
        if key.contains(&c.name) {
            return Err(invalid("primary_key lists a column twice".into()));
        }
        c.nullable = false;
        key.push(c.name.clone());
    }
    Ok(key)
}

/// A cursor orders versions of one key, so it needs a key, and an order.
fn check_cursor(
    columns: &[Column],
    cursor: &str,
    primary_key: &[ColumnName],
) -> Result<ColumnName, SchemaError> {
    let Some(c) = columns.iter().find(|c| c.name == cursor) else {
        return Err(invalid(format!(
            "cursor column {cursor:?} is not a declared column"
        )));
    };
    if c.ty == ColumnType::Jsonb || c.ty == ColumnType::Boolean {
        return Err(invalid(format!(
            "cursor column {cursor:?} must be an orderable type"
        )));
    }
    if primary_key.is_empty() {
        return Err(invalid(
            "a cursor needs a primary_key: it orders versions of one key".into(),
        ));
    }
    if primary_key.contains(&c.name) {
        return Err(invalid(format!(
            "cursor column {cursor:?} cannot be part of the key"
        )));
    }
    Ok(c.name.clone())
}

/// What a body under `schema: evolve` needs of its table: columns for the
/// fields it lacks, with their values' type, and wider types for columns
/// some of whose values do not fit.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SchemaWants {
    /// `None`: only nulls seen so far (made text if nothing else comes).
    pub add: std::collections::BTreeMap<ColumnName, Option<ColumnType>>,
    pub widen: std::collections::BTreeMap<ColumnName, ColumnType>,
    /// The first field whose name no column can have: the body is refused
    /// (`invalid_name`), as a first write to a new table would be.
    pub refused: Option<NameError>,
}

impl SchemaWants {
    pub fn is_empty(&self) -> bool {
        self.add.is_empty() && self.widen.is_empty() && self.refused.is_none()
    }

    /// A field that cannot become a column, for the name's reason.
    pub fn refuse_name(&mut self, error: NameError) {
        self.refused.get_or_insert(error);
    }

    /// A column for field `name`, holding a value of type `ty` (`None`: a
    /// null, which any type holds).
    pub fn add_column(&mut self, name: ColumnName, ty: Option<ColumnType>) {
        let slot = self.add.entry(name).or_insert(ty);
        *slot = match (*slot, ty) {
            (Some(a), Some(b)) => Some(wider_of(a, b)),
            (a, b) => a.or(b),
        };
    }

    /// Column `name` widened to at least `to`.
    pub fn widen_column(&mut self, name: ColumnName, to: ColumnType) {
        let slot = self.widen.entry(name).or_insert(to);
        *slot = wider_of(*slot, to);
    }

    /// What `from` lacks of `to`: its columns, and its wider types.
    pub fn to_reach(from: &TableDef, to: &TableDef) -> Self {
        let mut wants = SchemaWants::default();
        for column in &to.columns {
            match from.column(&column.name) {
                None => wants.add_column(column.name.clone(), Some(column.ty)),
                Some(have) if have.ty.widens_to(column.ty) => {
                    wants.widen_column(column.name.clone(), column.ty)
                }
                Some(_) => {}
            }
        }
        wants
    }

    /// The changes that give `def` what is wanted and it lacks (another
    /// writer may have given it already); a widening that is not safe is
    /// left out, and the rows that needed it stay bad.
    pub fn changes_for(&self, def: &TableDef) -> Vec<SchemaChange> {
        let mut changes = Vec::new();
        // A column another writer added meanwhile, narrower than this body's
        // values, is widened as if it had been there.
        let mut widen = self.widen.clone();
        for (name, ty) in &self.add {
            if let (Some(_), Some(ty)) = (def.column(name), ty) {
                let slot = widen.entry(name.clone()).or_insert(*ty);
                *slot = wider_of(*slot, *ty);
            }
        }
        for (name, to) in &widen {
            let Some(column) = def.column(name) else {
                continue;
            };
            let fixed = *name == def.partition_by || def.primary_key.contains(name);
            if !fixed && column.ty.widens_to(*to) {
                changes.push(SchemaChange::WidenColumn {
                    column: name.clone(),
                    from: column.ty,
                    to: *to,
                });
            }
        }
        for (name, ty) in &self.add {
            if def.column(name).is_none() {
                changes.push(SchemaChange::AddColumn {
                    column: name.clone(),
                    ty: ty.unwrap_or(ColumnType::Text),
                });
            }
        }
        changes
    }
}

/// The type that holds values of both `a` and `b`: the wider when one
/// widens to the other, text otherwise.
fn wider_of(a: ColumnType, b: ColumnType) -> ColumnType {
    if a == b || b.widens_to(a) {
        a
    } else if a.widens_to(b) {
        b
    } else {
        ColumnType::Text
    }
}

/// One safe change from a stored definition towards a declared one.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(tag = "change", rename_all = "snake_case")]
pub enum SchemaChange {
    AddColumn {
        column: ColumnName,
        #[serde(rename = "type")]
        ty: ColumnType,
    },
    WidenColumn {
        column: ColumnName,
        from: ColumnType,
        to: ColumnType,
    },
    SetCursor {
        cursor: Option<ColumnName>,
    },
    SetSchemaPolicy {
        schema: SchemaPolicy,
    },
    SetBadRowPolicy {
        bad_rows: BadRowPolicy,
    },
    SetRejectRetryWindow {
        reject_retry_window: RetryWindow,
    },
    SetDuplicatePolicy {
        duplicates: DuplicatePolicy,
    },
    SetDuplicateLog {
        duplicate_log: bool,
    },
}

impl SchemaChange {
    /// Whether the change is to the definition only, not to the table's
    /// Postgres shape.
    pub fn is_policy(&self) -> bool {
        !matches!(
            self,
            SchemaChange::AddColumn { .. } | SchemaChange::WidenColumn { .. }
        )
    }
}

/// The safe changes that turn `old` into `new`, or a 409 saying why there is
/// none. Column order in the declaration does not matter for existing columns.
pub fn plan_changes(old: &TableDef, new: &TableDef) -> Result<Vec<SchemaChange>, SchemaError> {
    let conflict = SchemaError::Conflict;
    if old.partition_by != new.partition_by {
        return Err(conflict(format!(
            "the partition column is {:?}; changing it needs a new table",
            old.partition_by
        )));
    }
    if old.grain != new.grain {
        return Err(conflict(format!(
            "the grain is {}; changing it needs a new table",
            old.grain.as_str()
        )));
    }
    if old.primary_key != new.primary_key {
        return Err(conflict(format!(
            "the primary key is {:?}; changing the key is unsafe",
            old.primary_key
        )));
    }
    let mut changes = Vec::new();
    for col in &old.columns {
        let Some(declared) = new.column(&col.name) else {
            return Err(conflict(format!(
                "column {:?} exists and is not in the declaration; dropping a column is unsafe",
                col.name
            )));
        };
        if declared.ty != col.ty {
            if col.ty.widens_to(declared.ty) {
                changes.push(SchemaChange::WidenColumn {
                    column: col.name.clone(),
                    from: col.ty,
                    to: declared.ty,
                });
            } else {
                return Err(conflict(format!(
                    "column {:?} is {}; changing it to {} may lose data",
                    col.name,
                    col.ty.sql_name(),
                    declared.ty.sql_name()
                )));
            }
        }
    }
    for col in &new.columns {
        if old.column(&col.name).is_none() {
            changes.push(SchemaChange::AddColumn {
                column: col.name.clone(),
                ty: col.ty,
            });
        }
    }
    check_width(&old.apply(&changes).columns)?;
    changes.extend(policy_changes(old, new));
    Ok(changes)
}

/// The changes of `new`'s cursor and policies from `old`'s: to the
/// definition alone.
fn policy_changes(old: &TableDef, new: &TableDef) -> Vec<SchemaChange> {
    let mut changes = Vec::new();
    if old.cursor != new.cursor {
        changes.push(SchemaChange::SetCursor {
            cursor: new.cursor.clone(),
        });
    }
    if old.schema != new.schema {
        changes.push(SchemaChange::SetSchemaPolicy { schema: new.schema });
    }
    if old.bad_rows != new.bad_rows {
        changes.push(SchemaChange::SetBadRowPolicy {
            bad_rows: new.bad_rows,
        });
    }
    if old.reject_retry_window != new.reject_retry_window {
        changes.push(SchemaChange::SetRejectRetryWindow {
            reject_retry_window: new.reject_retry_window,
        });
    }
    if old.duplicates != new.duplicates {
        changes.push(SchemaChange::SetDuplicatePolicy {
            duplicates: new.duplicates,
        });
    }
    if old.duplicate_log != new.duplicate_log {
        changes.push(SchemaChange::SetDuplicateLog {
            duplicate_log: new.duplicate_log,
        });
    }
    changes
}

impl TableDef {
    /// The definition after `changes` (as planned by `plan_changes`).
    pub fn apply(&self, changes: &[SchemaChange]) -> TableDef {
        let mut def = self.clone();
        for change in changes {
            match change {
                SchemaChange::AddColumn { column, ty } => def.columns.push(Column {
                    name: column.clone(),
                    ty: *ty,
                    nullable: true,
                }),
                SchemaChange::WidenColumn { column, to, .. } => {
                    if let Some(c) = def.columns.iter_mut().find(|c| &c.name == column) {
                        c.ty = *to;
                    }
                }
                SchemaChange::SetCursor { cursor } => def.cursor = cursor.clone(),
                SchemaChange::SetSchemaPolicy { schema } => def.schema = *schema,
                SchemaChange::SetBadRowPolicy { bad_rows } => def.bad_rows = *bad_rows,
                SchemaChange::SetRejectRetryWindow {
                    reject_retry_window,
                } => def.reject_retry_window = *reject_retry_window,
                SchemaChange::SetDuplicatePolicy { duplicates } => def.duplicates = *duplicates,
                SchemaChange::SetDuplicateLog { duplicate_log } => {
                    def.duplicate_log = *duplicate_log
                }
            }
        }
        def
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn decl(json: &str) -> TableDeclaration {
        serde_json::from_str(json).unwrap()
    }

    #[test]
    fn declaration_keeps_column_order_and_adds_partition_column() {
        let def = decl(r#"{"columns":{"z":"text","a":"bigint"},"primary_key":["a"]}"#)
            .into_def(TableName::parse("t").unwrap())
            .unwrap();
        let names: Vec<_> = def.columns.iter().map(|c| c.name.as_str()).collect();
        assert_eq!(names, ["z", "a", "ds"]);
        assert!(!def.column("a").unwrap().nullable);
        assert!(!def.column("ds").unwrap().nullable);
        assert!(def.column("z").unwrap().nullable);
    }

    #[test]
    fn tables_postgres_cannot_hold_are_refused_up_front() {
        let wide = |n: usize, ty: &str| {
            let columns: Vec<String> = (0..n).map(|i| format!("\"c{i}\":\"{ty}\"")).collect();
            decl(&format!("{{\"columns\":{{{}}}}}", columns.join(",")))
                .into_def(TableName::parse("t").unwrap())
        };
        assert!(matches!(wide(2000, "text"), Err(SchemaError::TooWide(_))));
        assert!(matches!(wide(1500, "bigint"), Err(SchemaError::TooWide(_))));
        assert!(wide(900, "bigint").is_ok());
        assert!(wide(1500, "text").is_ok());
        assert!(wide(1595, "jsonb").is_ok());
        assert!(matches!(wide(1596, "text"), Err(SchemaError::TooWide(_))));
    }

    #[test]
    fn changing_the_key_or_narrowing_is_refused_and_widening_is_planned() {
        let old = decl(r#"{"columns":{"id":"integer","n":"integer"},"primary_key":["id"]}"#)
            .into_def(TableName::parse("t").unwrap())
            .unwrap();
        let rekeyed = decl(r#"{"columns":{"id":"integer","n":"integer"},"primary_key":["n"]}"#)
            .into_def(TableName::parse("t").unwrap())
            .unwrap();
        assert!(plan_changes(&old, &rekeyed).is_err());
        let widened =
            decl(r#"{"columns":{"id":"integer","n":"bigint","m":"text"},"primary_key":["id"]}"#)
                .into_def(TableName::parse("t").unwrap())
                .unwrap();
        let changes = plan_changes(&old, &widened).unwrap();
        assert_eq!(changes.len(), 2);
        assert!(plan_changes(&widened, &old).is_err());
    }

    #[test]
    fn a_retry_window_reads_any_unit_and_writes_whole_hours_if_it_can() {
        for (text, secs, shown) in [
            ("72h", 259_200, "72h"),
            ("90m", 5_400, "90m"),
            ("7d", 604_800, "168h"),
            ("3601s", 3_601, "3601s"),
        ] {
            let window = RetryWindow::parse(text).unwrap();
            assert_eq!(window.secs, secs);
            assert_eq!(window.text(), shown);
            assert_eq!(RetryWindow::parse(shown).unwrap(), window);
        }
        for bad in [
            "",
            "h",
            "0h",
            "-1h",
            "3w",
            "1.5h",
            "99999999999999999d",
            "4000d",
        ] {
            assert!(RetryWindow::parse(bad).is_err(), "{bad:?}");
        }
        assert_eq!(RetryWindow::default().text(), "72h");
    }
}
