//! The HTTP surface: one module per resource, each with its own `router()`,
//! merged here. What the resources share has a file of its own: the
//! state every handler reaches (`state`), the API's extractors (`extract`),
//! paging (`paging`), what the handlers of writes share (`write`), errors
//! as problem+json (`error`).

pub mod auth;
pub mod channels;
pub mod client_addr;
pub mod client_requests;
pub mod console;
pub mod duplicates;
pub mod edge;
pub mod error;
pub mod extract;
pub mod history_rows;
pub mod idempotency_keys;
pub mod load_events;
pub mod load_events_heard;
pub mod loads;
pub mod many;
pub mod observe;
pub mod ops;
pub mod paging;
pub mod partitions;
pub mod preconditions;
pub mod receipts;
pub mod rejects;
pub mod rows;
pub mod staged_loads;
pub mod state;
pub mod table_rows;
pub mod tables;
pub mod token_cache;
pub mod tokens;
pub mod write;

use axum::Router;

use error::ApiError;
use state::AppState;

/// Every route; the console's when `console` (`IDEM_CONSOLE`).
pub fn router(console: bool) -> Router<AppState> {
    let routes = if console {
        console::router()
    } else {
        Router::new()
    };
    routes
        .merge(tables::router())
        .merge(table_rows::router())
        .merge(history_rows::router())
        .merge(partitions::router())
        .merge(many::router())
        .merge(rows::router())
        .merge(channels::router())
        .merge(idempotency_keys::router())
        .merge(loads::router())
        .merge(load_events::router())
        .merge(staged_loads::router())
        .merge(rejects::router())
        .merge(duplicates::router())
        .merge(tokens::router())
        .merge(ops::router())
        .fallback(|| async { ApiError::NotFound("no such resource; see GET /openapi.yaml".into()) })
        .method_not_allowed_fallback(|| async { ApiError::MethodNotAllowed })
}
