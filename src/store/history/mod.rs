//! The tables that keep a table's versions (`"history": "scd2"`): made (and
//! seeded from the stored rows) with their table or when history is turned
//! on, evolved and dropped with it, and read back with each version's
//! validity range. Their shape is `shape::HistoryShape`; the statements
//! that record a write's versions live in `write::history`.
//!
//! A history table (`idem_history.<table>`) holds the user columns (key and
//! cursor NOT NULL; the others NULL in a removal), `_part` where the table's
//! partitions are keyed by it, then `_valid_from` (the version's cursor),
//! `_deleted`, `_load_id`, `_row_hash` (NULL for a removal) and
//! `_recorded_at`. A version's end is not stored: it is the next version's
//! start, computed when read, so ranges are contiguous and never overlap
//! whatever order writers commit in, and writers only ever insert.

mod shape;

use sqlx::{Connection, PgConnection};

pub(crate) use shape::HistoryShape;

use crate::names::{ColumnName, TableName};
use crate::period::Period;
use crate::schema::{ColumnType, SchemaChange, TableDef};
use crate::store::read::{json_row_with, RowFormat, RowsRead};
use crate::store::sql::{
    column_change_ddl, history_table, label_sql, parent_table, widen_ddl, Ident, DELETED,
    IS_CURRENT, LOAD_ID, RECORDED_AT, ROW_HASH, VALID_FROM, VALID_TO,
};
use crate::store::{checked_ddl, Store, StoreError, StoreResult, NOT_NULL_VIOLATION};

/// The fields a history read adds after the user columns.
const READ_FIELDS: [Ident; 5] = [VALID_FROM, VALID_TO, IS_CURRENT, DELETED, LOAD_ID];

/// Makes `def`'s history table, empty (a new table's).
pub(crate) async fn create(conn: &mut PgConnection, def: &TableDef) -> StoreResult<()> {
    let Some(shape) = HistoryShape::of(def) else {
        return Ok(());
    };
    let user = shape.user.iter().map(|(c, ty, _)| {
        let not_null = shape.key.contains(c) || c == &shape.cursor;
        format!(
            "{c} {}{}",
            ty.sql_name(),
            if not_null { " not null" } else { "" }
        )
    });
    let part = shape
        .part
        .iter()
        .map(|(c, ty)| format!("{c} {} not null", ty.sql_name()));
    let system = [
        format!("{VALID_FROM} {} not null", shape.cursor_type.sql_name()),
        format!("{DELETED} boolean not null"),
        format!("{LOAD_ID} uuid not null"),
        format!("{ROW_HASH} bytea"),
        format!("{RECORDED_AT} timestamptz not null default now()"),
    ];
    let columns: Vec<String> = user.chain(part).chain(system).collect();
    let table = &shape.table;
    sqlx::query(&format!("create table {table} ({})", columns.join(", ")))
        .execute(&mut *conn)
        .await?;
    // The key and instant name a version; readers scan a key's versions in
    // order along it.
    sqlx::query(&format!(
        "create unique index {} on {table} ({}, {VALID_FROM})",
        Ident::index(&def.name, "versions"),
        shape.key_list()
    ))
    .execute(&mut *conn)
    .await?;
    // Colocated with the table on a cluster: a key's versions on its rows' node.
    crate::store::distribute::place_beside(conn, def, table).await
}

/// Makes `def`'s history table and records every stored row as a version
/// (history turned on for a table that has rows).
async fn create_seeded(conn: &mut PgConnection, def: &TableDef) -> StoreResult<()> {
    create(&mut *conn, def).await?;
    let Some(shape) = HistoryShape::of(def) else {
        return Ok(());
    };
    let values = shape.version_values(
        "t",
        &format!("t.{}", shape.cursor),
        "false",
        &format!("t.{LOAD_ID}"),
    );
    // language=PostgreSQL
    sqlx::query(&format!(
        "insert into {} ({}) select {values} from {} t",
        shape.table,
        shape.columns(),
        parent_table(&def.name)
    ))
    .execute(&mut *conn)
    .await?;
    Ok(())
}

