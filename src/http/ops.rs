//! Liveness, readiness, metrics and the OpenAPI document.

use axum::extract::State;
use axum::http::header;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use serde_json::json;

use std::net::IpAddr;
use std::time::Duration;

use super::{AppState, Caller};
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

pub const METRICS_PATH: &str = "/metrics";

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

/// Loopback, private (RFC 1918), IPv6 unique local (fc00::/7) or
/// link-local: addresses no client on the internet can have.
pub fn is_local(ip: IpAddr) -> bool {
    match ip.to_canonical() {
        IpAddr::V4(v4) => v4.is_loopback() || v4.is_private() || v4.is_link_local(),
        IpAddr::V6(v6) => v6.is_loopback() || v6.is_unique_local() || v6.is_unicast_link_local(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn local_addresses_are_loopback_private_and_link_local_ones() {
        for local in [
            "127.0.0.1",
            "10.1.2.3",
            "172.16.0.1",
            "192.168.1.1",
            "169.254.0.1",
            "::1",
            "fd00::1",
            "fe80::1",
            "::ffff:10.0.0.1",
        ] {
            assert!(is_local(local.parse().unwrap()), "{local}");
        }
        for public in ["8.8.8.8", "172.32.0.1", "2001:db8::1", "::ffff:8.8.8.8"] {
            assert!(!is_local(public.parse().unwrap()), "{public}");
        }
    }
}
