//! The HTTP surface: one module per resource, each with its own `router()`.

pub mod auth;
pub mod channels;
pub mod client_addr;
pub mod console;
pub mod duplicates;
pub mod edge;
pub mod error;
pub mod history_rows;
pub mod idempotency_keys;
pub mod loads;
pub mod many;
pub mod observe;
pub mod ops;
pub mod partitions;
pub mod preconditions;
pub mod receipts;
pub mod rejects;
pub mod rows;
pub mod staged_loads;
pub mod table_rows;
pub mod tables;
pub mod token_cache;
pub mod tokens;

pub use auth::Caller;

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::extract::FromRequestParts;
use axum::http::request::Parts;
use axum::http::{header, HeaderMap, HeaderValue};
use axum::response::{IntoResponse, Response};
use axum::{Json, Router};

use serde::de::DeserializeOwned;
use tracing::Instrument;

use crate::config::Settings;
use crate::http::error::{ApiError, ApiResult};
use crate::idempotency::{IdempotencyKey, KeyedRequest};
use crate::metrics::{Metrics, PoolGauges, RowCounts};
use crate::names::TableName;
use crate::period::{Grain, Period};
use crate::pipeline::{
    BodyHeaders, BodyLimits, BodySource, DigestMode, KeyedAnswer, MinRate, Pipeline, WriteError,
    WriteResult,
};
use crate::store::Store;
use observe::RequestSpan;
use token_cache::TokenCache;

/// What every handler can reach: shared behind one `Arc`, since axum
/// clones the state for each layer and handler a request passes (a clone
/// of each of its fields, and their drops, took a tenth of a replay's
/// CPU).
#[derive(Clone)]
pub struct AppState(Arc<Shared>);

impl std::ops::Deref for AppState {
    type Target = Shared;

    fn deref(&self) -> &Shared {
        &self.0
    }
}

/// What `AppState` shares.
pub struct Shared {
    pub store: Store,
    pub settings: Arc<Settings>,
    /// This server's own counters (see `crate::metrics`).
    pub metrics: Arc<Metrics>,
    /// The SHA-256 of the bootstrap admin token, if there is one.
    admin_digest: Option<[u8; 32]>,
    /// Valid tokens this process remembers (see `token_cache`).
    pub tokens: Arc<TokenCache>,
    /// The write path: its turns to write, its batches, the definitions
    /// it remembers.
    pipeline: Pipeline,
    /// Requests in flight per client behind a trusted proxy.
    client_requests: client_addr::PerClient,
}

impl AppState {
    pub fn new(store: Store, settings: Settings) -> AppState {
        let admin_digest = settings
            .admin_token
            .as_ref()
            .map(|token| crate::access::secret_digest(token.expose()));
        let client_requests = client_addr::PerClient::new(settings.max_connections_per_client);
        let settings = Arc::new(settings);
        let metrics = Arc::<Metrics>::default();
        let pipeline = Pipeline::new(store.clone(), settings.clone(), metrics.clone());
        AppState(Arc::new(Shared {
            store,
            metrics,
            admin_digest,
            client_requests,
            settings,
            tokens: Arc::default(),
            pipeline,
        }))
    }

    /// The write path, over the same store and settings.
    pub fn pipeline(&self) -> Pipeline {
        self.pipeline.clone()
    }

    /// The pool and the turns to write, as they are now.
    pub fn pool_gauges(&self) -> PoolGauges {
        let pool = self.store.pool_state();
        PoolGauges {
            open: pool.open.into(),
            idle: pool.idle,
            waiting: pool.waiting,
            max: pool.max.into(),
            load_slots_free: u64::try_from(self.pipeline.load_slots.available())
                .unwrap_or(u64::MAX),
        }
    }

