//! `POST /rows?table={table}&mode=`: append or merge rows, under a required
//! `Idempotency-Key`.

use axum::body::Body;
use axum::extract::{OriginalUri, State};
use axum::http::HeaderMap;
use axum::response::Response;
use axum::routing::post;
use axum::Router;
use serde::Deserialize;

use super::observe::RequestSpan;
use super::receipts::RECEIPTS;
use super::{
    bad_rows_override, body_limits, body_source, idempotency_key, keyed_request, keyed_response,
    spawn_write, ApiQuery, AppState, BodyKind, Caller,
};
use crate::access::Scope;
use crate::http::error::{ApiError, ApiResult};
use crate::names::TableName;
use crate::pipeline::body::DigestMode;
use crate::pipeline::keyed::KeyedWrite;
use crate::pipeline::rows::PostRows;
use crate::schema::MergeMode;

pub fn router() -> Router<AppState> {
    Router::new().route("/rows", post(post_rows))
}

#[derive(Deserialize)]
struct RowsQuery {
    table: Option<String>,
    mode: Option<String>,
    bad_rows: Option<String>,
}

fn parse_mode(mode: Option<&str>) -> ApiResult<Option<MergeMode>> {
    mode.map(|name| {
        MergeMode::from_name(name).ok_or_else(|| {
            ApiError::InvalidRequest(format!(
                "mode {name:?} is not merge, patch, append, insert_missing or versions"
            ))
        })
    })
    .transpose()
}

async fn post_rows(
    State(state): State<AppState>,
    span: RequestSpan,
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
    let table = TableName::parse(&table)?;
    caller.require(Scope::Write, &table)?;
    span.record("table", tracing::field::display(&table));
    let mode = parse_mode(query.mode.as_deref())?;
    let bad_rows = bad_rows_override(query.bad_rows.as_deref())?;
    let limits = body_limits(&state.settings, BodyKind::Rows);
    let body = body_source(&headers, body, limits, DigestMode::Take)?;
    let principal = caller.principal.clone();
    let actor = caller.actor.clone();
    let request = keyed_request(caller, key.clone(), "POST", &uri, &headers);
    let write = KeyedWrite::Rows(PostRows {
        table: table.clone(),
        mode,
        body,
        principal,
        idempotency_key: key,
        actor,
        known_def: None,
        predecoded: None,
        bad_rows,
    });
    let pipeline = state.pipeline();
    match spawn_write(async move { pipeline.run_keyed(request, write, RECEIPTS).await }).await {
        Ok(answer) => Ok(keyed_response(&state, &span, &table, answer)),
        Err(e) => {
            state.saw_refusal(&table, &e);
            Err(e)
        }
    }
}
