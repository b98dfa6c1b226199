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
use crate::wire::loads::LedgerLoad;
use crate::wire::status::LoadStatus;

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
        return Ok(Json(staged_loads::wire_view(&view)).into_response());
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
        .map(|load| Json(LedgerLoad::from(load)).into_response())
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
    let status = q.status.as_deref().map(parse_load_status).transpose()?;
    if let Some(token) = q.token.as_deref() {
        check_token_filter(token)?;
    }
    let limit = page_limit(q.limit)?;
    let visible = caller.grants.readable_like();
    let filter = LoadFilter {
        table: table.as_ref(),
        ds,
        status,
        token: q.token.as_deref(),
        visible: &visible,
    };
    let loads = state.store.loads(filter, before, limit).await?;
    let loads: Vec<LedgerLoad> = loads.into_iter().map(LedgerLoad::from).collect();
    Ok(page(&uri, loads, limit, |load: &LedgerLoad| {
        load.load_id.to_string()
    }))
}

/// A `status` filter of the ledger: one of `LoadStatus::ALL`.
pub fn parse_load_status(text: &str) -> ApiResult<LoadStatus> {
    LoadStatus::parse(text).ok_or_else(|| {
        ApiError::InvalidRequest(format!(
            "status {text:?} is not one of {}",
            LoadStatus::listed()
        ))
    })
}

impl From<Load> for LedgerLoad {
    fn from(load: Load) -> Self {
        LedgerLoad {
            load_id: load.load_id,
            table: load.table_name,
            ds: load.ds,
            mode: load.mode,
            status: load.status,
            rows_received: load.rows_received,
            rows_written: load.rows_written,
            duplicates: load.duplicates,
            rejected: load.rejected,
            content_sha256: load.content_sha256,
            changed: load.changed,
            idempotency_key: load.idempotency_key,
            error: load.error,
            started_at: load.started_at,
            finished_at: load.finished_at,
            duration_ms: load.duration_ms,
            token_id: load.token_id,
            token_name: load.token_name,
            dropped_by: load.dropped_by,
        }
    }
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