    /// Counts what a write to `table` did (a replay wrote nothing and
    /// counts as a replay; a POST on a channel counts its commit or skip),
    /// and puts its load id on the request's log line.
    fn saw_answer(&self, span: &RequestSpan, table: &TableName, answer: &KeyedAnswer) {
        if let Some(load_id) = answer.body.get("load_id").and_then(|id| id.as_str()) {
            span.record("load_id", tracing::field::display(load_id));
        }
        let Some(counts) = answer.counts else {
            self.metrics.replay(table.as_str());
            return;
        };
        self.metrics.rows(table.as_str(), counts);
        if let Some(committed) = answer.body.get("committed").and_then(|c| c.as_bool()) {
            self.metrics.channel(table.as_str(), committed);
        }
    }

    /// Counts the rows a refused write to `table` read, and the bad ones.
    fn saw_refusal(&self, table: &TableName, error: &ApiError) {
        let ApiError::Write(error) = error else {
            return;
        };
        let counts = RowCounts {
            received: error.rows_received(),
            rejected: error.rejected(),
            ..RowCounts::default()
        };
        if counts.received > 0 || counts.rejected > 0 {
            self.metrics.rows(table.as_str(), counts);
        }
    }
}

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
        .merge(staged_loads::router())
        .merge(rejects::router())
        .merge(duplicates::router())
        .merge(tokens::router())
        .merge(ops::router())
        .fallback(|| async { ApiError::NotFound("no such resource; see GET /openapi.yaml".into()) })
        .method_not_allowed_fallback(|| async { ApiError::MethodNotAllowed })
}

/// `Query`, with a malformed query string answered in the API's own format.
pub struct ApiQuery<T>(pub T);

impl<T: DeserializeOwned, S: Send + Sync> FromRequestParts<S> for ApiQuery<T> {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        axum::extract::Query::<T>::from_request_parts(parts, state)
            .await
            .map(|axum::extract::Query(query)| ApiQuery(query))
            .map_err(|rejection| ApiError::InvalidRequest(rejection.body_text()))
    }
}

/// The most items a list answers at once, and how many when not asked.
pub const MAX_PAGE: i64 = 1000;
pub const DEFAULT_PAGE: i64 = 100;

/// The table's stored definition (404 `table_not_found` without one).
pub async fn table_def(state: &AppState, table: &TableName) -> ApiResult<crate::schema::TableDef> {
    state
        .store
        .table(table)
        .await?
        .ok_or_else(|| WriteError::TableNotFound(table.clone()).into())
}

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

/// `?bad_rows=`: a write's own bad-row policy, instead of its table's.
pub fn bad_rows_override(text: Option<&str>) -> ApiResult<Option<crate::schema::BadRowPolicy>> {
    text.map(crate::schema::BadRowPolicy::parse)
        .transpose()
        .map_err(|e| ApiError::InvalidRequest(e.to_string()))
}

/// `?mode=` on a PUT, which replaces rows whatever the mode: only
/// `versions` is taken, and only by a table that keeps versions (`def`, the
/// stored table if any), so that a caller who means a versions write learns
/// when the table is not one.
pub fn check_put_mode(mode: Option<&str>, def: Option<&crate::schema::TableDef>) -> ApiResult<()> {
    use crate::schema::MergeMode;
    let Some(name) = mode else {
        return Ok(());
    };
    let versions = def.is_some_and(crate::schema::TableDef::keeps_versions);
    match MergeMode::from_name(name) {
        Some(MergeMode::Versions) if versions => Ok(()),
        Some(MergeMode::Versions) => Err(ApiError::InvalidRequest(
            "mode=versions needs a table declared with \"write_mode\": \"versions\"".into(),
        )),
        _ => Err(ApiError::InvalidRequest(format!(
            "a PUT replaces rows and takes no mode {name:?}; its only mode is versions, for a table that keeps versions"
        ))),
    }
}

/// Path parameters, with a malformed one answered in the API's own format.
pub struct ApiPath<T>(pub T);

