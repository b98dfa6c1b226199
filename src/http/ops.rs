//! Liveness, readiness, metrics and the OpenAPI document.

use axum::extract::State;
use axum::http::header;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use serde_json::json;

use std::time::Duration;

use super::auth::Caller;
use super::auth::METRICS_PATH;
use super::state::AppState;
use crate::http::error::ApiResult;
use crate::metrics::Metrics;
use crate::store::StoreError;

const OPENAPI: &str = include_str!("../../openapi.yaml");

pub fn router() -> Router<AppState> {
    Router::new()
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .route(METRICS_PATH, get(metrics))
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
    state.store.ping(READY_WITHIN).await.map_err(|e| match e {
        // Not ready either way: a probe that found every connection taken
        // says the database could not be reached in time.
        StoreError::Busy(e) => StoreError::Unavailable(e),
        e => e,
    })?;
    Ok(Json(json!({"status": "ready", "database": "ok"})))
}

async fn openapi() -> impl IntoResponse {
    ([(header::CONTENT_TYPE, "application/yaml")], OPENAPI)
}

/// The metrics in Prometheus's text format. An admin's, except that with
/// `IDEM_METRICS_OPEN_TO_LOCAL` a scraper on this host or a private network
/// needs no token.
async fn metrics(State(state): State<AppState>, caller: Caller) -> ApiResult<Response> {
    if !caller.is_local_scraper() {
        caller.require_admin()?;
    }
    let text = state.metrics.render(state.pool_gauges());
    Ok(([(header::CONTENT_TYPE, Metrics::content_type())], text).into_response())
}
