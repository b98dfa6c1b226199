//! `GET /idempotency-keys/{key}`: what became of a key.

use axum::extract::State;
use axum::routing::get;
use axum::{Json, Router};

use super::auth::Caller;
use super::extract::ApiPath;
use super::state::AppState;
use crate::http::error::{ApiError, ApiResult};
use crate::idempotency::IdempotencyKey;
use crate::store::idempotency::KeyState;
use crate::wire::keys::{CompletedKey, KeptAnswer, KeyInFlight, KeyRecord};
use crate::wire::status::KeyStatus;

pub fn router() -> Router<AppState> {
    Router::new().route("/idempotency-keys/{key}", get(get_key))
}

async fn get_key(
    State(state): State<AppState>,
    caller: Caller,
    ApiPath(key): ApiPath<String>,
) -> ApiResult<Json<KeyRecord>> {
    let retention = state.settings.idempotency_retention_secs;
    // The path names a key as stored: one a header would have to trim or
    // unquote, or could not send, names none.
    let state_of = match IdempotencyKey::parse(&key) {
        Ok(parsed) if parsed.as_str() == key => {
            state
                .store
                .key_state(&caller.actor.principal, &parsed)
                .await?
        }
        _ => KeyState::Absent,
    };
    match state_of {
        KeyState::Completed(stored) => Ok(Json(KeyRecord::Completed(CompletedKey {
            created_at: stored.created_at,
            expires_at: stored.expires_at,
            fingerprint: stored.fingerprint,
            key: stored.key,
            load_id: stored.load_id,
            principal: stored.principal,
            response: KeptAnswer {
                body: stored.response_body.json().clone(),
                status: stored.response_status,
            },
            retention_seconds: retention,
            status: KeyStatus::Completed,
        }))),
        KeyState::InFlight => Ok(Json(KeyRecord::InFlight(KeyInFlight {
            key,
            principal: caller.actor.principal,
            retention_seconds: retention,
            status: KeyStatus::InFlight,
        }))),
        KeyState::Absent => Err(ApiError::NotFound(format!(
            "no completed request with Idempotency-Key {key:?} (keys are kept {retention} s)"
        ))),
    }
}
