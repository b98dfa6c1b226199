//! The loads ledger over HTTP.

use axum::extract::{Path, State};
use axum::routing::get;
use axum::{Json, Router};
use serde::Deserialize;
use uuid::Uuid;

use super::ApiQuery;
use crate::app::AppState;
use crate::error::{ApiError, ApiResult};
use crate::http::parse_ds;
use crate::names::validate_table_name;
use crate::store::ledger::Load;

pub fn router() -> Router<AppState> {
    Router::new()
        .route("/loads", get(list_loads))
        .route("/loads/{load_id}", get(get_load))
}

async fn get_load(
    State(state): State<AppState>,
    Path(load_id): Path<String>,
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
    if let Some(t) = &q.table {
        validate_table_name(t)?;
    }
    let ds = q.ds.as_deref().map(parse_ds).transpose()?;
    let limit = q.limit.unwrap_or(100).clamp(1, 1000);
    Ok(Json(
        state.store.loads(q.table.as_deref(), ds, limit).await?,
    ))
}
