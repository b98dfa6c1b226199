//! The rejects store over HTTP: `GET /rejects` lists what a `quarantine`
//! policy kept.

use axum::extract::{OriginalUri, State};
use axum::http::HeaderMap;
use axum::response::Response;
use axum::routing::{get, post};
use axum::{Json, Router};
use chrono::{DateTime, Utc};
use serde::Deserialize;

use super::auth::Caller;
use super::extract::{parse_id, ApiQuery};
use super::observe::RequestSpan;
use super::paging::{page, page_limit, page_ndjson, wants_ndjson};
use super::receipts::RECEIPTS;
use super::state::AppState;
use super::write::{idempotency_key, keyed_request, keyed_response, spawn_write};
use crate::access::Scope;
use crate::http::error::{ApiError, ApiResult};
use crate::idempotency::KeyedRequest;
use crate::names::TableName;
use crate::pipeline::{BodySource, KeyedAnswer, KeyedWrite, ReplayRejects};
use crate::store::rejects::{RejectCursor, RejectFilter, StoredReject};
use crate::wire::rejects::{DeletedRejects, RejectView};
use crate::wire::status::RejectStatus;

pub fn router() -> Router<AppState> {
    Router::new()
        .route("/rejects", get(list_rejects).delete(delete_rejects))
        .route("/rejects/replay", post(replay_rejects))
}

#[derive(Deserialize)]
struct TableQuery {
    table: Option<String>,
    status: Option<String>,
}

impl TableQuery {
    fn table(&self, path: &str) -> ApiResult<TableName> {
        let table = self.table.as_deref().ok_or_else(|| {
            ApiError::InvalidRequest(format!(
                "the table query parameter is required: {path}?table=…"
            ))
        })?;
        Ok(TableName::parse(table)?)
    }
}

/// Replays the table's pending rejects under the request's Idempotency-Key.
async fn replay_rejects(
    State(state): State<AppState>,
    span: RequestSpan,
    caller: Caller,
    OriginalUri(uri): OriginalUri,
    ApiQuery(query): ApiQuery<TableQuery>,
    headers: HeaderMap,
) -> ApiResult<Response> {
    let key = idempotency_key(&headers)?.ok_or(ApiError::IdempotencyKeyMissing)?;
    let table = query.table("POST /rejects/replay")?;
    let request = keyed_request(caller.clone(), key, "POST", &uri, &headers);
    let answer = replay(&state, &span, caller, &table, request).await?;
    Ok(keyed_response(&state, &span, &table, answer))
}

/// Replays `table`'s pending rejects as `request` (its key and
/// fingerprint) asks: what `POST /rejects/replay` and the console's replay
/// button both do.
pub async fn replay(
    state: &AppState,
    span: &RequestSpan,
    caller: Caller,
    table: &TableName,
    request: KeyedRequest,
) -> ApiResult<KeyedAnswer> {
    caller.require(Scope::Write, table)?;
    span.record("table", tracing::field::display(table));
    let replay = ReplayRejects {
        table: table.clone(),
        principal: caller.actor.principal.clone(),
        idempotency_key: request.key.clone(),
        actor: caller.actor.clone(),
        // What it asks for is all in its path: its fingerprint is of no body.
        body: BodySource::empty(),
    };
    let pipeline = state.pipeline();
    let write = KeyedWrite::Replay(replay);
    let answer =
        spawn_write(async move { pipeline.run_keyed(request, write, RECEIPTS).await }).await;
    if let Err(e) = &answer {
        state.saw_refusal(table, e);
    }
    answer
}

/// Deletes the table's rejects in one status (`status` is required, so
/// that no request deletes them all by leaving it out).
async fn delete_rejects(
    State(state): State<AppState>,
    caller: Caller,
    ApiQuery(query): ApiQuery<TableQuery>,
) -> ApiResult<Json<DeletedRejects>> {
    let table = query.table("DELETE /rejects")?;
    caller.require(Scope::Write, &table)?;
    let status = query.status.as_deref().ok_or_else(|| {
        ApiError::InvalidRequest(format!(
            "the status query parameter is required, one of {}",
            RejectStatus::listed()
        ))
    })?;
    let status = parse_status(status)?;
    let deleted = state.store.delete_rejects(&table, status).await?;
    Ok(Json(DeletedRejects {
        deleted,
        status,
        table,
    }))
}