impl<T: DeserializeOwned + Send, S: Send + Sync> FromRequestParts<S> for ApiPath<T> {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        axum::extract::Path::<T>::from_request_parts(parts, state)
            .await
            .map(|axum::extract::Path(path)| ApiPath(path))
            .map_err(|rejection| ApiError::InvalidRequest(rejection.body_text()))
    }
}

/// A table named in the path (`/…/{table}`), validated before the handler
/// sees it.
pub struct TablePath(pub TableName);

impl<S: Send + Sync> FromRequestParts<S> for TablePath {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        let ApiPath(table) = ApiPath::<String>::from_request_parts(parts, state).await?;
        let table = TableName::parse(&table)?;
        RequestSpan::of(parts).record("table", tracing::field::display(&table));
        Ok(TablePath(table))
    }
}

/// A table and a partition value named in the path (`/…/{table}/{ds}`);
/// the value's form depends on the table's grain, so it is read with
/// `PartitionPath::period` once the table is known.
pub struct PartitionPath(pub TableName, pub String);

impl<S: Send + Sync> FromRequestParts<S> for PartitionPath {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        let ApiPath((table, ds)) =
            ApiPath::<(String, String)>::from_request_parts(parts, state).await?;
        let table = TableName::parse(&table)?;
        let span = RequestSpan::of(parts);
        span.record("table", tracing::field::display(&table));
        // As sent (it is read once the table's grain is known), and cut
        // short: a path may be long.
        span.record("ds", ds.chars().take(40).collect::<String>().as_str());
        Ok(PartitionPath(table, ds))
    }
}

/// A partition value of `grain`'s form: `2026-10-12T13` (hour),
/// `2026-10-12` (day), `2026-10` (month), years 0001 to 9999.
pub fn parse_period(text: &str, grain: Grain) -> ApiResult<Period> {
    Period::parse(text, grain).ok_or_else(|| {
        let shown: String = text.chars().take(40).collect();
        ApiError::InvalidDs(format!(
            "{shown:?} is not a partition of this table: its grain is {} ({}; years 0001 to 9999)",
            grain.as_str(),
            grain.form()
        ))
    })
}

/// A partition value of any grain's form (a filter over several tables).
pub fn parse_label(text: &str) -> ApiResult<Period> {
    Period::parse_any(text).ok_or_else(|| {
        let shown: String = text.chars().take(40).collect();
        ApiError::InvalidDs(format!(
            "{shown:?} is not a partition value (YYYY-MM-DD, YYYY-MM-DDTHH or YYYY-MM)"
        ))
    })
}

/// An id in a path or a cursor (`what`: "load id", "token id").
pub fn parse_id(text: &str, what: &str) -> ApiResult<uuid::Uuid> {
    uuid::Uuid::parse_str(text).map_err(|_| {
        let shown: String = text.chars().take(40).collect();
        ApiError::InvalidRequest(format!("{shown:?} is not a {what} (a UUID)"))
    })
}

pub const IDEMPOTENCY_KEY: &str = "idempotency-key";

/// The `Idempotency-Key` header: `None` when absent; 1 to 255 visible ASCII
/// characters when present (a quoted form, as the draft writes it, is unquoted).
pub fn idempotency_key(headers: &HeaderMap) -> ApiResult<Option<IdempotencyKey>> {
    let Some(value) = headers.get(IDEMPOTENCY_KEY) else {
        return Ok(None);
    };
    let text = value.to_str().map_err(|_| {
        ApiError::IdempotencyKeyInvalid("the Idempotency-Key is not visible ASCII".into())
    })?;
    IdempotencyKey::parse(text)
        .map(Some)
        .map_err(|e| ApiError::IdempotencyKeyInvalid(e.to_string()))
}

fn header_text<'h>(headers: &'h HeaderMap, name: &header::HeaderName) -> Option<&'h str> {
    headers.get(name).and_then(|v| v.to_str().ok())
}

