//! What every answer goes through on its way out: a JSON body's final
//! newline, the `Host` allow-list, CORS, and a panic's problem document.

use std::any::Any;
use std::time::Duration;

use axum::body::{Body, HttpBody};
use axum::extract::{Request, State};
use axum::http::{header, HeaderMap, HeaderName, HeaderValue, Method};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use tower_http::cors::{AllowOrigin, CorsLayer};

use super::observe::REQUEST_ID;
use super::partitions::ROW_COUNT_HEADER;
use super::state::AppState;
use super::write::{IDEMPOTENCY_KEY, REPLAYED_HEADER};
use crate::http::error::ApiError;

/// Ends a JSON answer held whole in memory (a receipt, a list, a problem)
/// with a newline, so that a shell prompt or a line reader finds the line
/// whole. Streamed bodies (a partition's rows) have no known size and
/// pass untouched: they end with a newline of their own.
pub async fn end_json_with_newline(response: Response) -> Response {
    let buffered = response.body().size_hint().exact();
    if !is_json(response.headers()) || buffered.is_none_or(|len| len == 0) {
        return response;
    }
    let (mut parts, body) = response.into_parts();
    let bytes = match axum::body::to_bytes(body, usize::MAX).await {
        Ok(bytes) => bytes,
        Err(e) => return ApiError::Internal(anyhow::Error::new(e)).into_response(),
    };
    if bytes.ends_with(b"\n") {
        return Response::from_parts(parts, Body::from(bytes));
    }
    let mut text = Vec::from(bytes);
    text.push(b'\n');
    parts
        .headers
        .insert(header::CONTENT_LENGTH, HeaderValue::from(text.len()));
    Response::from_parts(parts, Body::from(text))
}

fn is_json(headers: &HeaderMap) -> bool {
    let Some(content_type) = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
    else {
        return false;
    };
    let essence = content_type.split(';').next().unwrap_or("").trim();
    essence.eq_ignore_ascii_case("application/json")
        || essence.eq_ignore_ascii_case("application/problem+json")
}

/// Probes address a server by its own address, whatever names it has, and
/// what they read is no secret: they answer to any `Host`.
const ANY_HOST_PATHS: &[&str] = &["/healthz", "/readyz"];

/// Refuses (421) a request whose `Host` is not in `IDEM_ALLOWED_HOSTS`,
/// when that list is set: a page that rebinds its own name to idem's
/// address sends its name as `Host`, and gets nothing.
pub async fn check_host(State(state): State<AppState>, request: Request, next: Next) -> Response {
    let allowed = &state.settings.allowed_hosts;
    if allowed.is_empty() || ANY_HOST_PATHS.contains(&request.uri().path()) {
        return next.run(request).await;
    }
    // An absolute URI's authority (and HTTP/2's) is the host asked for;
    // otherwise the Host header.
    let host = match request.uri().authority() {
        Some(authority) => Some(authority.as_str()),
        None => request
            .headers()
            .get(header::HOST)
            .and_then(|v| v.to_str().ok()),
    };
    match host {
        Some(host) if host_allowed(allowed, host) => next.run(request).await,
        Some(host) => {
            let shown: String = host.chars().take(100).collect();
            ApiError::HostNotAllowed(format!("this server does not answer for host {shown:?}"))
                .into_response()
        }
        None => ApiError::HostNotAllowed("the request names no host".into()).into_response(),
    }
}

/// Whether `host` (a Host value, `name[:port]`) is allowed: an entry with
/// a port allows that host and port, one without any port of the host.
fn host_allowed(allowed: &[String], host: &str) -> bool {
    let host = host.to_ascii_lowercase();
    let (name, _) = split_port(&host);
    allowed.iter().any(|entry| match split_port(entry) {
        (_, Some(_)) => *entry == host,
        (entry_name, None) => entry_name == name,
    })
}