/// Follows a schema change of the table (`old` to `new` by `changes`) in
/// its history: made and seeded when history is turned on, the same column
/// added or widened otherwise. In the change's transaction.
pub(crate) async fn evolve(
    conn: &mut PgConnection,
    old: &TableDef,
    new: &TableDef,
    changes: &[SchemaChange],
) -> StoreResult<()> {
    let Some(shape) = HistoryShape::of(new) else {
        return Ok(());
    };
    if old.history.is_none() {
        cursor_not_null(conn, old, &shape).await?;
        return create_seeded(conn, new).await;
    }
    for change in changes {
        let mut statements: Vec<String> = column_change_ddl(&shape.table, change)
            .into_iter()
            .collect();
        // The versions' instants are the cursor's values, in its type.
        if let SchemaChange::WidenColumn { column, from, to } = change {
            if Ident::column(column) == shape.cursor {
                statements.push(widen_ddl(&shape.table, &VALID_FROM, *from, *to));
            }
        }
        for statement in statements {
            sqlx::query(&statement).execute(&mut *conn).await?;
        }
    }
    Ok(())
}

/// Makes the cursor of a table that turns history on NOT NULL, where it
/// allowed NULL (a table that adopted its key later, say); a 409 when a
/// stored row has no cursor, which would be a version without a start.
async fn cursor_not_null(
    conn: &mut PgConnection,
    old: &TableDef,
    shape: &HistoryShape,
) -> StoreResult<()> {
    let nullable = old
        .cursor
        .as_ref()
        .and_then(|c| old.column(c))
        .is_some_and(|c| c.nullable);
    if !nullable {
        return Ok(());
    }
    let parent = parent_table(&old.name);
    let not_null = format!(
        "alter table {parent} alter column {} set not null",
        shape.cursor
    );
    if checked_ddl(&mut *conn, &not_null, NOT_NULL_VIOLATION).await? {
        return Ok(());
    }
    let nulls: i64 = sqlx::query_scalar(&format!(
        "select count(*) from {parent} where {} is null",
        shape.cursor
    ))
    .fetch_one(&mut *conn)
    .await?;
    Err(crate::schema::SchemaError::Conflict(format!(
        "history needs every stored row to have a cursor ({}): {nulls} have none",
        shape.cursor
    ))
    .into())
}

/// Drops `table`'s history, if it keeps one.
pub(crate) async fn drop(conn: &mut PgConnection, table: &TableName) -> StoreResult<()> {
    sqlx::query(&format!("drop table if exists {}", history_table(table)))
        .execute(conn)
        .await?;
    Ok(())
}

/// What a history read asks for.
#[derive(Clone, Debug, Default)]
pub struct HistoryQuery {
    /// The key's value, column by column (every primary key column, or none
    /// for every key).
    pub key: Vec<KeyValue>,
    /// One partition's versions (none: every partition's).
    pub ds: Option<Period>,
    /// The versions valid at this instant, as the cursor's type reads it.
    pub as_of: Option<String>,
}

/// One key column's value in a history read.
#[derive(Clone, Debug)]
pub struct KeyValue {
    pub column: ColumnName,
    pub value: String,
    /// The query parameter that gave it, named when the value is refused.
    pub parameter: String,
}

/// A history read, open in its snapshot.
pub struct HistorySnapshot {
    rows: RowsRead,
}

impl HistorySnapshot {
    /// Streams the versions as NDJSON.
    pub fn stream(self) -> tokio::sync::mpsc::Receiver<std::io::Result<bytes::Bytes>> {
        self.rows.stream(RowFormat::Ndjson)
    }
}

