//! `PUT /partitions/{table}?from=&to=` (a range) and `PUT
//! /tables/{table}/rows` (the whole table): loads of several partitions in
//! one request, published in one transaction. Both take `?dry_run=true`,
//! `?audit=<json>` and `?bad_rows=`; `If-Match` / `If-None-Match: *` hold
//! against the target's content hash (the sum of its partitions').

use axum::body::Body;
use axum::extract::State;
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::put;
use axum::{Json, Router};
use serde::Deserialize;

use super::auth::Caller;
use super::extract::{ApiQuery, TablePath};
use super::observe::RequestSpan;
use super::preconditions;
use super::state::AppState;
use super::write::{
    bad_rows_override, body_limits, body_source, check_put_mode, etag, idempotency_key,
    spawn_write, BodyKind,
};
use crate::access::Scope;
use crate::http::error::{ApiError, ApiResult};
use crate::names::TableName;
use crate::pipeline::{DigestMode, LoadTarget, PutMany, WriteError};
use crate::wire::loads::LoadReceipt;

pub fn router() -> Router<AppState> {
    Router::new()
        .route("/partitions/{table}", put(put_range))
        .route("/tables/{table}/rows", put(put_table_rows))
}

/// What a range or whole-table PUT takes in its query.
#[derive(Deserialize)]
pub struct ManyQuery {
    /// `versions`, for a table that keeps versions (see `check_put_mode`).
    pub mode: Option<String>,
    pub from: Option<String>,
    pub to: Option<String>,
    pub bad_rows: Option<String>,
    /// Audits for this request, as URL-encoded JSON.
    pub audit: Option<String>,
    pub dry_run: Option<bool>,
}

impl ManyQuery {
    /// `?audit=`, parsed as JSON (checked against the table later).
    pub fn audits(&self) -> ApiResult<Option<serde_json::Value>> {
        self.audit
            .as_deref()
            .map(|text| {
                serde_json::from_str(text).map_err(|e| {
                    ApiError::InvalidRequest(format!("audit is not a JSON object: {e}"))
                })
            })
            .transpose()
    }
}

async fn put_range(
    State(state): State<AppState>,
    span: RequestSpan,
    caller: Caller,
    TablePath(table): TablePath,
    ApiQuery(query): ApiQuery<ManyQuery>,
    headers: HeaderMap,
    body: Body,
) -> ApiResult<Response> {
    caller.require(Scope::Write, &table)?;
    let (Some(from), Some(to)) = (query.from.as_deref(), query.to.as_deref()) else {
        return Err(ApiError::InvalidRequest(
            "a PUT of several partitions names its range: ?from=DS&to=DS (both included)".into(),
        ));
    };
    let def = super::write::table_def(&state, &table).await?;
    let target = LoadTarget::range(&def, from, to).map_err(WriteError::from)?;
    put_many(state, span, caller, table, target, query, headers, body).await
}

async fn put_table_rows(
    State(state): State<AppState>,
    span: RequestSpan,
    caller: Caller,
    TablePath(table): TablePath,
    ApiQuery(query): ApiQuery<ManyQuery>,
    headers: HeaderMap,
    body: Body,
) -> ApiResult<Response> {
    caller.require(Scope::Write, &table)?;
    if query.from.is_some() || query.to.is_some() {
        return Err(ApiError::InvalidRequest(
            "the whole table has no range; PUT /partitions/{table}?from=&to= replaces one".into(),
        ));
    }
    put_many(
        state,
        span,
        caller,
        table,
        LoadTarget::Table,
        query,
        headers,
        body,
    )
    .await
}

/// Runs the load and answers its receipt, with the target's new `ETag`.
#[allow(clippy::too_many_arguments)]
pub(super) async fn put_many(
    state: AppState,
    span: RequestSpan,
    caller: Caller,
    table: TableName,
    target: LoadTarget,
    query: ManyQuery,
    headers: HeaderMap,
    body: Body,
) -> ApiResult<Response> {
    // Such a load keeps no key (the same content again changes nothing),
    // but a malformed one is refused as everywhere.
    idempotency_key(&headers)?;
    if query.mode.is_some() {
        let def = state.store.table(&table).await?;
        check_put_mode(query.mode.as_deref(), def.as_ref())?;
    }
    let request = PutMany {
        table: table.clone(),
        target,
        bad_rows: bad_rows_override(query.bad_rows.as_deref())?,
        audits: query.audits()?,
        dry_run: query.dry_run.unwrap_or(false),
        conditions: preconditions::expected(&headers)?,
        body: body_source(
            &headers,
            body,
            body_limits(&state.settings, BodyKind::Partition),
            DigestMode::Skip,
        )?,
        actor: caller.actor.clone(),
    };
    let pipeline = state.pipeline();
    let written = spawn_write(async move { pipeline.put_many(request).await }).await;
    let receipt = match written {
        Ok(receipt) => receipt,
        Err(e) => {
            state.saw_refusal(&table, &e);
            return Err(e);
        }
    };
    span.record("load_id", tracing::field::display(receipt.load_id));
    Ok(answer(&receipt))
}

/// A load's receipt as its answer (`ETag`: the target's content after it).
pub fn answer(receipt: &LoadReceipt) -> Response {
    let mut response = (StatusCode::OK, Json(receipt)).into_response();
    if !receipt.dry_run {
        response
            .headers_mut()
            .insert(header::ETAG, etag(&receipt.content_sha256));
    }
    response
}
