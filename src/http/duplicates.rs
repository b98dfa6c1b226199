//! `GET /duplicates`: the versions of repeated keys a `duplicates` policy
//! did not write.

use axum::extract::{OriginalUri, State};
use axum::http::HeaderMap;
use axum::response::Response;
use axum::routing::get;
use axum::Router;
use serde::Deserialize;

use super::auth::Caller;
use super::extract::{parse_id, ApiQuery};
use super::paging::{page, page_limit, page_ndjson, wants_ndjson};
use super::state::AppState;
use crate::access::Scope;
use crate::http::error::{ApiError, ApiResult};
use crate::names::TableName;
use crate::store::duplicates_log::{LogCursor, LoggedVersion};

pub fn router() -> Router<AppState> {
    Router::new().route("/duplicates", get(list_duplicates))
}

#[derive(Deserialize)]
struct DuplicatesQuery {
    table: Option<String>,
    load_id: Option<String>,
    limit: Option<i64>,
    /// The last version of the previous page (`load_id.row_id.version`).
    cursor: Option<String>,
}

/// The log of the tables the caller may read, oldest load first; JSON, or
/// NDJSON when the `Accept` header asks for it.
async fn list_duplicates(
    State(state): State<AppState>,
    caller: Caller,
    OriginalUri(uri): OriginalUri,
    headers: HeaderMap,
    ApiQuery(q): ApiQuery<DuplicatesQuery>,
) -> ApiResult<Response> {
    let table = q.table.as_deref().map(TableName::parse).transpose()?;
    if let Some(table) = &table {
        caller.require(Scope::Read, table)?;
    }
    let load_id = q
        .load_id
        .as_deref()
        .map(|t| parse_id(t, "load id"))
        .transpose()?;
    let after = q
        .cursor
        .as_deref()
        .map(|text| {
            LogCursor::parse(text).ok_or_else(|| {
                ApiError::InvalidRequest(format!(
                    "cursor {text:?} is not one this server gave (load_id.row_id.version)"
                ))
            })
        })
        .transpose()?;
    let limit = page_limit(q.limit)?;
    let visible = caller.grants.readable_like();
    let versions = state
        .store
        .duplicates(table.as_ref(), load_id, &visible, after.as_ref(), limit)
        .await?;
    let cursor_of = |v: &LoggedVersion| LogCursor::of(v).text();
    Ok(if wants_ndjson(&headers) {
        page_ndjson(&uri, versions, limit, cursor_of)
    } else {
        page(&uri, versions, limit, cursor_of)
    })
}