/// `name:port` → (`name`, `Some(port)`); a bracketed IPv6 address keeps
/// its brackets (`[::1]:8080` → (`[::1]`, `Some("8080")`)).
fn split_port(host: &str) -> (&str, Option<&str>) {
    let after_name = match host.strip_prefix('[') {
        Some(rest) => rest.find(']').map_or(host.len(), |end| end + 2),
        None => host.find(':').unwrap_or(host.len()),
    };
    let (name, rest) = host.split_at(after_name.min(host.len()));
    match rest.strip_prefix(':') {
        Some(port) if !port.is_empty() && port.bytes().all(|b| b.is_ascii_digit()) => {
            (name, Some(port))
        }
        _ => (host, None),
    }
}

/// How long a browser may keep a preflight's answer.
const PREFLIGHT_MAX_AGE: Duration = Duration::from_secs(3600);

/// CORS for the origins of `IDEM_CORS_ORIGINS`, or none when it is empty:
/// the methods and request headers the API takes, and the answer headers
/// a page needs to read (validators, links, retries, replays, counts).
pub fn cors(origins: &[String]) -> Option<CorsLayer> {
    if origins.is_empty() {
        return None;
    }
    let origins = origins
        .iter()
        .filter_map(|origin| HeaderValue::from_str(origin).ok());
    let name = HeaderName::from_static;
    Some(
        CorsLayer::new()
            .allow_origin(AllowOrigin::list(origins))
            .allow_methods([
                Method::GET,
                Method::HEAD,
                Method::PUT,
                Method::POST,
                Method::DELETE,
            ])
            .allow_headers([
                header::AUTHORIZATION,
                header::CONTENT_TYPE,
                header::CONTENT_ENCODING,
                header::IF_MATCH,
                header::IF_NONE_MATCH,
                name(IDEMPOTENCY_KEY),
                name(REQUEST_ID),
            ])
            .expose_headers([
                header::ETAG,
                header::LOCATION,
                header::LINK,
                header::RETRY_AFTER,
                name(REPLAYED_HEADER),
                name(REQUEST_ID),
                name(ROW_COUNT_HEADER),
            ])
            .max_age(PREFLIGHT_MAX_AGE),
    )
}

/// A handler's panic, answered as any failure is: a 500 problem document,
/// its cause in the log.
pub fn panicked(payload: Box<dyn Any + Send + 'static>) -> Response {
    let message = payload
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_default();
    ApiError::Internal(anyhow::anyhow!("a handler panicked: {message}")).into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hosts(list: &[&str]) -> Vec<String> {
        list.iter().map(|h| h.to_string()).collect()
    }

    #[test]
    fn a_host_entry_without_port_allows_any_port_and_one_with_a_port_only_it() {
        let allowed = hosts(&["idem.example.com", "localhost:8080", "[::1]"]);
        for host in [
            "idem.example.com",
            "IDEM.example.com:443",
            "localhost:8080",
            "[::1]",
            "[::1]:9000",
        ] {
            assert!(host_allowed(&allowed, host), "{host}");
        }
        for host in [
            "evil.example.com",
            "localhost",
            "localhost:8081",
            "idem.example.com.evil.com",
            "[::2]:8080",
        ] {
            assert!(!host_allowed(&allowed, host), "{host}");
        }
    }

    #[test]
    fn a_port_is_split_from_names_and_bracketed_addresses() {
        assert_eq!(split_port("a.b:80"), ("a.b", Some("80")));
        assert_eq!(split_port("a.b"), ("a.b", None));
        assert_eq!(split_port("[::1]:80"), ("[::1]", Some("80")));
        assert_eq!(split_port("[::1]"), ("[::1]", None));
        assert_eq!(split_port("a.b:x"), ("a.b:x", None));
    }

    #[test]
    fn json_is_told_by_its_media_type() {
        let mut headers = HeaderMap::new();
        for (content_type, json) in [
            ("application/json", true),
            ("application/problem+json", true),
            ("Application/JSON; charset=utf-8", true),
            ("application/x-ndjson", false),
            ("text/csv", false),
        ] {
            headers.insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
            assert_eq!(is_json(&headers), json, "{content_type}");
        }
    }
}