#[derive(Deserialize)]
struct RejectsQuery {
    table: Option<String>,
    load_id: Option<String>,
    status: Option<String>,
    /// RFC 3339: rejects received at or after it.
    since: Option<String>,
    /// The column of the first error (empty for a row's own error).
    column: Option<String>,
    limit: Option<i64>,
    /// The last reject of the previous page (`load_id.record`).
    cursor: Option<String>,
}

/// The rejects of the tables the caller may read, oldest first; JSON, or
/// NDJSON when the `Accept` header asks for it.
async fn list_rejects(
    State(state): State<AppState>,
    caller: Caller,
    OriginalUri(uri): OriginalUri,
    headers: HeaderMap,
    ApiQuery(q): ApiQuery<RejectsQuery>,
) -> ApiResult<Response> {
    let table = q.table.as_deref().map(TableName::parse).transpose()?;
    if let Some(table) = &table {
        caller.require(Scope::Read, table)?;
    }
    let status = q.status.as_deref().map(parse_status).transpose()?;
    let since = q.since.as_deref().map(parse_time).transpose()?;
    let load_id = q
        .load_id
        .as_deref()
        .map(|t| parse_id(t, "load id"))
        .transpose()?;
    let after = q.cursor.as_deref().map(parse_cursor).transpose()?;
    let limit = page_limit(q.limit)?;
    let visible = caller.grants.readable_like();
    let filter = RejectFilter {
        table: table.as_ref(),
        load_id,
        status,
        since,
        error_column: q.column.as_deref().map(check_error_column).transpose()?,
        visible: &visible,
    };
    let rejects = state.store.rejects(&filter, after, limit).await?;
    let rejects: Vec<RejectView> = rejects.into_iter().map(RejectView::from).collect();
    let cursor_of = |r: &RejectView| {
        RejectCursor {
            load_id: r.load_id,
            record: r.record,
        }
        .text()
    };
    Ok(if wants_ndjson(&headers) {
        page_ndjson(&uri, rejects, limit, cursor_of)
    } else {
        page(&uri, rejects, limit, cursor_of)
    })
}

pub fn parse_status(text: &str) -> ApiResult<RejectStatus> {
    RejectStatus::parse(text).ok_or_else(|| {
        ApiError::InvalidRequest(format!(
            "status {text:?} is not one of {}",
            RejectStatus::listed()
        ))
    })
}

impl From<StoredReject> for RejectView {
    fn from(r: StoredReject) -> Self {
        RejectView {
            table: r.table,
            load_id: r.load_id,
            record: r.record,
            line: r.line,
            ds: r.ds,
            origin: r.origin,
            mode: r.mode,
            format: r.format,
            raw: r.raw,
            raw_base64: r.raw_base64,
            csv_header: r.csv_header,
            errors: r.errors,
            idempotency_key: r.idempotency_key,
            received_at: r.received_at,
            tries: r.tries,
            status: r.status,
            replayed_by: r.replayed_by,
            last_tried_at: r.last_tried_at,
        }
    }
}

fn parse_time(text: &str) -> ApiResult<DateTime<Utc>> {
    DateTime::parse_from_rfc3339(text)
        .map(|t| t.with_timezone(&Utc))
        .map_err(|_| {
            ApiError::InvalidRequest(format!(
                "since {text:?} is not an RFC 3339 time such as 2026-12-01T00:00:00Z"
            ))
        })
}

fn parse_cursor(text: &str) -> ApiResult<RejectCursor> {
    RejectCursor::parse(text).ok_or_else(|| {
        ApiError::InvalidRequest(format!(
            "cursor {text:?} is not one this server gave (load_id.record)"
        ))
    })
}

/// The longest `column` filter taken (a field a body sent may have any
/// name, so this is not a column name's limit).
const MAX_ERROR_COLUMN: usize = 1000;

/// A `column` filter of the rejects (a field name as a body sent it, or
/// empty for a row's own errors): text Postgres can hold, at most
/// `MAX_ERROR_COLUMN` characters.
pub fn check_error_column(text: &str) -> ApiResult<&str> {
    if text.chars().count() <= MAX_ERROR_COLUMN && !text.contains('\0') {
        return Ok(text);
    }
    Err(ApiError::InvalidRequest(format!(
        "column must be at most {MAX_ERROR_COLUMN} characters, none of them NUL"
    )))
}
