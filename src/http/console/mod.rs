//! The web console at `/console`: server-rendered pages over what the API
//! already reads and does, for a person signed in with a token. One file a
//! page; `session` owns the cookie, the CSRF secret and the caller
//! (`signin_limit` the limit on failed sign-ins); `same_origin` refuses
//! changes sent by other sites' pages; `layout` the page shell and its
//! headers; `calendar` and `chart` a table's partitions (pure code).
//!
//! The console adds no power: each page asks the same `Caller` the API
//! would build from the session's token, and each act goes through the
//! same functions as its API call.

mod calendar;
mod chart;
mod duplicates;
mod layout;
mod loads;
mod rejects;
mod same_origin;
mod session;
mod signin_limit;
mod tables;
mod tokens;

use axum::http::{header, HeaderValue, StatusCode};
use axum::middleware;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::Router;

use super::error::ApiError;
use super::AppState;

/// The path every console page is under.
pub const ROOT: &str = "/console";

/// Whether `path` is the console's (its own session, not a bearer token).
pub fn owns(path: &str) -> bool {
    path == ROOT
        || path
            .strip_prefix(ROOT)
            .is_some_and(|rest| rest.starts_with('/'))
}

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

/// A console page's failure: the API's problem, shown as a page (same
/// status, `Retry-After` and metrics code), or a way back to sign-in.
pub enum PageError {
    Api(ApiError),
    /// No session (or one that ended): to the sign-in page.
    SignIn,
}

impl<E: Into<ApiError>> From<E> for PageError {
    fn from(error: E) -> Self {
        PageError::Api(error.into())
    }
}

impl IntoResponse for PageError {
    fn into_response(self) -> Response {
        let error = match self {
            PageError::SignIn => {
                return (StatusCode::SEE_OTHER, [(header::LOCATION, ROOT)]).into_response()
            }
            PageError::Api(error) => error,
        };
        let detail = error.detail();
        let (mut parts, _) = error.into_response().into_parts();
        let title = parts.status.canonical_reason().unwrap_or("Error");
        let page = layout::error_page(parts.status.as_u16(), title, &detail);
        parts.headers.insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("text/html; charset=utf-8"),
        );
        parts.headers.remove(header::CONTENT_LENGTH);
        Response::from_parts(parts, page.into_string().into())
    }
}

pub type PageResult<T = Response> = Result<T, PageError>;

/// A count as a page shows it: `10,000+` past what was counted.
pub fn shown_count(count: i64, cap: i64) -> String {
    let digits = grouped(count.min(cap));
    if count > cap {
        format!("{digits}+")
    } else {
        digits
    }
}

/// `1234567` as `1,234,567`.
pub fn grouped(n: impl Into<i128>) -> String {
    let n: i128 = n.into();
    let digits = n.unsigned_abs().to_string();
    let mut out = String::with_capacity(digits.len() + digits.len() / 3 + 1);
    if n < 0 {
        out.push('-');
    }
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// A query string from pairs, for links that keep a page's filters.
pub fn query_string(pairs: &[(&str, &str)]) -> String {
    let kept: Vec<_> = pairs.iter().filter(|(_, v)| !v.is_empty()).collect();
    serde_urlencoded::to_string(kept).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn console_paths_are_only_those_under_its_root() {
        assert!(owns("/console"));
        assert!(owns("/console/tables"));
        assert!(!owns("/consoles"));
        assert!(!owns("/tables"));
    }

    #[test]
    fn counts_are_grouped_and_capped() {
        assert_eq!(grouped(0), "0");
        assert_eq!(grouped(999), "999");
        assert_eq!(grouped(1_234_567), "1,234,567");
        assert_eq!(grouped(-1000), "-1,000");
        assert_eq!(shown_count(10_001, 10_000), "10,000+");
        assert_eq!(shown_count(12, 10_000), "12");
    }
}
