//! Runs a load's `Audits` in Postgres on its staged rows, before the swap:
//! one statement per audit (per column for the per-column ones), each
//! counting the rows that fail it and reading up to 5 of them as `GET`
//! shows rows. The row counts and the change ratio are per partition, from
//! the counts the stage already knows; the rest over all staged rows.

use serde_json::{json, Value};
use sqlx::{PgConnection, Row};

use super::sql::{logged_row, Ident, ROW_ID};
use super::{StoreError, StoreResult};
use crate::names::ColumnName;
use crate::period::Period;
use crate::schema::{AuditReport, AuditResult, Audits, ColumnType, SchemaError, TableDef};

/// One target partition's stage, as the audits see it.
pub struct StagedPartition<'a> {
    pub period: Period,
    /// The stage table holding the partition's rows (duplicates resolved).
    pub stage: &'a Ident,
    pub rows: u64,
    /// The live partition's rows; `None` when there is none.
    pub live_rows: Option<u64>,
}

/// How many failing rows a result shows.
const EXAMPLES: i64 = 5;

/// Runs `audits` on the `staged` partitions of `def`. Results come in the
/// order of `Audits`' keys, then partition, then column; a value Postgres
/// cannot read as its column's type is the declaration's fault (400).
#[tracing::instrument(skip_all, fields(table = %def.name))]
pub async fn run_audits(
    conn: &mut PgConnection,
    def: &TableDef,
    audits: &Audits,
    staged: &[StagedPartition<'_>],
) -> StoreResult<AuditReport> {
    let mut results = Vec::new();
    let mut partitions: Vec<&StagedPartition<'_>> = staged.iter().collect();
    partitions.sort_by_key(|p| p.period);
    for p in &partitions {
        if let Some(min) = audits.min_rows {
            results.push(count_result("min_rows", p, min, p.rows >= min));
        }
    }
    for p in &partitions {
        if let Some(max) = audits.max_rows {
            results.push(count_result("max_rows", p, max, p.rows <= max));
        }
    }
    let source = RowSource::of(staged);
    for column in &audits.not_null {
        let check = Check::new(format!("_s.{} is null", Ident::column(column)));
        results.push(run_check(conn, def, &source, "not_null", &[column], check, json!(0)).await?);
    }
    if !audits.unique.is_empty() {
        results.push(unique(conn, def, &source, &audits.unique).await?);
    }
    for (column, values) in &audits.accepted_values {
        let ty = column_type(def, column)?;
        let texts: Vec<String> = values.iter().map(|v| value_text(ty, v)).collect();
        let check = Check::new(format!(
            "_s.{col} is not null and not (_s.{col} = any($1::text[]::{ty}[]))",
            col = Ident::column(column),
            ty = ty.sql_name(),
        ))
        .bind(Bind::Texts(texts));
        let expected = json!(values);
        let audit = "accepted_values";
        results.push(run_check(conn, def, &source, audit, &[column], check, expected).await?);
    }
    for (column, bounds) in &audits.range {
        let ty = column_type(def, column)?;
        let check = range_check(column, ty, bounds.min.as_ref(), bounds.max.as_ref());
        let expected = json!(bounds);
        results.push(run_check(conn, def, &source, "range", &[column], check, expected).await?);
    }
    if let Some(ratio) = audits.max_change_ratio {
        for p in &partitions {
            results.push(change_ratio(conn, p, ratio.get()).await?);
        }
    }
    Ok(AuditReport {
        passed: results.iter().all(|r| r.passed),
        audits: results,
    })
}

/// The stage tables, as one relation of every staged row.
struct RowSource(Option<String>);

impl RowSource {
    fn of(staged: &[StagedPartition<'_>]) -> RowSource {
        let selects: Vec<String> = staged
            .iter()
            .map(|p| format!("select * from {}", p.stage))
            .collect();
        RowSource((!selects.is_empty()).then(|| format!("({})", selects.join(" union all "))))
    }
}

/// A partition's label as a result names it; the whole table's (which has
/// no label) is none.
fn partition_label(period: Period) -> Option<String> {
    Some(period.label()).filter(|label| !label.is_empty())
}

fn count_result(audit: &str, p: &StagedPartition<'_>, expected: u64, passed: bool) -> AuditResult {
    AuditResult {
        audit: audit.into(),
        partition: partition_label(p.period),
        columns: None,
        passed,
        expected: json!(expected),
        found: json!(p.rows),
        examples: Vec::new(),
    }
}

fn column_type(def: &TableDef, column: &ColumnName) -> StoreResult<ColumnType> {
    def.column(column).map(|c| c.ty).ok_or_else(|| {
        StoreError::Schema(SchemaError::Invalid(format!(
            "audits: column {column:?} is not a column of table {:?}",
            def.name
        )))
    })
}

/// A value as the text Postgres casts to the column's type: a JSON string
/// is its content, anything else (and any value of a jsonb column) its JSON.
fn value_text(ty: ColumnType, value: &Value) -> String {
    match value {
        Value::String(s) if ty != ColumnType::Jsonb => s.clone(),
        other => other.to_string(),
    }
}

/// A parameter of a check's statement.
enum Bind {
    Text(String),
    Texts(Vec<String>),
}

/// The condition a failing row meets (on row `_s`), its parameters from
/// `$1`, and the order its examples are read in.
struct Check {
    condition: String,
    binds: Vec<Bind>,
    order: String,
}

impl Check {
    fn new(condition: String) -> Check {
        Check {
            condition,
            binds: Vec::new(),
            order: format!("_s.{ROW_ID}"),
        }
    }

    fn bind(mut self, bind: Bind) -> Check {
        self.binds.push(bind);
        self
    }
}

fn range_check(
    column: &ColumnName,
    ty: ColumnType,
    min: Option<&Value>,
    max: Option<&Value>,
) -> Check {
    let col = Ident::column(column);
    let mut outside = Vec::new();
    let mut binds = Vec::new();
    for (bound, op) in [(min, "<"), (max, ">")] {
        if let Some(value) = bound {
            binds.push(Bind::Text(value_text(ty, value)));
            outside.push(format!(
                "_s.{col} {op} ${}::text::{}",
                binds.len(),
                ty.sql_name()
            ));
        }
    }
    let mut check = Check::new(format!("({})", outside.join(" or ")));
    check.binds = binds;
    check
}

/// Rows that share the values of `columns` (none of them null) with
/// another row: the window's `_n` is left out of the examples with the
/// system columns.
async fn unique(
    conn: &mut PgConnection,
    def: &TableDef,
    source: &RowSource,
    columns: &[ColumnName],
) -> StoreResult<AuditResult> {
    let idents: Vec<String> = columns
        .iter()
        .map(|c| Ident::column(c).to_string())
        .collect();
    let not_null: Vec<String> = idents.iter().map(|c| format!("{c} is not null")).collect();
    let mut check = Check::new("_s.\"_n\" > 1".into());
    let windowed = source.0.as_ref().map(|rows| {
        format!(
            "(select _r.*, count(*) over (partition by {cols}) as \"_n\" from {rows} _r where {nn})",
            cols = idents.join(", "),
            nn = not_null.join(" and "),
        )
    });
    check.order = format!(
        "{}, _s.{ROW_ID}",
        idents
            .iter()
            .map(|c| format!("_s.{c}"))
            .collect::<Vec<_>>()
            .join(", ")
    );
    let columns: Vec<&ColumnName> = columns.iter().collect();
    let source = RowSource(windowed);
    run_check(conn, def, &source, "unique", &columns, check, json!(0)).await
}

/// Counts the rows of `source` that fail `check` and reads up to 5 of them.
async fn run_check(
    conn: &mut PgConnection,
    def: &TableDef,
    source: &RowSource,
    audit: &str,
    columns: &[&ColumnName],
    check: Check,
    expected: Value,
) -> StoreResult<AuditResult> {
    let (found, examples) = match &source.0 {
        None => (0, Vec::new()),
        Some(rows) => failing_rows(conn, def, rows, &check)
            .await
            .map_err(|e| bad_value(e, audit, columns))?,
    };
    Ok(AuditResult {
        audit: audit.into(),
        partition: None,
        columns: Some(columns.iter().map(|c| c.to_string()).collect()),
        passed: found == 0,
        expected,
        found: json!(found),
        examples,
    })
}

async fn failing_rows(
    conn: &mut PgConnection,
    def: &TableDef,
    rows: &str,
    check: &Check,
) -> StoreResult<(u64, Vec<Value>)> {
    // `_s`: no user column is named like it, to be taken for the row; the
    // system columns (`_…`) are left out of the examples, as `GET` leaves
    // them out.
    // language=PostgreSQL
    let sql = format!(
        "with bad as materialized (select _s.* from {rows} _s where {condition})
         select (select count(*) from bad) as found,
                (select coalesce(jsonb_agg(
                            (select jsonb_object_agg(k, v) from jsonb_each({logged}) as e(k, v)
                              where k not like '\\_%')
                            order by {order}), '[]'::jsonb)
                   from (select * from bad _s order by {order} limit {EXAMPLES}) _s) as examples",
        condition = check.condition,
        logged = logged_row(def),
        order = check.order,
    );
    let mut query = sqlx::query(&sql);
    for bind in &check.binds {
        query = match bind {
            Bind::Text(text) => query.bind(text),
            Bind::Texts(texts) => query.bind(texts),
        };
    }
    let row = query.fetch_one(&mut *conn).await?;
    let found = u64::try_from(row.try_get::<i64, _>("found")?)
        .map_err(|_| StoreError::Corrupt("a negative count"))?;
    let examples: sqlx::types::Json<Vec<Value>> = row.try_get("examples")?;
    Ok((found, examples.0))
}

/// A value of an audit that Postgres cannot read as its column's type is
/// the caller's to fix (the check's statement reads no other values).
fn bad_value(err: StoreError, audit: &str, columns: &[&ColumnName]) -> StoreError {
    let source = match &err {
        StoreError::Database(e) | StoreError::Limit { source: e, .. } => e,
        _ => return err,
    };
    let state = match source {
        sqlx::Error::Database(db) => db.code().map(|c| c.into_owned()),
        _ => None,
    };
    match state.as_deref() {
        Some("22P02" | "22007" | "22008" | "22003") => StoreError::Schema(SchemaError::Invalid(
            format!("audits: {audit} of {columns:?}: a value is not one its column can hold"),
        )),
        _ => err,
    }
}

/// `|new - live| / live` of one partition against `max`; a partition with
/// no live rows passes (there is nothing to change from).
async fn change_ratio(
    conn: &mut PgConnection,
    p: &StagedPartition<'_>,
    max: f64,
) -> StoreResult<AuditResult> {
    let mut result = AuditResult {
        audit: "max_change_ratio".into(),
        partition: partition_label(p.period),
        columns: None,
        passed: true,
        expected: json!(max),
        found: Value::Null,
        examples: Vec::new(),
    };
    let Some(live) = p.live_rows.filter(|&live| live > 0) else {
        return Ok(result);
    };
    let count = |n: u64| i64::try_from(n).map_err(|_| StoreError::Corrupt("a row count past i64"));
    let (new, live) = (count(p.rows)?, count(live)?);
    // language=PostgreSQL
    let row = sqlx::query(
        "select round(abs($1 - $2)::numeric / $2, 4)::float8 as found,
                abs($1 - $2)::numeric / $2 <= $3::float8::numeric as passed",
    )
    .bind(new)
    .bind(live)
    .bind(max)
    .fetch_one(&mut *conn)
    .await?;
    result.found = json!(row.try_get::<f64, _>("found")?);
    result.passed = row.try_get("passed")?;
    Ok(result)
}
