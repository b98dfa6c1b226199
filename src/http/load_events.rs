//! `GET /loads/events`: the announced loads (see `store::load_events`) as
//! Server-Sent Events, one event a load (`event: load`, `id:` its position,
//! `data:` its ledger row as `GET /loads` shows it), in position order,
//! from the position after `Last-Event-ID` (or `?after=`), else from now.
//! Heartbeats every 15 s; a stream ends after an hour with `event: close`,
//! for the client to resume from its last id. Each process keeps a few
//! streams open per token.
//!
//! The positions are read from the database; what this process hears
//! (`LoadEvents`) only wakes its streams to read them, so a stream on any
//! process sees every load, whichever process wrote or announced it.

use std::collections::VecDeque;
use std::convert::Infallible;
use std::time::Duration;

use axum::extract::State;
use axum::http::HeaderMap;
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use serde::Deserialize;
use tokio::sync::watch;
use tokio::time::Instant;

use super::auth::Caller;
use super::extract::ApiQuery;
use super::state::AppState;
use crate::access::Scope;
use crate::http::error::{ApiError, ApiResult};
use crate::ids::Principal;
use crate::names::TableName;
use crate::wire::loads::LedgerLoad;

/// Streams one token may hold open on one process.
pub const STREAMS_PER_TOKEN: usize = 8;
/// How long a stream lasts before it asks its client to resume.
const LIFETIME: Duration = Duration::from_secs(3600);
const HEARTBEAT: Duration = Duration::from_secs(15);
/// How often a stream looks for new positions when it hears of none.
const LOOK_EVERY: Duration = Duration::from_secs(1);
/// Loads read at once.
const PAGE: i64 = 500;

pub fn router() -> Router<AppState> {
    Router::new().route("/loads/events", get(load_events))
}

/// A stream's place among its token's (given back when it ends).
struct StreamSlot {
    state: AppState,
    principal: Principal,
}

impl StreamSlot {
    fn take(state: &AppState, principal: &Principal) -> ApiResult<StreamSlot> {
        if !state.load_events.open_stream(principal, STREAMS_PER_TOKEN) {
            return Err(ApiError::TooManyStreams(STREAMS_PER_TOKEN));
        }
        Ok(StreamSlot {
            state: state.clone(),
            principal: principal.clone(),
        })
    }
}

impl Drop for StreamSlot {
    fn drop(&mut self) {
        self.state.load_events.close_stream(&self.principal);
    }
}

#[derive(Deserialize)]
struct EventsQuery {
    table: Option<String>,
    /// The position to start after, when no `Last-Event-ID` says it.
    after: Option<i64>,
}

async fn load_events(
    State(state): State<AppState>,
    caller: Caller,
    headers: HeaderMap,
    ApiQuery(q): ApiQuery<EventsQuery>,
) -> ApiResult<Response> {
    let table = q.table.as_deref().map(TableName::parse).transpose()?;
    if let Some(table) = &table {
        caller.require(Scope::Read, table)?;
    }
    let after = match (last_event_id(&headers)?, q.after) {
        (Some(id), _) | (None, Some(id)) => id,
        (None, None) => state.store.last_load_event().await?,
    };
    let slot = StreamSlot::take(&state, &caller.actor.principal)?;
    let cursor = Cursor {
        wake: state.load_events.subscribe(),
        state,
        table,
        visible: caller.grants.readable_like(),
        after,
        ready: VecDeque::new(),
        ends: Instant::now() + LIFETIME,
        closed: false,
        _slot: slot,
    };
    let stream = futures::stream::unfold(cursor, |mut cursor| async move {
        let event = cursor.next().await?;
        Some((Ok::<_, Infallible>(event), cursor))
    });
    let heartbeat = KeepAlive::new().interval(HEARTBEAT).text("heartbeat");
    Ok(Sse::new(stream).keep_alive(heartbeat).into_response())
}

/// The `Last-Event-ID` header: a position; a 400 when it is not one.
fn last_event_id(headers: &HeaderMap) -> ApiResult<Option<i64>> {
    let Some(value) = headers.get("last-event-id") else {
        return Ok(None);
    };
    value
        .to_str()
        .ok()
        .and_then(|text| text.trim().parse::<i64>().ok())
        .filter(|id| *id >= 0)
        .map(Some)
        .ok_or_else(|| {
            ApiError::InvalidRequest("Last-Event-ID is not a position of /loads/events".into())
        })
}

/// Where a stream stands: what it sent last, what it read and has not sent.
struct Cursor {
    state: AppState,
    wake: watch::Receiver<i64>,
    table: Option<TableName>,
    visible: Vec<String>,
    after: i64,
    ready: VecDeque<Event>,
    ends: Instant,
    closed: bool,
    _slot: StreamSlot,
}

impl Cursor {
    /// The next event; `None` once the stream is over (its lifetime past,
    /// or the database failing it: the client resumes from its last id).
    async fn next(&mut self) -> Option<Event> {
        loop {
            if let Some(event) = self.ready.pop_front() {
                return Some(event);
            }
            if self.closed {
                return None;
            }
            if Instant::now() >= self.ends {
                self.closed = true;
                let resume = serde_json::json!({"reason": "lifetime", "resume_after": self.after});
                return Some(Event::default().event("close").data(resume.to_string()));
            }
            let read = self
                .state
                .store
                .load_events_after(self.after, self.table.as_ref(), &self.visible, PAGE)
                .await;
            let Ok(loads) = read else {
                tracing::warn!("an event stream could not read the ledger; it ends");
                return None;
            };
            if loads.is_empty() {
                self.wait().await;
                continue;
            }
            for (position, load) in loads {
                self.after = position;
                let event = Event::default()
                    .event("load")
                    .id(position.to_string())
                    .json_data(LedgerLoad::from(load));
                self.ready.extend(event.ok());
            }
        }
    }

    /// Until this process hears of a new position, a while passes, or the
    /// stream's lifetime ends.
    async fn wait(&mut self) {
        let look = Instant::now() + LOOK_EVERY;
        tokio::select! {
            _ = self.wake.changed() => {}
            _ = tokio::time::sleep_until(look.min(self.ends)) => {}
        }
    }
}
