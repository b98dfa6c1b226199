//! The body of `PUT /tables/{table}` and its validation into a `TableDef`:
//! column types, the partition column (added as `ds` when not declared), the
//! grain, key and cursor checks, and the policies' defaults.

use serde::de::{MapAccess, Visitor};
use serde::{Deserialize, Deserializer};

use super::audits::Audits;
use super::distribution::{Distribution, DistributionColumn, ROW_ID_COLUMN};
use super::error::{invalid, invalid_distribution, SchemaError};
use super::policy::{
    BadRowPolicy, DuplicatePolicy, HistoryKind, MergeMode, RetryWindow, SchemaPolicy,
};
use super::retention::Retention;
use super::table::{check_width, Column, ColumnType, TableDef};
use crate::names::{ColumnName, TableName};
use crate::period::Grain;

/// The body of `PUT /tables/{table}`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TableDeclaration {
    #[serde(deserialize_with = "ordered_columns")]
    pub columns: Vec<(String, String)>,
    /// Absent: `ds`; `null`: a plain table, without partitions.
    #[serde(default, deserialize_with = "present")]
    pub partition_by: Option<Option<String>>,
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
    /// Checks before a load is published (see `Audits`).
    #[serde(default)]
    pub audits: Option<serde_json::Value>,
    /// A POST's mode when it names none; `versions` keeps every version.
    #[serde(default)]
    pub write_mode: Option<String>,
    /// `scd2`: every version with its validity range, in a companion table.
    #[serde(default)]
    pub history: Option<String>,
    /// Where the rows live on a Citus cluster; absent: the table's own when
    /// it exists, the server's default when it is made.
    #[serde(default)]
    pub distribution: Distribution,
    /// How long a partition is kept once its period ended (an ISO 8601
    /// duration); absent: for ever.
    #[serde(default)]
    pub retention: Option<String>,
    /// How a key declared on a table that has none treats the keys its
    /// stored rows repeat (not part of the definition: it acts once).
    #[serde(default)]
    pub adopt: Option<Adopt>,
}

/// `"adopt": {"repeats": "refuse" | "resolve"}`.
#[derive(Clone, Copy, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Adopt {
    #[serde(default)]
    pub repeats: AdoptRepeats,
}

/// What a key adoption does with keys the stored rows repeat: refuse the
/// declaration (409, the default), or keep one version of each by the
/// table's `duplicates` rule.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AdoptRepeats {
    #[default]
    Refuse,
    Resolve,
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

/// A key that is present, `null` or not: absent stays `None` (by
/// `#[serde(default)]`), `null` reads as `Some(None)`.
fn present<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Option<String>>, D::Error> {
    Option::<String>::deserialize(d).map(Some)
}

pub const DEFAULT_PARTITION_COLUMN: &str = "ds";

impl TableDeclaration {
    /// Validates the declaration into a definition. The partition column is
    /// added as a `date` when the declaration does not list it.
    pub fn into_def(self, table: TableName) -> Result<TableDef, SchemaError> {
        let partition_by = match &self.partition_by {
            None => Some(ColumnName::parse(DEFAULT_PARTITION_COLUMN)?),
            Some(None) => None,
            Some(Some(name)) => Some(ColumnName::parse(name)?),
        };
        let mut columns = declared_columns(&self.columns)?;
        let grain = match &partition_by {
            Some(partition_by) => {
                place_partition_column(&mut columns, partition_by)?;
                check_grain(&columns, partition_by, self.grain.as_deref())?
            }
            None => plain_grain(self.grain.as_deref())?,
        };
        let primary_key = key_columns(&mut columns, &self.primary_key, partition_by.as_ref())?;
        check_width(&columns)?;
        let cursor = self
            .cursor
            .as_deref()
            .map(|cursor| check_cursor(&columns, cursor, &primary_key))
            .transpose()?;
        let policies = self.policies(&primary_key)?;
        let versioning = self.versioning(&mut columns, cursor.as_ref())?;
        check_distribution(
            &self.distribution,
            &mut columns,
            &primary_key,
            partition_by.is_none(),
        )?;
        let mut def = TableDef {
            name: table,
            columns,
            partition_by,
            grain,
            primary_key,
            cursor,
            schema: policies.schema,
            bad_rows: policies.bad_rows,
            reject_retry_window: policies.reject_retry_window,
            duplicates: policies.duplicates,
            duplicate_log: policies.duplicate_log,
            audits: Box::default(),
            write_mode: versioning.write_mode,
            history: versioning.history,
            distribution: self.distribution,
            retention: None,
        };
        if let Some(audits) = &self.audits {
            def.audits = Box::new(Audits::parse(audits, &def)?);
        }
        if let Some(text) = &self.retention {
            let retention = Retention::parse(text)?;
            retention.check_grain(def.grain)?;
            def.retention = Some(retention);
        }
        Ok(def)
    }

