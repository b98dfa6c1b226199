//! `/channels`: the caller's channels and the offset each committed
//! (`GET /channels`, `GET /channels/{name}`), and their reset (`DELETE
//! /channels/{name}`, admin).
//!
//! A channel is its token's own, as an Idempotency-Key is: any token reads
//! its own channels (a producer with only the write scope asks where it
//! left off), and only an admin resets one, its own or, with
//! `?principal=`, another token's.

use axum::extract::{OriginalUri, State};
use axum::http::StatusCode;
use axum::response::Response;
use axum::routing::get;
use axum::{Json, Router};
use serde::Deserialize;

use super::auth::Caller;
use super::extract::{ApiPath, ApiQuery};
use super::paging::{page, page_limit};
use super::state::AppState;
use crate::channel::ChannelName;
use crate::http::error::{ApiError, ApiResult};
use crate::ids::Principal;
use crate::store::channels::ChannelInfo;
use crate::wire::channels::ChannelView;

pub fn router() -> Router<AppState> {
    Router::new()
        .route("/channels", get(list_channels))
        .route("/channels/{name}", get(get_channel).delete(reset_channel))
}

/// A channel as answered.
impl From<ChannelInfo> for ChannelView {
    fn from(c: ChannelInfo) -> Self {
        ChannelView {
            name: c.name,
            offset_kind: c.offset_kind.as_str().to_string(),
            committed_offset: c.committed_offset,
            table: c.table,
            load_id: c.load_id,
            committed_at: c.committed_at,
            commits: c.commits,
        }
    }
}

#[derive(Deserialize)]
struct ListQuery {
    limit: Option<i64>,
    /// The last channel name of the previous page.
    cursor: Option<String>,
}

async fn list_channels(
    State(state): State<AppState>,
    caller: Caller,
    OriginalUri(uri): OriginalUri,
    ApiQuery(query): ApiQuery<ListQuery>,
) -> ApiResult<Response> {
    let limit = page_limit(query.limit)?;
    let after = query
        .cursor
        .as_deref()
        .map(ChannelName::parse)
        .transpose()?;
    let channels = state
        .store
        .channels(&caller.actor.principal, after.as_ref(), limit)
        .await?;
    let views: Vec<ChannelView> = channels.into_iter().map(ChannelView::from).collect();
    Ok(page(&uri, views, limit, |c: &ChannelView| c.name.clone()))
}

async fn get_channel(
    State(state): State<AppState>,
    caller: Caller,
    ApiPath(name): ApiPath<String>,
) -> ApiResult<Json<ChannelView>> {
    let name = ChannelName::parse(&name)?;
    state
        .store
        .channel(&caller.actor.principal, &name)
        .await?
        .map(|c| Json(ChannelView::from(c)))
        .ok_or_else(|| {
            ApiError::ChannelNotFound(format!(
                "channel {:?} has committed no offset for this token",
                name.as_str()
            ))
        })
}

/// A principal named in a query: a token's id, or the name of a caller
/// without a token (`admin`, `anonymous`).
fn parse_principal(text: String) -> ApiResult<Principal> {
    if let Ok(principal @ (Principal::Token(_) | Principal::Admin | Principal::Anonymous)) =
        text.parse()
    {
        return Ok(principal);
    }
    let shown: String = text.chars().take(40).collect();
    Err(ApiError::InvalidRequest(format!(
        "principal {shown:?} is not a token id, admin or anonymous"
    )))
}

#[derive(Deserialize)]
struct ResetQuery {
    /// Whose channel: a token's id (`admin` for the bootstrap token);
    /// the caller's own when absent.
    principal: Option<String>,
}

/// Forgets the channel: its next POST starts it afresh, with any offset and
/// kind. 204 whether or not it existed, so a reset can be retried.
async fn reset_channel(
    State(state): State<AppState>,
    caller: Caller,
    ApiPath(name): ApiPath<String>,
    ApiQuery(query): ApiQuery<ResetQuery>,
) -> ApiResult<StatusCode> {
    caller.require_admin()?;
    let name = ChannelName::parse(&name)?;
    let principal = match query.principal {
        Some(principal) => parse_principal(principal)?,
        None => caller.actor.principal,
    };
    if state.store.reset_channel(&principal, &name).await? {
        tracing::info!(channel = %name, principal = %principal, "channel reset");
    }
    Ok(StatusCode::NO_CONTENT)
}