/// What an Idempotency-Key's fingerprint is made of, from the request.
pub fn keyed_request(
    caller: Caller,
    key: IdempotencyKey,
    method: &'static str,
    uri: &axum::http::Uri,
    headers: &HeaderMap,
) -> KeyedRequest {
    KeyedRequest {
        principal: caller.principal,
        key,
        method,
        path_and_query: uri
            .path_and_query()
            .map(|p| p.to_string())
            .unwrap_or_default(),
        content_type: header_text(headers, &header::CONTENT_TYPE)
            .unwrap_or("")
            .to_ascii_lowercase(),
    }
}

/// Runs a write on a task of its own, in the request's span: a client
/// hanging up cannot cancel it between two statements (a body cut short
/// fails it cleanly instead). The write's future (15 KB for a POST: every
/// path a write can take) is boxed first, so that wrapping and spawning
/// it move a pointer, not the future (copying it took 40% of the CPU of
/// a replay answered from memory).
pub async fn spawn_write<T: Send + 'static>(
    write: impl Future<Output = WriteResult<T>> + Send + 'static,
) -> ApiResult<T> {
    let joined = tokio::spawn(Box::pin(write).in_current_span()).await;
    Ok(joined.map_err(WriteError::from)??)
}

/// What a write's body is: a whole partition or a batch of rows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BodyKind {
    Partition,
    Rows,
}

/// The bounds a body of `kind` is read within.
pub fn body_limits(settings: &Settings, kind: BodyKind) -> BodyLimits {
    BodyLimits {
        max_bytes: match kind {
            BodyKind::Partition => settings.max_put_body_bytes,
            BodyKind::Rows => settings.max_post_body_bytes,
        },
        max_gzip_ratio: settings.max_gzip_ratio,
        idle_timeout: Duration::from_secs(settings.body_idle_timeout_secs),
        deadline: Duration::from_secs(settings.body_deadline_secs),
        min_rate: (settings.body_min_rate_bytes > 0).then(|| MinRate {
            bytes_per_sec: settings.body_min_rate_bytes,
            grace: Duration::from_secs(settings.body_min_rate_grace_secs),
        }),
    }
}

/// The body of a write, as its headers describe it.
pub fn body_source(
    headers: &HeaderMap,
    body: Body,
    limits: BodyLimits,
    digest: DigestMode,
) -> ApiResult<BodySource> {
    let described = BodyHeaders {
        content_type: header_text(headers, &header::CONTENT_TYPE),
        content_encoding: header_text(headers, &header::CONTENT_ENCODING),
        content_length: header_text(headers, &header::CONTENT_LENGTH).and_then(|v| v.parse().ok()),
    };
    Ok(BodySource::open(
        described,
        body.into_data_stream(),
        limits,
        digest,
    )?)
}

/// An entity tag from a content hash.
pub fn etag(content_sha256: &str) -> HeaderValue {
    HeaderValue::from_str(&format!("\"{content_sha256}\"")).expect("hex is a valid header value")
}

pub const REPLAYED_HEADER: &str = "idempotent-replayed";

/// A keyed write's answer: the receipt, `Idempotent-Replayed`, and for a
/// PUT the partition's `ETag`; counted, and its load id logged.
pub fn keyed_response(
    state: &AppState,
    span: &RequestSpan,
    table: &TableName,
    answer: KeyedAnswer,
) -> Response {
    state.saw_answer(span, table, &answer);
    let status =
        axum::http::StatusCode::from_u16(answer.status).unwrap_or(axum::http::StatusCode::OK);
    let mut body = answer.body;
    if answer.replayed {
        body["replayed"] = serde_json::Value::Bool(true);
    }
    let mut response = (status, Json(body)).into_response();
    let headers = response.headers_mut();
    headers.insert(
        REPLAYED_HEADER,
        HeaderValue::from_static(if answer.replayed { "true" } else { "false" }),
    );
    if let Some(tag) = answer.etag {
        headers.insert(header::ETAG, etag(&tag));
    }
    response
}
