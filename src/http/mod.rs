//! The HTTP surface: one module per resource, each with its own `router()`.

pub mod body;
pub mod idempotency_keys;
pub mod loads;
pub mod ops;
pub mod partitions;
pub mod rows;
pub mod tables;

use axum::extract::FromRequestParts;
use axum::http::request::Parts;
use axum::http::HeaderMap;
use axum::Router;
use chrono::NaiveDate;

use crate::app::AppState;
use crate::error::{ApiError, ApiResult};

pub fn router() -> Router<AppState> {
    Router::new()
        .merge(tables::router())
        .merge(partitions::router())
        .merge(rows::router())
        .merge(idempotency_keys::router())
        .merge(loads::router())
        .merge(ops::router())
        .fallback(|| async { ApiError::NotFound("no such resource; see GET /openapi.yaml".into()) })
        .method_not_allowed_fallback(|| async { ApiError::MethodNotAllowed })
}

/// `Query`, with a malformed query string answered in the API's own format.
pub struct ApiQuery<T>(pub T);

impl<T: serde::de::DeserializeOwned, S: Send + Sync> FromRequestParts<S> for ApiQuery<T> {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        axum::extract::Query::<T>::from_request_parts(parts, state)
            .await
            .map(|axum::extract::Query(query)| ApiQuery(query))
            .map_err(|rejection| ApiError::InvalidRequest(rejection.body_text()))
    }
}

/// A partition value from a path or query: an ISO date, `YYYY-MM-DD`.
pub fn parse_ds(text: &str) -> ApiResult<NaiveDate> {
    let valid = text.len() == 10 && text.as_bytes()[4] == b'-' && text.as_bytes()[7] == b'-';
    valid
        .then(|| NaiveDate::parse_from_str(text, "%Y-%m-%d").ok())
        .flatten()
        .ok_or_else(|| {
            ApiError::InvalidDs(format!("{text:?} is not a date of the form YYYY-MM-DD"))
        })
}

/// Who is calling. Every handler knows its caller; until tokens exist, all
/// callers are one anonymous principal (idempotency keys are scoped by it).
#[derive(Clone, Debug)]
pub struct Caller {
    pub principal: String,
}

impl<S: Send + Sync> FromRequestParts<S> for Caller {
    type Rejection = ApiError;

    async fn from_request_parts(_parts: &mut Parts, _state: &S) -> Result<Self, Self::Rejection> {
        Ok(Caller {
            principal: "anonymous".to_string(),
        })
    }
}

pub const IDEMPOTENCY_KEY: &str = "idempotency-key";

/// The `Idempotency-Key` header: `None` when absent; 1 to 255 visible ASCII
/// characters when present (a quoted form, as the draft writes it, is unquoted).
pub fn idempotency_key(headers: &HeaderMap) -> ApiResult<Option<String>> {
    let Some(value) = headers.get(IDEMPOTENCY_KEY) else {
        return Ok(None);
    };
    let text = value.to_str().map_err(|_| {
        ApiError::IdempotencyKeyInvalid("the Idempotency-Key is not visible ASCII".into())
    })?;
    let key = text.trim();
    let key = key
        .strip_prefix('"')
        .and_then(|k| k.strip_suffix('"'))
        .unwrap_or(key);
    if key.is_empty() || key.len() > 255 || !key.bytes().all(|b| b.is_ascii_graphic()) {
        return Err(ApiError::IdempotencyKeyInvalid(
            "the Idempotency-Key must be 1 to 255 visible ASCII characters".into(),
        ));
    }
    Ok(Some(key.to_string()))
}

/// What an Idempotency-Key's fingerprint is made of, from the request.
pub fn keyed_request(
    caller: Caller,
    key: String,
    method: &'static str,
    uri: &axum::http::Uri,
    headers: &HeaderMap,
) -> crate::pipeline::keyed::KeyedRequest {
    let content_type = headers
        .get(axum::http::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_ascii_lowercase();
    crate::pipeline::keyed::KeyedRequest {
        principal: caller.principal,
        key,
        method,
        path_and_query: uri
            .path_and_query()
            .map(|p| p.to_string())
            .unwrap_or_default(),
        content_type,
    }
}
