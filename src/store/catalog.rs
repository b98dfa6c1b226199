//! The catalog of user tables and the DDL that keeps each table's Postgres
//! shape equal to its definition. Every schema change passes through
//! `declare`, serialized per table by an advisory lock.

use chrono::{DateTime, Utc};
use serde::Serialize;
use sqlx::{Connection, PgConnection, Row};

use super::{column_ddl, key_index_columns, parent_table, table_lock_key, Store};
use crate::error::{ApiError, ApiResult};
use crate::names::quote_ident;
use crate::schema::{plan_changes, SchemaChange, TableDef};

#[derive(Clone, Debug, Serialize)]
pub struct TableInfo {
    #[serde(flatten)]
    pub def: TableDef,
    pub inferred: bool,
    pub partitions: i64,
    pub rows: i64,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
}

pub enum Declared {
    Created(TableDef),
    Unchanged(TableDef),
    Changed(TableDef, Vec<SchemaChange>),
}

const TABLE_INFO_SQL: &str = "
    select t.definition, t.inferred, t.created_at, t.updated_at,
           count(p.ds) as partitions, coalesce(sum(p.row_count), 0)::bigint as rows
      from idem.tables t
      left join idem.partitions p on p.table_name = t.name";

fn table_info(row: &sqlx::postgres::PgRow) -> ApiResult<TableInfo> {
    let def: sqlx::types::Json<TableDef> = row.try_get("definition")?;
    Ok(TableInfo {
        def: def.0,
        inferred: row.try_get("inferred")?,
        partitions: row.try_get("partitions")?,
        rows: row.try_get("rows")?,
        created_at: row.try_get("created_at")?,
        updated_at: row.try_get("updated_at")?,
    })
}

impl Store {
    pub async fn table(&self, name: &str) -> ApiResult<Option<TableDef>> {
        let mut conn = self.pool().acquire().await?;
        table_def(&mut conn, name).await
    }

    pub async fn table_info(&self, name: &str) -> ApiResult<Option<TableInfo>> {
        let sql = format!("{TABLE_INFO_SQL} where t.name = $1 group by t.name");
        let row = sqlx::query(&sql)
            .bind(name)
            .fetch_optional(self.pool())
            .await?;
        row.as_ref().map(table_info).transpose()
    }

    pub async fn tables(&self) -> ApiResult<Vec<TableInfo>> {
        let sql = format!("{TABLE_INFO_SQL} group by t.name order by t.name");
        let rows = sqlx::query(&sql).fetch_all(self.pool()).await?;
        rows.iter().map(table_info).collect()
    }

    /// Creates the table, or moves it to `def` by safe changes, or answers
    /// that it already is `def`. Two processes declaring one table at once
    /// serialize on the table's advisory lock; the second sees the first's work.
    pub async fn declare(&self, def: &TableDef, inferred: bool) -> ApiResult<Declared> {
        let mut conn = self.pool().acquire().await?;
        declare(&mut conn, def, inferred).await
    }
}

pub async fn table_def(conn: &mut PgConnection, name: &str) -> ApiResult<Option<TableDef>> {
    let def: Option<sqlx::types::Json<TableDef>> =
        sqlx::query_scalar("select definition from idem.tables where name = $1")
            .bind(name)
            .fetch_optional(conn)
            .await?;
    Ok(def.map(|d| d.0))
}

/// Creates the table, or moves it to `def` by safe changes, or answers
/// that it already is `def`. Two processes declaring one table at once
/// serialize on the table's advisory lock; the second sees the first's work.
/// Inside a transaction of the caller's, it runs in a savepoint and holds the
/// lock until that transaction ends.
#[tracing::instrument(skip_all, fields(table = %def.name))]
pub async fn declare(
    conn: &mut PgConnection,
    def: &TableDef,
    inferred: bool,
) -> ApiResult<Declared> {
    {
        let mut tx = conn.begin().await?;
        sqlx::query("select pg_advisory_xact_lock($1)")
            .bind(table_lock_key(&def.name))
            .execute(&mut *tx)
            .await?;
        let stored: Option<sqlx::types::Json<TableDef>> =
            sqlx::query_scalar("select definition from idem.tables where name = $1")
                .bind(&def.name)
                .fetch_optional(&mut *tx)
                .await?;
        let outcome = match stored {
            None => {
                create_table(&mut tx, def).await?;
                sqlx::query(
                    "insert into idem.tables (name, definition, inferred) values ($1, $2, $3)",
                )
                .bind(&def.name)
                .bind(sqlx::types::Json(def))
                .bind(inferred)
                .execute(&mut *tx)
                .await?;
                Declared::Created(def.clone())
            }
            // An inferred write racing a declaration takes what is there.
            Some(stored) if inferred => Declared::Unchanged(stored.0),
            Some(stored) => {
                let changes = plan_changes(&stored.0, def)?;
                if changes.is_empty() {
                    Declared::Unchanged(stored.0)
                } else {
                    let new_def = stored.0.apply(&changes);
                    alter_table(&mut tx, &new_def, &changes).await?;
                    sqlx::query(
                        "update idem.tables set definition = $2, inferred = false, updated_at = now() where name = $1",
                    )
                    .bind(&def.name)
                    .bind(sqlx::types::Json(&new_def))
                    .execute(&mut *tx)
                    .await?;
                    sqlx::query(
                        "insert into idem.schema_changes (table_name, changes) values ($1, $2)",
                    )
                    .bind(&def.name)
                    .bind(sqlx::types::Json(&changes))
                    .execute(&mut *tx)
                    .await?;
                    Declared::Changed(new_def, changes)
                }
            }
        };
        tx.commit().await?;
        Ok(outcome)
    }
}

async fn create_table(conn: &mut PgConnection, def: &TableDef) -> ApiResult<()> {
    let parent = parent_table(&def.name);
    let partition_col = quote_ident(&def.partition_by);
    sqlx::query(&format!(
        "create table {parent} ({}) partition by list ({partition_col})",
        column_ddl(def)
    ))
    .execute(&mut *conn)
    .await?;
    // Unique per partition; a staged table carries the same index, so ATTACH
    // adopts it instead of building one under the swap's lock.
    sqlx::query(&format!(
        "create unique index {} on {parent} ({})",
        quote_ident(&format!("{}__key", def.name)),
        key_index_columns(def)
    ))
    .execute(&mut *conn)
    .await?;
    Ok(())
}

async fn alter_table(
    conn: &mut PgConnection,
    def: &TableDef,
    changes: &[SchemaChange],
) -> ApiResult<()> {
    let parent = parent_table(&def.name);
    for change in changes {
        let sql = match change {
            SchemaChange::AddColumn { column, ty } => {
                format!(
                    "alter table {parent} add column {} {}",
                    quote_ident(column),
                    ty.sql_name()
                )
            }
            SchemaChange::WidenColumn { column, to, .. } => format!(
                "alter table {parent} alter column {} type {}",
                quote_ident(column),
                to.sql_name()
            ),
            SchemaChange::SetCursor { .. } => continue,
        };
        sqlx::query(&sql).execute(&mut *conn).await.map_err(|e| {
            tracing::warn!(error = %e, "schema change failed");
            ApiError::SchemaConflict(format!("the change could not be applied: {change:?}"))
        })?;
    }
    Ok(())
}
