//! Audits validated against the table they check: known keys, the
//! table's columns, values of each column's type (by JSON kind, and by text
//! where that is cheap; Postgres's cast in `store::audits` is the last
//! check, since the cell parsers live in `ingest`, above this layer).

use chrono::NaiveDate;
use serde_json::Value;

use super::audits::{Audits, Bounds};
use super::error::{invalid, SchemaError};
use super::table::{ColumnType, TableDef};
use crate::names::ColumnName;

impl Audits {
    /// Validated against the table: a JSON object of known keys, columns the
    /// table has, values of their column's type, `min_rows <= max_rows`, a
    /// finite ratio `>= 0`.
    pub fn parse(value: &Value, def: &TableDef) -> Result<Audits, SchemaError> {
        if !value.is_object() {
            return Err(invalid("audits must be a JSON object".into()));
        }
        let audits: Audits =
            serde_json::from_value(value.clone()).map_err(|e| invalid(format!("audits: {e}")))?;
        audits.check(def)?;
        Ok(audits)
    }

    /// The checks of `parse`, on audits already read.
    pub fn check(&self, def: &TableDef) -> Result<(), SchemaError> {
        if let (Some(min), Some(max)) = (self.min_rows, self.max_rows) {
            if min > max {
                return Err(invalid(format!(
                    "audits: min_rows {min} is more than max_rows {max}"
                )));
            }
        }
        if let Some(ratio) = self.max_change_ratio {
            if !ratio.get().is_finite() || ratio.get() < 0.0 {
                return Err(invalid(format!(
                    "audits: max_change_ratio {} must be a finite number >= 0",
                    ratio.get()
                )));
            }
        }
        for column in self.not_null.iter().chain(&self.unique) {
            column_type(def, column)?;
        }
        for (column, values) in &self.accepted_values {
            check_accepted(def, column, values)?;
        }
        for (column, bounds) in &self.range {
            check_range(def, column, bounds)?;
        }
        Ok(())
    }
}

/// The type of `column`, which the table must have.
fn column_type(def: &TableDef, column: &ColumnName) -> Result<ColumnType, SchemaError> {
    def.column(column).map(|c| c.ty).ok_or_else(|| {
        invalid(format!(
            "audits: column {column:?} is not a column of table {:?}",
            def.name
        ))
    })
}

fn check_accepted(
    def: &TableDef,
    column: &ColumnName,
    values: &[Value],
) -> Result<(), SchemaError> {
    let ty = column_type(def, column)?;
    if values.is_empty() {
        return Err(invalid(format!(
            "audits: accepted_values of {column:?} lists no value"
        )));
    }
    for value in values {
        check_value(ty, column, value, "accepted_values")?;
    }
    Ok(())
}

fn check_range(def: &TableDef, column: &ColumnName, bounds: &Bounds) -> Result<(), SchemaError> {
    let ty = column_type(def, column)?;
    if matches!(ty, ColumnType::Jsonb | ColumnType::Boolean) {
        return Err(invalid(format!(
            "audits: range of {column:?}: a {} column has no order to check",
            ty.sql_name()
        )));
    }
    if bounds.min.is_none() && bounds.max.is_none() {
        return Err(invalid(format!(
            "audits: range of {column:?} needs a min, a max or both"
        )));
    }
    for bound in [&bounds.min, &bounds.max].into_iter().flatten() {
        check_value(ty, column, bound, "range")?;
    }
    if let (Some(min), Some(max)) = (
        bounds.min.as_ref().and_then(number),
        bounds.max.as_ref().and_then(number),
    ) {
        if min > max {
            return Err(invalid(format!(
                "audits: range of {column:?} has min {min} above max {max}"
            )));
        }
    }
    Ok(())
}

