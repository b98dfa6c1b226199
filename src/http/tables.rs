//! `PUT /tables/{table}` declares or evolves a table; `GET` shows the catalog.

use axum::body::Body;
use axum::extract::{OriginalUri, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use serde::Deserialize;
use serde_json::json;

use super::auth::Caller;
use super::extract::{ApiQuery, TablePath};
use super::paging::{page, page_limit};
use super::receipts;
use super::state::AppState;
use crate::access::Scope;
use crate::http::error::{ApiError, ApiResult};
use crate::names::TableName;
use crate::period::Period;
use crate::pipeline::WriteError;
use crate::schema::{plan_changes, TableDeclaration, TableDef};
use crate::store::catalog::{Declared, Origin, SchemaVersion, TableInfo};
use crate::wire::tables::TableView;

/// A declaration is small; anything larger is a mistake.
const MAX_DECLARATION_BYTES: usize = 1 << 20;

pub fn router() -> Router<AppState> {
    Router::new()
        .route("/tables", get(list_tables))
        .route(
            "/tables/{table}",
            get(get_table).put(put_table).delete(drop_table),
        )
        .route("/tables/{table}/history", get(table_history))
}

#[derive(Deserialize)]
struct ListQuery {
    limit: Option<i64>,
    /// The last table name of the previous page.
    cursor: Option<String>,
}

/// The tables the caller may read.
async fn list_tables(
    State(state): State<AppState>,
    caller: Caller,
    OriginalUri(uri): OriginalUri,
    ApiQuery(q): ApiQuery<ListQuery>,
) -> ApiResult<Response> {
    let after = q.cursor.as_deref().map(TableName::parse).transpose()?;
    let limit = page_limit(q.limit)?;
    let visible = caller.grants.readable_like();
    let tables = state.store.tables(after.as_ref(), &visible, limit).await?;
    let now = state.settings.now();
    let tables: Vec<TableView> = tables.into_iter().map(|t| view(t, now)).collect();
    Ok(page(&uri, tables, limit, |t: &TableView| {
        t.def.name.to_string()
    }))
}

async fn table_info(state: &AppState, table: TableName) -> ApiResult<TableInfo> {
    match state.store.table_info(&table).await? {
        Some(info) => Ok(info),
        None => Err(WriteError::TableNotFound(table).into()),
    }
}

/// Each version of the table's schema, the first (its creation) first.
async fn table_history(
    State(state): State<AppState>,
    caller: Caller,
    TablePath(table): TablePath,
) -> ApiResult<Json<Vec<SchemaVersion>>> {
    caller.require(Scope::Read, &table)?;
    let history = state.store.history(&table).await?;
    if history.is_empty() {
        return Err(WriteError::TableNotFound(table).into());
    }
    Ok(Json(history))
}

async fn get_table(
    State(state): State<AppState>,
    caller: Caller,
    TablePath(table): TablePath,
) -> ApiResult<Json<TableView>> {
    caller.require(Scope::Read, &table)?;
    Ok(Json(view(
        table_info(&state, table).await?,
        state.settings.now(),
    )))
}

#[derive(Deserialize)]
struct DeclareQuery {
    dry_run: Option<bool>,
}

/// Declaring needs `write` on the table (or `admin`). `?dry_run=true`
/// changes nothing and answers what the declaration would do.
async fn put_table(
    State(state): State<AppState>,
    caller: Caller,
    TablePath(table): TablePath,
    ApiQuery(query): ApiQuery<DeclareQuery>,
    body: Body,
) -> ApiResult<(StatusCode, Json<serde_json::Value>)> {
    caller.require(Scope::Write, &table)?;
    let bytes = axum::body::to_bytes(body, MAX_DECLARATION_BYTES)
        .await
        .map_err(|_| ApiError::DeclarationTooLarge {
            limit: MAX_DECLARATION_BYTES,
        })?;
    let declaration: TableDeclaration = serde_json::from_slice(&bytes).map_err(|e| {
        ApiError::InvalidDeclaration(format!("line {}, column {}: {e}", e.line(), e.column()))
    })?;
    let repeats = declaration.adopt.unwrap_or_default().repeats;
    let def = declaration.into_def(table.clone())?;
    if query.dry_run == Some(true) {
        return Ok((StatusCode::OK, Json(dry_run(&state, &def).await?)));
    }
    let declared = state
        .store
        .declare_table(
            &def,
            Origin::Declared,
            repeats,
            state.settings.idempotency_wait(),
        )
        .await?;
    let (status, changes) = match declared {
        Declared::Created(_) => (StatusCode::CREATED, json!([])),
        Declared::Unchanged(_) => (StatusCode::OK, json!([])),
        Declared::Changed(_, changes) => (StatusCode::OK, json!(changes)),
    };
    let info = view(table_info(&state, table).await?, state.settings.now());
    let mut answer = serde_json::to_value(info).map_err(anyhow::Error::from)?;
    answer["changes"] = changes;
    Ok((status, Json(answer)))
}

/// What a declaration would do, done nothing of: whether it would make
/// the table, the changes it would make to it, and the partitions its
/// retention would drop (`would_expire`).
async fn dry_run(state: &AppState, def: &TableDef) -> ApiResult<serde_json::Value> {
    let (created, changes) = match state.store.table(&def.name).await? {
        None => (true, Vec::new()),
        Some(stored) => (false, plan_changes(&stored, def)?),
    };
    let expiring = match created {
        true => Vec::new(),
        false => state.pipeline().would_expire(def).await?,
    };
    Ok(json!({
        "dry_run": true,
        "table": def.name,
        "created": created,
        "changes": changes,
        "would_expire": expiring.iter().map(Period::label).collect::<Vec<_>>(),
    }))
}

#[derive(Deserialize)]
struct DropQuery {
    confirm: Option<String>,
}

/// Drops the table with its partitions, stages and registry rows (the
/// ledger keeps its loads, marked dropped). Needs `write` on the table (or
/// `admin`) and `?confirm=` repeating its name, so that no stray request
/// drops a table. Answers its receipt (what went with the table); 204 when
/// there was no such table.
async fn drop_table(
    State(state): State<AppState>,
    caller: Caller,
    TablePath(table): TablePath,
    ApiQuery(q): ApiQuery<DropQuery>,
) -> ApiResult<Response> {
    caller.require(Scope::Write, &table)?;
    if q.confirm.as_deref() != Some(table.as_str()) {
        return Err(ApiError::ConfirmRequired(format!(
            "dropping a table needs ?confirm={table} (its name again)"
        )));
    }
    let dropped = state.pipeline().drop_table(&table, &caller.actor).await?;
    Ok(match dropped {
        Some(receipt) => Json(receipts::dropped(&receipt)).into_response(),
        None => StatusCode::NO_CONTENT.into_response(),
    })
}

/// A table as shown at `now` (its oldest period kept depends on it).
fn view(info: TableInfo, now: chrono::NaiveDateTime) -> TableView {
    let oldest_kept = info
        .def
        .retention
        .map(|retention| retention.oldest_kept(info.def.grain, now).label());
    TableView {
        def: info.def,
        inferred: info.inferred,
        partitions: info.partitions,
        rows: info.rows,
        created_at: info.created_at,
        updated_at: info.updated_at,
        oldest_kept,
    }
}
