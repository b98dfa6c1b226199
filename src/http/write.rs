//! What the handlers of writes share: the table a write names, its
//! Idempotency-Key and the request it binds, its body and the bounds it is
//! read within, the task it runs on, and its answer (a keyed write's, with
//! `Idempotent-Replayed` and an `ETag`), counted.

use std::future::Future;
use std::time::Duration;

use axum::body::Body;
use axum::http::{header, HeaderMap, HeaderValue};
use axum::response::{IntoResponse, Response};
use axum::Json;
use tracing::Instrument;

use super::auth::Caller;
use super::error::{ApiError, ApiResult};
use super::observe::RequestSpan;
use super::state::AppState;
use crate::config::Settings;
use crate::idempotency::{IdempotencyKey, KeyedRequest};
use crate::metrics::RowCounts;
use crate::names::TableName;
use crate::pipeline::{
    AnswerBody, BodyHeaders, BodyLimits, BodySource, DigestMode, KeyedAnswer, MinRate, WriteError,
    WriteResult,
};

/// The table's stored definition (404 `table_not_found` without one).
pub async fn table_def(state: &AppState, table: &TableName) -> ApiResult<crate::schema::TableDef> {
    state
        .store
        .table(table)
        .await?
        .ok_or_else(|| WriteError::TableNotFound(table.clone()).into())
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
        principal: caller.actor.principal,
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
    let replayed = answer.replayed();
    let mut response = match answer.body {
        AnswerBody::Written(body) => (status, Json(body)).into_response(),
        // The stored answer's bytes, as they are (see `StoredAnswer`).
        AnswerBody::Replayed(stored) => {
            let json = [(
                header::CONTENT_TYPE,
                HeaderValue::from_static("application/json"),
            )];
            (status, json, stored.replay_bytes()).into_response()
        }
    };
    let headers = response.headers_mut();
    headers.insert(
        REPLAYED_HEADER,
        HeaderValue::from_static(if replayed { "true" } else { "false" }),
    );
    if let Some(tag) = answer.etag {
        headers.insert(header::ETAG, etag(&tag));
    }
    response
}

/// What a write did, counted.
impl AppState {
    /// Counts what a write to `table` did (a replay wrote nothing and
    /// counts as a replay; a POST on a channel counts its commit or skip),
    /// and puts its load id on the request's log line.
    pub(super) fn saw_answer(&self, span: &RequestSpan, table: &TableName, answer: &KeyedAnswer) {
        let body = answer.body.as_stored();
        if let Some(load_id) = body.get("load_id").and_then(|id| id.as_str()) {
            span.record("load_id", tracing::field::display(load_id));
        }
        let Some(counts) = answer.counts else {
            self.metrics.replay(table.as_str());
            return;
        };
        self.metrics.rows(table.as_str(), counts);
        if let Some(committed) = body.get("committed").and_then(|c| c.as_bool()) {
            self.metrics.channel(table.as_str(), committed);
        }
    }

    /// Counts the rows a refused write to `table` read, and the bad ones.
    pub(super) fn saw_refusal(&self, table: &TableName, error: &ApiError) {
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