    /// The declared policies, each its default when not declared; a
    /// duplicates policy other than `keep_one` needs a key to act on.
    fn policies(&self, primary_key: &[ColumnName]) -> Result<Policies, SchemaError> {
        let schema = declared(self.schema.as_deref(), SchemaPolicy::parse)?;
        let bad_rows = declared(self.bad_rows.as_deref(), BadRowPolicy::parse)?;
        let reject_retry_window =
            declared(self.reject_retry_window.as_deref(), RetryWindow::parse)?;
        let duplicates = declared(self.duplicates.as_deref(), DuplicatePolicy::parse)?;
        if duplicates != DuplicatePolicy::KeepOne && primary_key.is_empty() {
            return Err(invalid(format!(
                "duplicates {:?} needs a primary_key: a repeated key is what it acts on",
                duplicates.as_str()
            )));
        }
        Ok(Policies {
            schema,
            bad_rows,
            reject_retry_window,
            duplicates,
            duplicate_log: self.duplicate_log.unwrap_or(true),
        })
    }
}

impl TableDeclaration {
    /// The declared write mode and history. Both `versions` and `scd2` order
    /// a key's versions by the cursor, so they need one (and a cursor needs
    /// a key), and make it NOT NULL: a version without one has no place.
    /// History ranges are instants, so its cursor is a date or a timestamp.
    fn versioning(
        &self,
        columns: &mut [Column],
        cursor: Option<&ColumnName>,
    ) -> Result<Versioning, SchemaError> {
        let write_mode = self
            .write_mode
            .as_deref()
            .map(MergeMode::parse)
            .transpose()?;
        let history = self
            .history
            .as_deref()
            .map(HistoryKind::parse)
            .transpose()?;
        let versions = write_mode == Some(MergeMode::Versions);
        if !versions && history.is_none() {
            return Ok(Versioning {
                write_mode,
                history,
            });
        }
        let what = if versions {
            "write_mode \"versions\""
        } else {
            "history \"scd2\""
        };
        let Some(cursor) = cursor else {
            return Err(invalid(format!(
                "{what} needs a primary_key and a cursor: versions of a key are told apart and ordered by the cursor"
            )));
        };
        let column = columns
            .iter_mut()
            .find(|c| &c.name == cursor)
            .expect("a checked cursor is a column");
        if history.is_some() && !matches!(column.ty, ColumnType::Timestamptz | ColumnType::Date) {
            return Err(invalid(format!(
                "history \"scd2\" needs a cursor of type timestamptz or date (validity ranges are instants); {cursor:?} is {}",
                column.ty.sql_name()
            )));
        }
        column.nullable = false;
        Ok(Versioning {
            write_mode,
            history,
        })
    }
}

/// How a table keeps versions, as `TableDef` holds it.
struct Versioning {
    write_mode: Option<MergeMode>,
    history: Option<HistoryKind>,
}

/// A table's policies, as `TableDef` holds them.
struct Policies {
    schema: SchemaPolicy,
    bad_rows: BadRowPolicy,
    reject_retry_window: RetryWindow,
    duplicates: DuplicatePolicy,
    duplicate_log: bool,
}

