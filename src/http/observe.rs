//! What every request leaves behind: its id (`X-Request-Id`, taken from the
//! client when sane, made otherwise, echoed on the answer), its span (the
//! fields of its log line, recorded by the extractors and handlers that
//! learn them, and the client's address), the one line logged when it is
//! answered, and its metrics.
//!
//! Applied with `Router::layer`, so it runs after routing and knows the
//! route as declared (`/partitions/{table}/{ds}`), never the raw path.

use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use axum::body::{Body, Bytes, HttpBody};
use axum::extract::{FromRequestParts, MatchedPath, Request, State};
use axum::http::request::Parts;
use axum::http::{HeaderMap, HeaderValue};
use axum::middleware::Next;
use axum::response::Response;
use hyper::body::{Frame, SizeHint};
use prometheus::IntCounter;
use tracing::field::Empty;
use tracing::{Instrument, Span};

use super::client_addr::ClientAddr;
use super::state::AppState;
use crate::problem::ProblemCode;

pub const REQUEST_ID: &str = "x-request-id";

/// The longest request id taken from a client; a longer one is replaced.
const MAX_REQUEST_ID_BYTES: usize = 200;

/// The route label of a request no route matched: its raw path would let
/// any client mint label values without end.
const UNMATCHED: &str = "unmatched";

/// The span of the request being handled, kept in its extensions: the
/// extractors and handlers record on it what they learn (`table`, `ds`,
/// `load_id`, `token`), and its fields go on the request's log line.
#[derive(Clone)]
pub struct RequestSpan(Span);

impl RequestSpan {
    /// The request's span; a span that records nothing when the request
    /// did not come through `observe` (a router used without it).
    pub fn of(parts: &Parts) -> RequestSpan {
        parts
            .extensions
            .get::<RequestSpan>()
            .cloned()
            .unwrap_or(RequestSpan(Span::none()))
    }

    /// Records `value` as the request's `field` (one the span declares).
    pub fn record(&self, field: &'static str, value: impl tracing::Value) {
        self.0.record(field, value);
    }
}

impl<S: Send + Sync> FromRequestParts<S> for RequestSpan {
    type Rejection = std::convert::Infallible;

    async fn from_request_parts(parts: &mut Parts, _state: &S) -> Result<Self, Self::Rejection> {
        Ok(RequestSpan::of(parts))
    }
}

/// The middleware: opens the request's span, counts its body's bytes,
/// and once the answer's head is ready logs one line and counts it.
pub async fn observe(State(state): State<AppState>, mut request: Request, next: Next) -> Response {
    let started = Instant::now();
    let id = request_id(request.headers());
    let method = request.method().clone();
    let route = request
        .extensions()
        .get::<MatchedPath>()
        .map_or(UNMATCHED, MatchedPath::as_str)
        .to_string();
    // The client as `client_addr` tells it: behind a trusted proxy, the
    // address the proxy forwarded.
    let client = request
        .extensions()
        .get::<ClientAddr>()
        .map(|client| tracing::field::display(client.ip));
    let span = tracing::info_span!(
        "request",
        request_id = %id.to_str().unwrap_or_default(),
        client,
        method = %method,
        route = %route,
        table = Empty,
        ds = Empty,
        load_id = Empty,
        token = Empty,
    );
    request.extensions_mut().insert(RequestSpan(span.clone()));
    // A request without a body (most reads) adds no series.
    let request = if request.body().is_end_stream() {
        request
    } else {
        let bytes = state.metrics.body_bytes(&route);
        request.map(|inner| Body::new(Counted { inner, bytes }))
    };
    let mut response = next.run(request).instrument(span.clone()).await;
    let elapsed = started.elapsed();
    let status = response.status().as_u16();
    state
        .metrics
        .request(method.as_str(), &route, status, elapsed);
    if let Some(code) = response.extensions().get::<ProblemCode>() {
        state.metrics.problem(status, code.as_str());
    }
    span.in_scope(|| {
        tracing::info!(target: "idem::access", status, duration_ms = millis(elapsed), "answered");
    });
    response.headers_mut().insert(REQUEST_ID, id);
    response
}

/// The client's `X-Request-Id` when it is 1 to 200 visible ASCII
/// characters (it goes into logs as it is); a new UUIDv7 otherwise.
fn request_id(headers: &HeaderMap) -> HeaderValue {
    headers
        .get(REQUEST_ID)
        .filter(|v| {
            let bytes = v.as_bytes();
            !bytes.is_empty()
                && bytes.len() <= MAX_REQUEST_ID_BYTES
                && bytes.iter().all(u8::is_ascii_graphic)
        })
        .cloned()
        .unwrap_or_else(|| {
            HeaderValue::from_str(&uuid::Uuid::now_v7().to_string()).expect("a UUID is ASCII")
        })
}

/// Milliseconds, to the microsecond.
fn millis(elapsed: Duration) -> f64 {
    (elapsed.as_secs_f64() * 1e6).round() / 1e3
}

/// A request body that adds the bytes it yields to a counter.
struct Counted {
    inner: Body,
    bytes: IntCounter,
}

impl HttpBody for Counted {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        let polled = Pin::new(&mut self.inner).poll_frame(cx);
        if let Poll::Ready(Some(Ok(frame))) = &polled {
            if let Some(data) = frame.data_ref() {
                self.bytes
                    .inc_by(u64::try_from(data.len()).unwrap_or(u64::MAX));
            }
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with_id(value: &[u8]) -> HeaderMap {
        let mut headers = HeaderMap::new();
        headers.insert(REQUEST_ID, HeaderValue::from_bytes(value).unwrap());
        headers
    }

    #[test]
    fn a_sane_request_id_is_kept_and_any_other_replaced() {
        assert_eq!(request_id(&with_id(b"job-42/try-3")), "job-42/try-3");
        let long = "x".repeat(MAX_REQUEST_ID_BYTES + 1);
        for insane in [b"has space".as_slice(), b"tab\there", long.as_bytes()] {
            let made = request_id(&with_id(insane));
            assert!(uuid::Uuid::parse_str(made.to_str().unwrap()).is_ok());
        }
        assert!(uuid::Uuid::parse_str(request_id(&HeaderMap::new()).to_str().unwrap()).is_ok());
    }
}
