//! Lists a page at a time: the page size asked for, the page as JSON or
//! NDJSON, and the `Link` to the next page.

use axum::http::{header, HeaderMap, HeaderValue};
use axum::response::{IntoResponse, Response};
use axum::Json;

use super::error::{ApiError, ApiResult};

/// The most items a list answers at once, and how many when not asked.
pub const MAX_PAGE: i64 = 1000;
pub const DEFAULT_PAGE: i64 = 100;

/// A list's page size: `DEFAULT_PAGE` when not asked; a `limit` outside 1 to
/// `MAX_PAGE` is refused rather than bent, so a client never gets a page of
/// another size than it asked for without being told.
pub fn page_limit(limit: Option<i64>) -> ApiResult<i64> {
    match limit {
        None => Ok(DEFAULT_PAGE),
        Some(limit) if (1..=MAX_PAGE).contains(&limit) => Ok(limit),
        Some(limit) => Err(ApiError::InvalidRequest(format!(
            "limit must be an integer from 1 to {MAX_PAGE}, not {limit}"
        ))),
    }
}

/// A page of a list: the items as a JSON array, and when the page is full,
/// a `Link: <…&cursor=…>; rel="next"` header to the next page (the same
/// request with `cursor` set to the last item's key).
pub fn page<T: serde::Serialize>(
    uri: &axum::http::Uri,
    items: Vec<T>,
    limit: i64,
    cursor_of: impl Fn(&T) -> String,
) -> Response {
    let link = next_page(uri, &items, limit, cursor_of);
    with_link(Json(items).into_response(), link)
}

/// A page as `page` answers it, but NDJSON: one item a line.
pub fn page_ndjson<T: serde::Serialize>(
    uri: &axum::http::Uri,
    items: Vec<T>,
    limit: i64,
    cursor_of: impl Fn(&T) -> String,
) -> Response {
    let link = next_page(uri, &items, limit, cursor_of);
    let mut out = Vec::new();
    for item in &items {
        serde_json::to_writer(&mut out, item).expect("a listed item serializes");
        out.push(b'\n');
    }
    let content_type = HeaderValue::from_static("application/x-ndjson");
    with_link(
        ([(header::CONTENT_TYPE, content_type)], out).into_response(),
        link,
    )
}

/// Whether the client asked for NDJSON rather than JSON.
pub fn wants_ndjson(headers: &HeaderMap) -> bool {
    headers
        .get(header::ACCEPT)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|accept| {
            accept.contains("application/x-ndjson") || accept.contains("application/ndjson")
        })
}

/// The `Link` to the next page, when this one is full.
fn next_page<T>(
    uri: &axum::http::Uri,
    items: &[T],
    limit: i64,
    cursor_of: impl Fn(&T) -> String,
) -> Option<HeaderValue> {
    let full = usize::try_from(limit).is_ok_and(|limit| items.len() >= limit);
    let cursor = items.last().filter(|_| full).map(cursor_of)?;
    next_link(uri, &cursor)
}

fn with_link(mut response: Response, link: Option<HeaderValue>) -> Response {
    if let Some(link) = link {
        response.headers_mut().insert(header::LINK, link);
    }
    response
}

fn next_link(uri: &axum::http::Uri, cursor: &str) -> Option<HeaderValue> {
    let mut pairs: Vec<(String, String)> =
        serde_urlencoded::from_str(uri.query().unwrap_or("")).ok()?;
    pairs.retain(|(name, _)| name != "cursor");
    pairs.push(("cursor".into(), cursor.into()));
    let query = serde_urlencoded::to_string(&pairs).ok()?;
    HeaderValue::from_str(&format!("<{}?{query}>; rel=\"next\"", uri.path())).ok()
}
