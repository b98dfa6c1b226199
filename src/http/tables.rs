//! `PUT /tables/{table}` declares or evolves a table; `GET` shows the catalog.

use axum::body::Body;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::routing::get;
use axum::{Json, Router};
use serde_json::json;

use crate::app::AppState;
use crate::error::{ApiError, ApiResult};
use crate::names::validate_table_name;
use crate::schema::TableDeclaration;
use crate::store::catalog::{Declared, TableInfo};

/// A declaration is small; anything larger is a mistake.
const MAX_DECLARATION_BYTES: usize = 1 << 20;

pub fn router() -> Router<AppState> {
    Router::new()
        .route("/tables", get(list_tables))
        .route("/tables/{table}", get(get_table).put(put_table))
}

async fn list_tables(State(state): State<AppState>) -> ApiResult<Json<Vec<TableInfo>>> {
    Ok(Json(state.store.tables().await?))
}

async fn get_table(
    State(state): State<AppState>,
    Path(table): Path<String>,
) -> ApiResult<Json<TableInfo>> {
    validate_table_name(&table)?;
    state
        .store
        .table_info(&table)
        .await?
        .map(Json)
        .ok_or(ApiError::TableNotFound(table))
}

#[tracing::instrument(skip(state, body))]
async fn put_table(
    State(state): State<AppState>,
    Path(table): Path<String>,
    body: Body,
) -> ApiResult<(StatusCode, Json<serde_json::Value>)> {
    validate_table_name(&table)?;
    let bytes = axum::body::to_bytes(body, MAX_DECLARATION_BYTES)
        .await
        .map_err(|_| ApiError::PayloadTooLarge {
            limit: MAX_DECLARATION_BYTES as u64,
        })?;
    let declaration: TableDeclaration = serde_json::from_slice(&bytes).map_err(|e| {
        ApiError::InvalidDeclaration(format!("line {}, column {}: {e}", e.line(), e.column()))
    })?;
    let def = declaration.into_def(&table)?;
    let (status, changes) = match state.store.declare(&def, false).await? {
        Declared::Created(_) => (StatusCode::CREATED, json!([])),
        Declared::Unchanged(_) => (StatusCode::OK, json!([])),
        Declared::Changed(_, changes) => (StatusCode::OK, json!(changes)),
    };
    let info = state
        .store
        .table_info(&table)
        .await?
        .ok_or(ApiError::TableNotFound(table))?;
    let mut answer = serde_json::to_value(info).map_err(anyhow::Error::from)?;
    answer["changes"] = changes;
    Ok((status, Json(answer)))
}
