//! The web console at `/console`: server-rendered pages over what the API
//! already reads and does, for a person signed in with a token. One file a
//! page; `session` owns the cookie, the CSRF secret and the caller
//! (`signin_limit` the limit on failed sign-ins); `same_origin` refuses
//! changes sent by other sites' pages; `layout` the page shell, its
//! headers and `ROOT`; `error` a failure shown as a page; `text` counts and
//! links as pages write them; `calendar` and `chart` a table's partitions
//! (pure code). This file is only the router, so that no page imports it.
//!
//! The console adds no power: each page asks the same `Caller` the API
//! would build from the session's token, and each act goes through the
//! same functions as its API call.

mod calendar;
mod chart;
mod duplicates;
mod error;
mod layout;
mod loads;
mod rejects;
mod same_origin;
mod session;
mod signin_limit;
mod tables;
mod text;
mod tokens;

pub use layout::ROOT;
pub use text::grouped;

use axum::middleware;
use axum::routing::{get, post};
use axum::Router;

use super::state::AppState;

pub fn router() -> Router<AppState> {
    Router::new()
        .route(ROOT, get(session::start_page))
        .route("/console/session", post(session::sign_in))
        .route(
            "/console/session/end",
            post(session::sign_out_form).delete(session::sign_out),
        )
        .route("/console/assets/console.css", get(layout::stylesheet))
        .route("/console/tables", get(tables::list))
        .route("/console/tables/{table}", get(tables::show))
        .route("/console/loads", get(loads::list))
        .route("/console/rejects", get(rejects::list))
        .route("/console/rejects/replay", post(rejects::replay))
        .route("/console/rejects/delete", post(rejects::delete_expired))
        .route("/console/duplicates", get(duplicates::list))
        .route("/console/tokens", get(tokens::list).post(tokens::create))
        .route("/console/tokens/revoke", post(tokens::revoke))
        .layer(middleware::from_fn(same_origin::refuse_other_sites))
        .layer(middleware::from_fn(layout::secure_headers))
}
