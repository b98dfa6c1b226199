//! The loads ledger over HTTP.

use axum::extract::{OriginalUri, State};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use serde::Deserialize;

use super::auth::Caller;
use super::extract::{parse_id, parse_label, ApiPath, ApiQuery};
use super::paging::{page, page_limit};
use super::staged_loads;
use super::state::AppState;
use crate::access::Scope;
use crate::http::error::{ApiError, ApiResult};
use crate::names::TableName;
use crate::store::ledger::{Load, LoadFilter};

pub fn router() -> Router<AppState> {
    Router::new().route("/loads", get(list_loads)).route(
        "/loads/{load_id}",
        get(get_load).delete(staged_loads::abandon_load),
    )
}

/// A load of a table the caller may not read is, to it, no load at all. A
/// staged load (`POST /loads`) is shown as it stands; any other as the
/// ledger has it.
async fn get_load(
    State(state): State<AppState>,
    caller: Caller,
    ApiPath(load_id): ApiPath<String>,
) -> ApiResult<Response> {
    if let Some(view) = staged_loads::visible_load(&state, &caller, &load_id, Scope::Read).await? {
        return Ok(Json(staged_loads::view_json(&view)).into_response());
    }
    let load_id = parse_id(&load_id, "load id")?;
    state
        .store
        .load(load_id)
        .await?
        .filter(|load| {
            TableName::parse(&load.table_name)
                .is_ok_and(|table| caller.grants.allows(Scope::Read, &table))
        })
        .map(|load| Json(load).into_response())
        .ok_or_else(|| ApiError::NotFound(format!("no load {load_id}")))
}

#[derive(Deserialize)]
struct LoadsQuery {
    table: Option<String>,
    ds: Option<String>,
    /// A ledger status (`published`, `unchanged`, `rejected`, `failed`,
    /// `audit_failed`).
    status: Option<String>,
    /// The name of the token that made the load.
    token: Option<String>,
    limit: Option<i64>,
    /// The last load id of the previous page.
    cursor: Option<String>,
}

/// The loads of the tables the caller may read (403 when it names one it
/// may not).
async fn list_loads(
    State(state): State<AppState>,
    caller: Caller,
    OriginalUri(uri): OriginalUri,
    ApiQuery(q): ApiQuery<LoadsQuery>,
) -> ApiResult<Response> {
    let table = q.table.as_deref().map(TableName::parse).transpose()?;
    if let Some(table) = &table {
        caller.require(Scope::Read, table)?;
    }
    let ds = q.ds.as_deref().map(parse_label).transpose()?;
    let before = q
        .cursor
        .as_deref()
        .map(|t| parse_id(t, "load id"))
        .transpose()?;
    if let Some(status) = q.status.as_deref() {
        check_load_status(status)?;
    }
    if let Some(token) = q.token.as_deref() {
        check_token_filter(token)?;
    }
    let limit = page_limit(q.limit)?;
    let visible = caller.grants.readable_like();
    let filter = LoadFilter {
        table: table.as_ref(),
        ds,
        status: q.status.as_deref(),
        token: q.token.as_deref(),
        visible: &visible,
    };
    let loads = state.store.loads(filter, before, limit).await?;
    Ok(page(&uri, loads, limit, |load: &Load| {
        load.load_id.to_string()
    }))
}

/// The states a finished load can have in the ledger.
pub const LOAD_STATUSES: [&str; 5] = [
    "published",
    "unchanged",
    "rejected",
    "failed",
    "audit_failed",
];

/// A `status` filter of the ledger: one of `LOAD_STATUSES`.
pub fn check_load_status(text: &str) -> ApiResult<()> {
    if LOAD_STATUSES.contains(&text) {
        return Ok(());
    }
    Err(ApiError::InvalidRequest(format!(
        "status {text:?} is not one of {}",
        LOAD_STATUSES.join(", ")
    )))
}

/// A `token` filter of the ledger: a name a token can have.
pub fn check_token_filter(name: &str) -> ApiResult<()> {
    if super::tokens::valid_name(name) {
        return Ok(());
    }
    Err(ApiError::InvalidRequest(format!(
        "token: a token's {}",
        super::tokens::NAME_RULE
    )))
}