/// `value` is one a column of type `ty` can hold (by its JSON kind, and its
/// text where that is cheap to check); a null is no value to compare with.
fn check_value(
    ty: ColumnType,
    column: &ColumnName,
    value: &Value,
    audit: &str,
) -> Result<(), SchemaError> {
    let text = value.as_str();
    let fits = match ty {
        ColumnType::Jsonb => !value.is_null(),
        ColumnType::Text | ColumnType::Timestamptz => text.is_some(),
        ColumnType::Bigint => integer(value).is_some(),
        ColumnType::Integer => integer(value).is_some_and(|i| i32::try_from(i).is_ok()),
        ColumnType::DoublePrecision | ColumnType::Numeric => number(value).is_some(),
        ColumnType::Boolean => value.is_boolean(),
        ColumnType::Date => text.is_some_and(|t| NaiveDate::parse_from_str(t, "%Y-%m-%d").is_ok()),
        ColumnType::Uuid => text.is_some_and(|t| uuid::Uuid::parse_str(t).is_ok()),
    };
    if fits {
        Ok(())
    } else {
        Err(invalid(format!(
            "audits: {audit} of {column:?}: {value} is not a {} value",
            ty.sql_name()
        )))
    }
}

/// An integer given as a JSON number or as its text.
fn integer(value: &Value) -> Option<i64> {
    match value {
        Value::Number(n) => n.as_i64(),
        Value::String(s) => s.trim().parse().ok(),
        _ => None,
    }
}

/// A finite number given as a JSON number or as its text.
fn number(value: &Value) -> Option<f64> {
    let n = match value {
        Value::Number(n) => n.as_f64(),
        Value::String(s) => s.trim().parse::<f64>().ok(),
        _ => None,
    };
    n.filter(|n| n.is_finite())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::names::TableName;
    use crate::schema::TableDeclaration;
    use serde_json::json;

    fn def() -> TableDef {
        serde_json::from_value::<TableDeclaration>(json!({
            "columns": {"id": "bigint", "status": "text", "amount": "numeric", "n": "integer"},
            "primary_key": ["id"]
        }))
        .unwrap()
        .into_def(TableName::parse("orders").unwrap())
        .unwrap()
    }

    fn refused(value: Value) -> String {
        Audits::parse(&value, &def()).unwrap_err().to_string()
    }

    #[test]
    fn audits_of_the_tables_columns_and_types_are_taken() {
        let audits = Audits::parse(
            &json!({"min_rows": 1, "max_rows": 10, "not_null": ["status"], "unique": ["id"],
                    "accepted_values": {"status": ["new", "paid"], "n": [1, "2"]},
                    "range": {"amount": {"min": 0, "max": "99.5"}, "ds": {"min": "2026-01-01"}},
                    "max_change_ratio": 0.5}),
            &def(),
        )
        .unwrap();
        assert_eq!(audits.max_change_ratio.unwrap().get(), 0.5);
        assert!(!audits.is_empty());
        let again: Audits = serde_json::from_value(serde_json::to_value(&audits).unwrap()).unwrap();
        assert_eq!(again, audits);
    }

    #[test]
    fn wrong_audits_are_refused_naming_the_problem() {
        assert!(refused(json!({"min_row": 1})).contains("min_row"));
        assert!(refused(json!({"not_null": ["nope"]})).contains("\"nope\""));
        assert!(refused(json!({"min_rows": 5, "max_rows": 2})).contains("min_rows 5"));
        assert!(refused(json!({"max_change_ratio": -1})).contains("max_change_ratio"));
        assert!(refused(json!({"accepted_values": {"n": ["x"]}})).contains("integer"));
        assert!(refused(json!({"accepted_values": {"n": [3000000000u64]}})).contains("integer"));
        assert!(refused(json!({"range": {"amount": {}}})).contains("needs a min"));
        assert!(refused(json!({"range": {"amount": {"min": 5, "max": 1}}})).contains("above"));
        assert!(refused(json!({"range": {"ds": {"min": "yesterday"}}})).contains("date"));
        assert!(refused(json!([1])).contains("object"));
    }

    #[test]
    fn an_overlay_replaces_the_keys_it_sets() {
        let table = Audits::parse(&json!({"min_rows": 1, "not_null": ["id"]}), &def()).unwrap();
        let load = Audits::parse(&json!({"min_rows": 7, "unique": ["id"]}), &def()).unwrap();
        let both = table.overlay(&load);
        assert_eq!(both.min_rows, Some(7));
        assert_eq!(both.not_null, table.not_null);
        assert_eq!(both.unique, load.unique);
        assert!(Audits::default().is_empty());
    }
}
