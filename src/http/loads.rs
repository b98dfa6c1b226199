//! The loads ledger over HTTP.

use axum::extract::{OriginalUri, State};
use axum::response::Response;
use axum::routing::get;
use axum::{Json, Router};
use serde::Deserialize;
use uuid::Uuid;

use super::{page, page_limit, parse_label, ApiPath, ApiQuery, AppState};
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
    let load_id = parse_load_id(&load_id)?;
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
    /// The last load id of the previous page.
    cursor: Option<String>,
}

async fn list_loads(
    State(state): State<AppState>,
    OriginalUri(uri): OriginalUri,
    ApiQuery(q): ApiQuery<LoadsQuery>,
) -> ApiResult<Response> {
    let table = q.table.as_deref().map(TableName::parse).transpose()?;
    let ds = q.ds.as_deref().map(parse_label).transpose()?;
    let before = q.cursor.as_deref().map(parse_load_id).transpose()?;
    let limit = page_limit(q.limit)?;
    let loads = state.store.loads(table.as_ref(), ds, before, limit).await?;
    Ok(page(&uri, loads, limit, |load: &Load| {
        load.load_id.to_string()
    }))
}

fn parse_load_id(text: &str) -> ApiResult<Uuid> {
    Uuid::parse_str(text).map_err(|_| {
        let shown: String = text.chars().take(40).collect();
        ApiError::InvalidRequest(format!("{shown:?} is not a load id (a UUID)"))
    })
}
