//! Liveness, readiness and the OpenAPI document.

use axum::extract::State;
use axum::http::header;
use axum::response::IntoResponse;
use axum::routing::get;
use axum::{Json, Router};
use serde_json::json;

use std::time::Duration;

use super::AppState;
use crate::error::ApiResult;
use crate::store::StoreError;

const OPENAPI: &str = include_str!("../../openapi.yaml");

pub fn router() -> Router<AppState> {
    Router::new()
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .route("/openapi.yaml", get(openapi))
}

async fn healthz() -> Json<serde_json::Value> {
    Json(json!({"status": "ok"}))
}

/// How long readiness waits for the database: a probe wants an answer, not
/// a hang.
const READY_WITHIN: Duration = Duration::from_secs(1);

/// Ready when the database answers, within a second.
async fn readyz(State(state): State<AppState>) -> ApiResult<Json<serde_json::Value>> {
    tokio::time::timeout(READY_WITHIN, state.store.ping())
        .await
        .map_err(|_| StoreError::Unavailable(sqlx::Error::PoolTimedOut))??;
    Ok(Json(json!({"status": "ready", "database": "ok"})))
}

async fn openapi() -> impl IntoResponse {
    ([(header::CONTENT_TYPE, "application/yaml")], OPENAPI)
}