impl Store {
    /// Opens a read of `def`'s history: the versions `query` asks for, in
    /// key and instant order, each with its range. A value that is not of
    /// its column's type is refused before anything is read.
    pub async fn open_history(
        &self,
        def: &TableDef,
        query: &HistoryQuery,
    ) -> StoreResult<HistorySnapshot> {
        let shape = HistoryShape::of(def).ok_or(StoreError::Corrupt("a table without history"))?;
        let conn = self.acquire().await?;
        let begin = "begin isolation level repeatable read read only";
        let mut tx = sqlx::Transaction::begin(conn, Some(begin.into())).await?;
        let mut params = Vec::new();
        let mut filters = vec!["true".to_string()];
        for KeyValue {
            column,
            value,
            parameter,
        } in &query.key
        {
            let ty = def.column(column).map_or(ColumnType::Text, |c| c.ty);
            check_value(&mut tx, value, ty, parameter).await?;
            params.push(value.clone());
            let c = Ident::column(column);
            filters.push(format!("h.{c} = ${}::{}", params.len(), ty.sql_name()));
        }
        if let Some(ds) = query.ds {
            params.push(ds.label());
            filters.push(format!("{} = ${}", label_sql(def, "h"), params.len()));
        }
        let mut as_of = "true".to_string();
        if let Some(at) = &query.as_of {
            check_value(&mut tx, at, shape.cursor_type, "as_of").await?;
            params.push(at.clone());
            let at = format!("${}::{}", params.len(), shape.cursor_type.sql_name());
            as_of = format!(
                "v.{VALID_FROM} <= {at} and (v.{VALID_TO} is null or {at} < v.{VALID_TO})
                 and not v.{DELETED}"
            );
        }
        let select = history_select(&shape, &filters.join(" and "), &as_of);
        let json_row = json_row_with(def, &READ_FIELDS);
        Ok(HistorySnapshot {
            rows: RowsRead::new(tx, (select, history_order(&shape)), json_row, params),
        })
    }
}

/// The versions `filters` (on `h`) selects, each with its range, those of
/// them that `as_of` (on `v`) keeps, in key and instant order.
fn history_select(shape: &HistoryShape, filters: &str, as_of: &str) -> String {
    // `_part` too, where the key holds it: the read is ordered by the key
    // (`history_order`), and the JSON written leaves it out.
    let user: Vec<String> = shape
        .user
        .iter()
        .map(|(c, _, _)| c)
        .chain(shape.part.iter().map(|(c, _)| c))
        .map(|c| format!("v.{c}"))
        .collect();
    let key = shape.key_list();
    // language=PostgreSQL
    format!(
        "select {}, v.{VALID_FROM}, v.{VALID_TO}, v.{VALID_TO} is null as {IS_CURRENT},
                v.{DELETED}, v.{LOAD_ID}
           from (select h.*, lead(h.{VALID_FROM}) over (partition by {key} order by h.{VALID_FROM}) as {VALID_TO}
                   from {} h where {filters}) v
          where {as_of}",
        user.join(", "),
        shape.table,
    )
}

/// The order a history read gives versions in: by key, then instant; over
/// `_row`, the read's outermost query (where Citus keeps it).
fn history_order(shape: &HistoryShape) -> String {
    shape
        .key
        .iter()
        .chain([&VALID_FROM])
        .map(|c| format!("_row.{c}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// Refuses `value` when it is not a `ty` (`parameter` names it to the
/// caller). Tried in a savepoint, so the read goes on after a refusal's
/// check fails nothing else.
async fn check_value(
    conn: &mut PgConnection,
    value: &str,
    ty: ColumnType,
    parameter: &str,
) -> StoreResult<()> {
    let mut savepoint = conn.begin().await?;
    let cast = sqlx::query(&format!("select $1::{}", ty.sql_name()))
        .bind(value)
        .execute(&mut *savepoint)
        .await;
    match cast {
        Ok(_) => Ok(savepoint.commit().await?),
        Err(sqlx::Error::Database(db)) if db.code().is_some_and(|c| c.starts_with("22")) => {
            savepoint.rollback().await?;
            Err(StoreError::BadValue(format!(
                "{parameter}: {value:?} is not a {}",
                ty.sql_name()
            )))
        }
        Err(e) => Err(e.into()),
    }
}
