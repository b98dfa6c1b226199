//! The loads ledger over HTTP.

use axum::extract::State;
use axum::routing::get;
use axum::{Json, Router};
use serde::Deserialize;
use uuid::Uuid;

use super::{parse_ds, ApiPath, ApiQuery, AppState};
use crate::error::{ApiError, ApiResult};
use crate::names::TableName;
use crate::store::ledger::Load;

pub fn router() -> Router<AppState> {
    Router::new()
        .route("/loads", get(list_loads))
        .route("/loads/{load_id}", get(get_load))
}

async fn get_load(
    State(state): State<AppState>,
    ApiPath(load_id): ApiPath<String>,
) -> ApiResult<Json<Load>> {
    let load_id = Uuid::parse_str(&load_id)
        .map_err(|_| ApiError::InvalidRequest(format!("{load_id:?} is not a load id (a UUID)")))?;
    state
        .store
        .load(load_id)
        .await?
        .map(Json)
        .ok_or_else(|| ApiError::NotFound(format!("no load {load_id}")))
}

#[derive(Deserialize)]
struct LoadsQuery {
    table: Option<String>,
    ds: Option<String>,
    limit: Option<i64>,
}

async fn list_loads(
    State(state): State<AppState>,
    ApiQuery(q): ApiQuery<LoadsQuery>,
) -> ApiResult<Json<Vec<Load>>> {
    let table = q.table.as_deref().map(TableName::parse).transpose()?;
    let ds = q.ds.as_deref().map(parse_ds).transpose()?;
    let limit = q.limit.unwrap_or(100).clamp(1, 1000);
    Ok(Json(state.store.loads(table.as_ref(), ds, limit).await?))
}
