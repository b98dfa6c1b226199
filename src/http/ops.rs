//! Liveness, readiness and the OpenAPI document.

use axum::extract::State;
use axum::http::header;
use axum::response::IntoResponse;
use axum::routing::get;
use axum::{Json, Router};
use serde_json::json;

use super::AppState;
use crate::error::ApiResult;

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

/// Ready when the database answers.
async fn readyz(State(state): State<AppState>) -> ApiResult<Json<serde_json::Value>> {
    state.store.ping().await?;
    Ok(Json(json!({"status": "ready", "database": "ok"})))
}

async fn openapi() -> impl IntoResponse {
    ([(header::CONTENT_TYPE, "application/yaml")], OPENAPI)
}
