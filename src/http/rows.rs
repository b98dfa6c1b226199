//! `POST /rows?table={table}&mode=`: append or merge rows, under a required
//! `Idempotency-Key`.

use axum::body::Body;
use axum::extract::{OriginalUri, State};
use axum::http::{header, HeaderMap, HeaderValue};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::{Json, Router};
use serde::Deserialize;

use super::body::body_source;
use super::ApiQuery;
use super::{idempotency_key, keyed_request, Caller};
use crate::app::AppState;
use crate::error::{ApiError, ApiResult};
use crate::names::validate_table_name;
use crate::pipeline::keyed::{self, KeyedAnswer, Write};
use crate::pipeline::rows::PostRows;
use crate::store::merge::MergeMode;

pub const REPLAYED_HEADER: &str = "idempotent-replayed";

pub fn router() -> Router<AppState> {
    Router::new().route("/rows", post(post_rows))
}

#[derive(Deserialize)]
struct RowsQuery {
    table: Option<String>,
    mode: Option<String>,
}

fn parse_mode(mode: Option<&str>) -> ApiResult<Option<MergeMode>> {
    Ok(match mode {
        None => None,
        Some("merge") => Some(MergeMode::Merge),
        Some("append") => Some(MergeMode::Append),
        Some("insert_missing") => Some(MergeMode::InsertMissing),
        Some(other) => {
            return Err(ApiError::InvalidRequest(format!(
                "mode {other:?} is not merge, append or insert_missing"
            )))
        }
    })
}

/// A keyed write's answer: the receipt, `Idempotent-Replayed`, and for a
/// PUT the partition's `ETag`.
pub fn keyed_response(answer: KeyedAnswer) -> Response {
    let etag = answer.body.get("ds").is_some()
        && answer.body.get("mode").and_then(|m| m.as_str()) == Some("replace");
    let etag = etag
        .then(|| {
            answer.body["content_sha256"]
                .as_str()
                .map(|h| format!("\"{h}\""))
        })
        .flatten();
    let mut response = (answer.status, Json(answer.body)).into_response();
    let headers = response.headers_mut();
    headers.insert(
        REPLAYED_HEADER,
        HeaderValue::from_static(if answer.replayed { "true" } else { "false" }),
    );
    if let Some(etag) = etag.and_then(|e| HeaderValue::from_str(&e).ok()) {
        headers.insert(header::ETAG, etag);
    }
    response
}

#[tracing::instrument(skip_all, fields(table = query.table.as_deref()))]
async fn post_rows(
    State(state): State<AppState>,
    caller: Caller,
    OriginalUri(uri): OriginalUri,
    ApiQuery(query): ApiQuery<RowsQuery>,
    headers: HeaderMap,
    body: Body,
) -> ApiResult<Response> {
    let key = idempotency_key(&headers)?.ok_or(ApiError::IdempotencyKeyMissing)?;
    let table = query.table.ok_or_else(|| {
        ApiError::InvalidRequest("the table query parameter is required: POST /rows?table=…".into())
    })?;
    validate_table_name(&table)?;
    let mode = parse_mode(query.mode.as_deref())?;
    let body = body_source(&headers, body, state.settings.max_body_bytes, true)?;
    let principal = caller.principal.clone();
    let request = keyed_request(caller, key.clone(), "POST", &uri, &headers);
    let write = Write::Rows(PostRows {
        table,
        mode,
        body,
        principal,
        idempotency_key: key,
    });
    // Spawned, so that a client hanging up cannot cancel the write between
    // two statements; a body cut short fails it cleanly instead.
    let answer = tokio::spawn(async move { keyed::run(&state, request, write).await })
        .await
        .map_err(|e| ApiError::Internal(anyhow::anyhow!("the write task failed: {e}")))??;
    Ok(keyed_response(answer))
}