/// `text` parsed, or the policy's default when it is not declared.
fn declared<T: Default>(
    text: Option<&str>,
    parse: impl Fn(&str) -> Result<T, SchemaError>,
) -> Result<T, SchemaError> {
    Ok(text.map(parse).transpose()?.unwrap_or_default())
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

/// A plain table's grain: `whole`, declared so or not.
fn plain_grain(declared: Option<&str>) -> Result<Grain, SchemaError> {
    match declared {
        None | Some("whole") => Ok(Grain::Whole),
        Some(text) => Err(invalid(format!(
            "grain {text:?} needs a partition column; a table with partition_by null has none"
        ))),
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
            .filter(|g| *g != Grain::Whole)
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
    partition_by: Option<&ColumnName>,
) -> Result<Vec<ColumnName>, SchemaError> {
    let mut key: Vec<ColumnName> = Vec::with_capacity(declared.len());
    for name in declared {
        if partition_by.is_some_and(|p| p == name.as_str()) {
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

/// Checks a declared distribution against the table's columns and key:
/// a hash column is one of the key's (Citus enforces a unique index only
/// when it holds the distribution column), or, on a keyless table, any
/// column, then made NOT NULL (Citus keeps no row without one); a
/// reference table has no partitions (Citus cannot copy a partitioned
/// table to every node).
fn check_distribution(
    distribution: &Distribution,
    columns: &mut [Column],
    primary_key: &[ColumnName],
    plain: bool,
) -> Result<(), SchemaError> {
    match distribution {
        Distribution::Unstated | Distribution::Local => Ok(()),
        Distribution::Reference if plain => Ok(()),
        Distribution::Reference => Err(invalid_distribution(
            "\"reference\" is for plain tables (partition_by null): Citus cannot copy a partitioned table to every node".into(),
        )),
        Distribution::Hash { column, .. } => check_hash_column(column, columns, primary_key),
    }
}

fn check_hash_column(
    column: &DistributionColumn,
    columns: &mut [Column],
    primary_key: &[ColumnName],
) -> Result<(), SchemaError> {
    let DistributionColumn::Column(name) = column else {
        if primary_key.is_empty() {
            return Ok(());
        }
        return Err(invalid_distribution(format!(
            "a keyed table is distributed by a column of its primary key {primary_key:?}, not by {ROW_ID_COLUMN}"
        )));
    };
    if !primary_key.is_empty() && !primary_key.contains(name) {
        return Err(invalid_distribution(format!(
            "distribution column {name:?} is not in the primary key {primary_key:?}: Citus enforces a unique key only when it holds the distribution column"
        )));
    }
    let Some(c) = columns.iter_mut().find(|c| &c.name == name) else {
        return Err(invalid_distribution(format!(
            "distribution column {name:?} is not a declared column"
        )));
    };
    if c.ty == ColumnType::Jsonb {
        return Err(invalid_distribution(format!(
            "distribution column {name:?} cannot be jsonb: Citus hashes a column whose type has a hash function"
        )));
    }
    c.nullable = false;
    Ok(())
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
    fn a_null_partition_by_declares_a_plain_table_and_an_absent_one_ds() {
        let t = || TableName::parse("t").unwrap();
        let mut plain =
            decl(r#"{"columns":{"id":"bigint"},"partition_by":null,"primary_key":["id"]}"#)
                .into_def(t())
                .unwrap();
        // Stored once the store has settled where its rows live.
        assert_eq!(plain.distribution, Distribution::Unstated);
        plain.distribution = Distribution::Local;
        assert_eq!(plain.partition_by, None);
        assert_eq!(plain.grain, Grain::Whole);
        assert!(plain.keyed_by_part());
        let names: Vec<_> = plain.columns.iter().map(|c| c.name.as_str()).collect();
        assert_eq!(names, ["id"]);
        let stored = serde_json::to_value(&plain).unwrap();
        assert_eq!(stored["partition_by"], serde_json::Value::Null);
        let read: TableDef = serde_json::from_value(stored).unwrap();
        assert_eq!(read, plain);

        let daily = decl(r#"{"columns":{"id":"bigint"}}"#)
            .into_def(t())
            .unwrap();
        assert_eq!(daily.partition_by.as_ref().map(|c| c.as_str()), Some("ds"));
        assert_eq!(daily.grain, Grain::Day);

        let hourly_plain = r#"{"columns":{"id":"bigint"},"partition_by":null,"grain":"hour"}"#;
        assert!(decl(hourly_plain).into_def(t()).is_err());
        let whole_daily = r#"{"columns":{"id":"bigint"},"grain":"whole"}"#;
        assert!(decl(whole_daily).into_def(t()).is_err());
    }

    #[test]
    fn versions_and_history_need_a_cursor_and_make_it_not_null() {
        let t = || TableName::parse("t").unwrap();
        let versions = decl(
            r#"{"columns":{"id":"bigint","at":"timestamptz","v":"text"},"primary_key":["id"],"cursor":"at","write_mode":"versions"}"#,
        )
        .into_def(t())
        .unwrap();
        assert!(versions.keeps_versions());
        assert!(!versions.column("at").unwrap().nullable);
        let identity: Vec<_> = versions.identity().iter().map(|c| c.as_str()).collect();
        assert_eq!(identity, ["id", "at"]);

        let history = decl(
            r#"{"columns":{"id":"bigint","at":"date"},"primary_key":["id"],"cursor":"at","history":"scd2"}"#,
        )
        .into_def(t())
        .unwrap();
        assert_eq!(history.history, Some(HistoryKind::Scd2));
        assert!(!history.keeps_versions());
        assert_eq!(history.identity().len(), 1);

        for bad in [
            r#"{"columns":{"id":"bigint"},"primary_key":["id"],"write_mode":"versions"}"#,
            r#"{"columns":{"id":"bigint","n":"bigint"},"primary_key":["id"],"cursor":"n","history":"scd2"}"#,
            r#"{"columns":{"id":"bigint"},"write_mode":"upsert"}"#,
            r#"{"columns":{"id":"bigint"},"history":"scd1"}"#,
        ] {
            assert!(decl(bad).into_def(t()).is_err(), "{bad}");
        }
    }
}
