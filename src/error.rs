//! The one error type of the HTTP surface, rendered as `application/problem+json` (RFC 9457).

use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use serde::Serialize;

use crate::ingest::RowError;

/// Everything a request can fail with. Each variant has a stable `code` that
/// clients may match on; the `detail` is for people.
#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    #[error("{0}")]
    InvalidName(String),
    #[error("{0}")]
    InvalidDs(String),
    #[error("{0}")]
    InvalidRequest(String),
    #[error("{0}")]
    InvalidDeclaration(String),
    #[error("unsupported content type {0:?}; send application/x-ndjson, application/jsonl, application/json or text/csv")]
    UnsupportedMediaType(String),
    #[error("unsupported content encoding {0:?}; send identity or gzip")]
    UnsupportedEncoding(String),
    #[error("the body is larger than the limit of {limit} bytes")]
    PayloadTooLarge { limit: u64 },
    #[error("the body could not be read: {0}")]
    BodyUnreadable(String),
    #[error("{0}")]
    MalformedBody(Box<RowError>),
    #[error("{count} row(s) were refused; nothing was written")]
    BadRows { count: u64, errors: Vec<RowError> },
    #[error("table {0:?} is not declared")]
    TableNotFound(String),
    #[error("{0}")]
    NotFound(String),
    #[error("this resource does not take that method; see GET /openapi.yaml")]
    MethodNotAllowed,
    #[error("{0}")]
    SchemaConflict(String),
    #[error("{0}")]
    PreconditionFailed(String),
    #[error("this request needs an Idempotency-Key header (1 to 255 visible ASCII characters)")]
    IdempotencyKeyMissing,
    #[error("{0}")]
    IdempotencyKeyInvalid(String),
    #[error("the Idempotency-Key was used for a different request (method, path, content type or body differ)")]
    IdempotencyKeyReused,
    #[error(
        "a request with this Idempotency-Key is still running; retry after {retry_after_secs} s"
    )]
    KeyInFlight { retry_after_secs: u64 },
    #[error("the database is unavailable")]
    DatabaseUnavailable(#[source] sqlx::Error),
    #[error("internal error")]
    Database(#[source] sqlx::Error),
    #[error("internal error")]
    Internal(#[from] anyhow::Error),
}

#[derive(Serialize)]
struct Problem<'a> {
    #[serde(rename = "type")]
    type_: String,
    title: &'static str,
    status: u16,
    detail: String,
    code: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    errors: Option<&'a [RowError]>,
    #[serde(skip_serializing_if = "Option::is_none")]
    rejected: Option<u64>,
}

impl ApiError {
    pub fn status(&self) -> StatusCode {
        use ApiError::*;
        match self {
            InvalidName(_) | InvalidDs(_) | InvalidRequest(_) | BodyUnreadable(_) => {
                StatusCode::BAD_REQUEST
            }
            InvalidDeclaration(_) => StatusCode::BAD_REQUEST,
            UnsupportedMediaType(_) | UnsupportedEncoding(_) => StatusCode::UNSUPPORTED_MEDIA_TYPE,
            PayloadTooLarge { .. } => StatusCode::PAYLOAD_TOO_LARGE,
            MalformedBody(_) | BadRows { .. } => StatusCode::UNPROCESSABLE_ENTITY,
            TableNotFound(_) | NotFound(_) => StatusCode::NOT_FOUND,
            MethodNotAllowed => StatusCode::METHOD_NOT_ALLOWED,
            SchemaConflict(_) => StatusCode::CONFLICT,
            PreconditionFailed(_) => StatusCode::PRECONDITION_FAILED,
            IdempotencyKeyMissing | IdempotencyKeyInvalid(_) => StatusCode::BAD_REQUEST,
            IdempotencyKeyReused => StatusCode::UNPROCESSABLE_ENTITY,
            KeyInFlight { .. } => StatusCode::CONFLICT,
            DatabaseUnavailable(_) => StatusCode::SERVICE_UNAVAILABLE,
            Database(_) | Internal(_) => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }

    /// The stable, machine-readable code.
    pub fn code(&self) -> &'static str {
        use ApiError::*;
        match self {
            InvalidName(_) => "invalid_name",
            InvalidDs(_) => "invalid_ds",
            InvalidRequest(_) => "invalid_request",
            InvalidDeclaration(_) => "invalid_declaration",
            UnsupportedMediaType(_) => "unsupported_media_type",
            UnsupportedEncoding(_) => "unsupported_content_encoding",
            PayloadTooLarge { .. } => "payload_too_large",
            BodyUnreadable(_) => "body_unreadable",
            MalformedBody(_) => "malformed_body",
            BadRows { .. } => "bad_rows",
            TableNotFound(_) => "table_not_found",
            NotFound(_) => "not_found",
            MethodNotAllowed => "method_not_allowed",
            SchemaConflict(_) => "schema_conflict",
            PreconditionFailed(_) => "precondition_failed",
            IdempotencyKeyMissing => "idempotency_key_missing",
            IdempotencyKeyInvalid(_) => "idempotency_key_invalid",
            IdempotencyKeyReused => "idempotency_key_reused",
            KeyInFlight { .. } => "idempotency_key_in_flight",
            DatabaseUnavailable(_) => "database_unavailable",
            Database(_) | Internal(_) => "internal",
        }
    }

    fn title(&self) -> &'static str {
        use ApiError::*;
        match self {
            InvalidName(_) => "Invalid name",
            InvalidDs(_) => "Invalid partition date",
            InvalidRequest(_) => "Invalid request",
            InvalidDeclaration(_) => "Invalid table declaration",
            UnsupportedMediaType(_) => "Unsupported media type",
            UnsupportedEncoding(_) => "Unsupported content encoding",
            PayloadTooLarge { .. } => "Payload too large",
            BodyUnreadable(_) => "Body unreadable",
            MalformedBody(_) => "Malformed body",
            BadRows { .. } => "Bad rows",
            TableNotFound(_) => "Table not found",
            NotFound(_) => "Not found",
            MethodNotAllowed => "Method not allowed",
            SchemaConflict(_) => "Schema conflict",
            PreconditionFailed(_) => "Precondition failed",
            IdempotencyKeyMissing => "Idempotency-Key missing",
            IdempotencyKeyInvalid(_) => "Idempotency-Key invalid",
            IdempotencyKeyReused => "Idempotency-Key reused",
            KeyInFlight { .. } => "Request in flight",
            DatabaseUnavailable(_) => "Database unavailable",
            Database(_) | Internal(_) => "Internal server error",
        }
    }

    /// Connection-level failures mean the database is away (503), anything
    /// else from sqlx is our bug (500).
    pub fn from_db(err: sqlx::Error) -> Self {
        match err {
            sqlx::Error::Io(_)
            | sqlx::Error::PoolTimedOut
            | sqlx::Error::PoolClosed
            | sqlx::Error::Tls(_) => ApiError::DatabaseUnavailable(err),
            other => ApiError::Database(other),
        }
    }
}

impl From<sqlx::Error> for ApiError {
    fn from(err: sqlx::Error) -> Self {
        ApiError::from_db(err)
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let status = self.status();
        if status.is_server_error() {
            // The cause goes to the log only; database text never reaches the client.
            tracing::error!(error = ?self, "request failed");
        }
        let (errors, rejected, detail) = match &self {
            ApiError::BadRows { count, errors } => {
                (Some(errors.as_slice()), Some(*count), self.to_string())
            }
            ApiError::MalformedBody(e) => (Some(std::slice::from_ref(&**e)), None, e.to_string()),
            _ => (None, None, self.to_string()),
        };
        let problem = Problem {
            type_: format!(
                "https://idem.dev/problems/{}",
                self.code().replace('_', "-")
            ),
            title: self.title(),
            status: status.as_u16(),
            detail,
            code: self.code(),
            errors,
            rejected,
        };
        let body = serde_json::to_vec(&problem).unwrap_or_default();
        let mut response = (status, body).into_response();
        response.headers_mut().insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/problem+json"),
        );
        if let ApiError::KeyInFlight { retry_after_secs } = self {
            response
                .headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from(retry_after_secs));
        }
        response
    }
}

pub type ApiResult<T> = Result<T, ApiError>;
