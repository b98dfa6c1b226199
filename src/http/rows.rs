//! `POST /rows?table={table}&mode=`: append or merge rows, under an
//! `Idempotency-Key`, on a channel (`&channel=&offset=`), or both.

use axum::body::Body;
use axum::extract::{OriginalUri, State};
use axum::http::HeaderMap;
use axum::response::Response;
use axum::routing::post;
use axum::Router;
use serde::Deserialize;

use super::auth::Caller;
use super::extract::ApiQuery;
use super::observe::RequestSpan;
use super::receipts::RECEIPTS;
use super::state::AppState;
use super::write::{
    bad_rows_override, body_limits, body_source, idempotency_key, keyed_request, keyed_response,
    spawn_write, BodyKind,
};
use crate::access::Scope;
use crate::channel::ChannelOffset;
use crate::http::error::{ApiError, ApiResult};
use crate::names::TableName;
use crate::pipeline::{DigestMode, KeyedWrite, PostRows};
use crate::schema::MergeMode;

pub fn router() -> Router<AppState> {
    Router::new().route("/rows", post(post_rows))
}

#[derive(Deserialize)]
struct RowsQuery {
    table: Option<String>,
    mode: Option<String>,
    bad_rows: Option<String>,
    channel: Option<String>,
    offset: Option<String>,
    offset_kind: Option<String>,
    /// `false`: an undeclared table is 404 `table_not_found`, not made from
    /// the body.
    create: Option<bool>,
}

/// `channel`, `offset` and `offset_kind`: each of the first two needs the other.
fn channel_offset(query: &RowsQuery) -> ApiResult<Option<ChannelOffset>> {
    match (&query.channel, &query.offset) {
        (Some(name), Some(offset)) => Ok(Some(ChannelOffset::parse(
            name,
            offset,
            query.offset_kind.as_deref(),
        )?)),
        (None, None) if query.offset_kind.is_none() => Ok(None),
        (None, _) => Err(ApiError::InvalidRequest(
            "offset and offset_kind go with a channel: POST /rows?table=…&channel=…&offset=…"
                .into(),
        )),
        (Some(_), None) => Err(ApiError::InvalidRequest(
            "a POST on a channel needs its offset: POST /rows?table=…&channel=…&offset=…".into(),
        )),
    }
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
    let key = idempotency_key(&headers)?;
    let channel = channel_offset(&query)?;
    if key.is_none() && channel.is_none() {
        return Err(ApiError::IdempotencyKeyMissing);
    }
    let table = query.table.ok_or_else(|| {
        ApiError::InvalidRequest("the table query parameter is required: POST /rows?table=…".into())
    })?;
    let table = TableName::parse(&table)?;
    caller.require(Scope::Write, &table)?;
    span.record("table", tracing::field::display(&table));
    let mode = parse_mode(query.mode.as_deref())?;
    let bad_rows = bad_rows_override(query.bad_rows.as_deref())?;
    let limits = body_limits(&state.settings, BodyKind::Rows);
    // Only a key's fingerprint needs the body's digest.
    let digest = if key.is_some() {
        DigestMode::Take
    } else {
        DigestMode::Skip
    };
    let body = body_source(&headers, body, limits, digest)?;
    let rows = PostRows {
        table: table.clone(),
        mode,
        body,
        principal: caller.actor.principal.clone(),
        idempotency_key: key.clone(),
        channel: channel.map(Box::new),
        actor: caller.actor.clone(),
        known_def: None,
        predecoded: None,
        bad_rows,
        create_table: query.create != Some(false),
    };
    let pipeline = state.pipeline();
    let written = match key {
        Some(key) => {
            let request = keyed_request(caller, key, "POST", &uri, &headers);
            let write = KeyedWrite::Rows(Box::new(rows));
            spawn_write(async move { pipeline.run_keyed(request, write, RECEIPTS).await }).await
        }
        None => spawn_write(async move { pipeline.post_on_channel(rows, RECEIPTS).await }).await,
    };
    match written {
        Ok(answer) => Ok(keyed_response(&state, &span, &table, answer)),
        Err(e) => {
            state.saw_refusal(&table, &e);
            Err(e)
        }
    }
}
