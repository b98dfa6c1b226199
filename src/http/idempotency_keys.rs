//! `GET /idempotency-keys/{key}`: what became of a key.

use axum::extract::State;
use axum::routing::get;
use axum::{Json, Router};
use serde_json::json;

use super::auth::Caller;
use super::extract::ApiPath;
use super::state::AppState;
use crate::http::error::{ApiError, ApiResult};
use crate::idempotency::IdempotencyKey;
use crate::store::idempotency::KeyState;

pub fn router() -> Router<AppState> {
    Router::new().route("/idempotency-keys/{key}", get(get_key))
}

async fn get_key(
    State(state): State<AppState>,
    caller: Caller,
    ApiPath(key): ApiPath<String>,
) -> ApiResult<Json<serde_json::Value>> {
    let retention = state.settings.idempotency_retention_secs;
    // The path names a key as stored: one a header would have to trim or
    // unquote, or could not send, names none.
    let state_of = match IdempotencyKey::parse(&key) {
        Ok(parsed) if parsed.as_str() == key => {
            state.store.key_state(&caller.principal, &parsed).await?
        }
        _ => KeyState::Absent,
    };
    match state_of {
        KeyState::Completed(stored) => Ok(Json(json!({
            "key": stored.key,
            "principal": stored.principal,
            "status": "completed",
            "load_id": stored.load_id,
            "fingerprint": stored.fingerprint,
            "created_at": stored.created_at,
            "expires_at": stored.expires_at,
            "retention_seconds": retention,
            "response": {"status": stored.response_status, "body": stored.response_body},
        }))),
        KeyState::InFlight => Ok(Json(json!({
            "key": key,
            "principal": caller.principal,
            "status": "in_flight",
            "retention_seconds": retention,
        }))),
        KeyState::Absent => Err(ApiError::NotFound(format!(
            "no completed request with Idempotency-Key {key:?} (keys are kept {retention} s)"
        ))),
    }
}
