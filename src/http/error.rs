//! The HTTP surface's one error type, rendered as `application/problem+json`
//! (RFC 9457). Every layer's error maps to it here and only here: the layer
//! names the code, this module picks the status.

use std::time::Duration;

use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};

use crate::channel::ChannelError;
use crate::ingest::BadRow;
use crate::names::NameError;
use crate::pipeline::{BodyError, WriteError};
use crate::problem::ProblemCode;
use crate::schema::{AuditReport, SchemaError};
use crate::store::StoreError;
use crate::wire::problem::Problem;

/// Everything a request can fail with. Each has a stable `code` that
/// clients may match on; the `detail` is for people.
#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    #[error("{0}")]
    InvalidRequest(String),
    #[error("{0}")]
    InvalidDs(String),
    /// A declaration that is not even JSON of the right shape.
    #[error("{0}")]
    InvalidDeclaration(String),
    #[error("the declaration is larger than the limit of {limit} bytes")]
    DeclarationTooLarge { limit: usize },
    #[error("{0}")]
    NotFound(String),
    /// A destructive request without its `confirm` parameter naming what
    /// it destroys.
    #[error("{0}")]
    ConfirmRequired(String),
    #[error("this resource does not take that method; see GET /openapi.yaml")]
    MethodNotAllowed,
    #[error("this request needs an Idempotency-Key header (1 to 255 visible ASCII characters)")]
    IdempotencyKeyMissing,
    #[error("{0}")]
    IdempotencyKeyInvalid(String),
    /// No bearer token, or one that is not (or no longer) valid.
    #[error("{detail}")]
    Unauthorized {
        detail: &'static str,
        /// A token was sent (and is unknown, revoked or expired).
        token_sent: bool,
    },
    /// A valid token that does not grant this.
    #[error("{0}")]
    Forbidden(String),
    #[error("{0}")]
    InvalidTokenRequest(String),
    /// A partition of a table that has none (`"partition_by": null`).
    #[error("table {0:?} has no partitions; use /tables/{0}/rows")]
    NotPartitioned(crate::names::TableName),
    /// A history read of a table that keeps none.
    #[error("table {0:?} keeps no history; declare it with \"history\": \"scd2\"")]
    NoHistory(crate::names::TableName),
    /// The `Host` is not one of `IDEM_ALLOWED_HOSTS`.
    #[error("{0}")]
    HostNotAllowed(String),
    /// An `Authorization` header sent more than once: which one counts
    /// would be a guess.
    #[error("{0}")]
    InvalidAuthorization(&'static str),
    /// A channel the caller never committed an offset on.
    #[error("{0}")]
    ChannelNotFound(String),
    #[error(transparent)]
    Channel(#[from] ChannelError),
    #[error(transparent)]
    Name(#[from] NameError),
    #[error(transparent)]
    Schema(#[from] SchemaError),
    #[error(transparent)]
    Body(#[from] BodyError),
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error(transparent)]
    Write(#[from] WriteError),
    #[error("internal error")]
    Internal(#[from] anyhow::Error),
    /// A client behind a trusted proxy already has
    /// `IDEM_MAX_CONNECTIONS_PER_CLIENT` requests in flight.
    #[error("this client has too many requests in flight; wait for one to end or retry later")]
    TooManyRequestsFromClient,
    /// A token that holds its most `GET /loads/events` streams open here.
    #[error("this token has {0} event streams open on this server, the most it may; close one or retry later")]
    TooManyStreams(usize),
    /// Staged rows failed an audit: the problem carries the report.
    #[error("the staged rows failed {} audit(s); nothing was published", failed_audits(.0))]
    AuditFailed(Box<AuditReport>),
}

fn failed_audits(report: &AuditReport) -> usize {
    report.audits.iter().filter(|a| !a.passed).count()
}

/// A database that is away usually takes seconds to come back (a restart,
/// a failover); a busy one frees a connection within a request or two.
const RETRY_UNAVAILABLE: Duration = Duration::from_secs(5);
const RETRY_BUSY: Duration = Duration::from_secs(1);
/// A full spool frees as the writes that fill it end (their files go when
/// closed), or when an operator makes room.
const RETRY_SPOOL_FULL: Duration = Duration::from_secs(5);

impl ApiError {
    /// The stable, machine-readable code.
    pub fn code(&self) -> ProblemCode {
        use ApiError::*;
        match self {
            InvalidRequest(_) => ProblemCode::InvalidRequest,
            InvalidDs(_) => ProblemCode::InvalidDs,
            InvalidDeclaration(_) => ProblemCode::InvalidDeclaration,
            DeclarationTooLarge { .. } => ProblemCode::PayloadTooLarge,
            NotFound(_) => ProblemCode::NotFound,
            ConfirmRequired(_) => ProblemCode::ConfirmRequired,
            MethodNotAllowed => ProblemCode::MethodNotAllowed,
            IdempotencyKeyMissing => ProblemCode::IdempotencyKeyMissing,
            IdempotencyKeyInvalid(_) => ProblemCode::IdempotencyKeyInvalid,
            Unauthorized { .. } => ProblemCode::Unauthorized,
            Forbidden(_) => ProblemCode::Forbidden,
            InvalidTokenRequest(_) => ProblemCode::InvalidTokenRequest,
            NotPartitioned(_) => ProblemCode::NotPartitioned,
            NoHistory(_) => ProblemCode::NoHistory,
            HostNotAllowed(_) => ProblemCode::HostNotAllowed,
            InvalidAuthorization(_) => ProblemCode::InvalidAuthorization,
            ChannelNotFound(_) => ProblemCode::ChannelNotFound,
            Channel(e) => e.code(),
            Name(_) => ProblemCode::InvalidName,
            Schema(e) => e.code(),
            Body(e) => e.code(),
            Store(e) => e.code(),
            Write(e) => e.code(),
            Internal(_) => ProblemCode::Internal,
            AuditFailed(_) => ProblemCode::AuditFailed,
            TooManyRequestsFromClient | TooManyStreams(_) => ProblemCode::TooManyConnections,
        }
    }

    /// The status and title that go with a code. No arm is a default, so a
    /// new code does not compile until it is given its own.
    fn status_and_title(code: ProblemCode) -> (StatusCode, &'static str) {
        match code {
            ProblemCode::InvalidRequest => (StatusCode::BAD_REQUEST, "Invalid request"),
            ProblemCode::InvalidDs => (StatusCode::BAD_REQUEST, "Invalid partition date"),
            ProblemCode::InvalidRange => (StatusCode::BAD_REQUEST, "Invalid range of partitions"),
            ProblemCode::InvalidName => (StatusCode::BAD_REQUEST, "Invalid name"),
            ProblemCode::InvalidDeclaration => {
                (StatusCode::BAD_REQUEST, "Invalid table declaration")
            }
            ProblemCode::TableTooWide => (StatusCode::BAD_REQUEST, "Table too wide"),
            ProblemCode::InvalidDistribution => {
                (StatusCode::UNPROCESSABLE_ENTITY, "Invalid distribution")
            }
            ProblemCode::BodyUnreadable => (StatusCode::BAD_REQUEST, "Body unreadable"),
            ProblemCode::IdempotencyKeyMissing => {
                (StatusCode::BAD_REQUEST, "Idempotency-Key missing")
            }
            ProblemCode::IdempotencyKeyInvalid => {
                (StatusCode::BAD_REQUEST, "Idempotency-Key invalid")
            }
            ProblemCode::InvalidTokenRequest => (StatusCode::BAD_REQUEST, "Invalid token request"),
            ProblemCode::ConfirmRequired => (StatusCode::BAD_REQUEST, "Confirmation required"),
            ProblemCode::InvalidAuthorization => (StatusCode::BAD_REQUEST, "Invalid Authorization"),
            ProblemCode::Unauthorized => (StatusCode::UNAUTHORIZED, "Unauthorized"),
            ProblemCode::Forbidden => (StatusCode::FORBIDDEN, "Forbidden"),
            ProblemCode::TableNotFound => (StatusCode::NOT_FOUND, "Table not found"),
            ProblemCode::NotFound => (StatusCode::NOT_FOUND, "Not found"),
            ProblemCode::MethodNotAllowed => (StatusCode::METHOD_NOT_ALLOWED, "Method not allowed"),
            // Not 400: the request is well formed, only addressed to a
            // name this server does not answer for (RFC 9110, 15.5.20).
            ProblemCode::HostNotAllowed => (StatusCode::MISDIRECTED_REQUEST, "Host not allowed"),
            ProblemCode::SchemaConflict => (StatusCode::CONFLICT, "Schema conflict"),
            ProblemCode::CitusNotInstalled => (StatusCode::CONFLICT, "Citus not installed"),
            ProblemCode::CitusUnsupported => (StatusCode::CONFLICT, "Not supported by Citus"),
            ProblemCode::LoadNotOpen => (StatusCode::CONFLICT, "Load not open"),
            ProblemCode::LoadPublished => (StatusCode::CONFLICT, "Load published"),
            ProblemCode::ChannelNotFound => (StatusCode::NOT_FOUND, "Channel not found"),
            ProblemCode::ChannelKind => (StatusCode::CONFLICT, "Channel offset kind"),
            ProblemCode::NotPartitioned => (StatusCode::CONFLICT, "Table not partitioned"),
            ProblemCode::NoHistory => (StatusCode::CONFLICT, "Table keeps no history"),
            ProblemCode::AuditFailed => (StatusCode::UNPROCESSABLE_ENTITY, "Audit failed"),
            ProblemCode::PartitionExpired => {
                (StatusCode::UNPROCESSABLE_ENTITY, "Partition past retention")
            }
            ProblemCode::IdempotencyKeyInFlight => (StatusCode::CONFLICT, "Request in flight"),
            ProblemCode::PreconditionFailed => {
                (StatusCode::PRECONDITION_FAILED, "Precondition failed")
            }
            ProblemCode::PayloadTooLarge => (StatusCode::PAYLOAD_TOO_LARGE, "Payload too large"),
            ProblemCode::BodyTimeout => (StatusCode::REQUEST_TIMEOUT, "Body timed out"),
            ProblemCode::BodyTooSlow => (StatusCode::REQUEST_TIMEOUT, "Body too slow"),
            ProblemCode::RecordTooLarge => (StatusCode::PAYLOAD_TOO_LARGE, "Record too large"),
            ProblemCode::UnsupportedMediaType => {
                (StatusCode::UNSUPPORTED_MEDIA_TYPE, "Unsupported media type")
            }
            ProblemCode::UnsupportedContentEncoding => (
                StatusCode::UNSUPPORTED_MEDIA_TYPE,
                "Unsupported content encoding",
            ),
            ProblemCode::MalformedBody => (StatusCode::UNPROCESSABLE_ENTITY, "Malformed body"),
            ProblemCode::BadRows => (StatusCode::UNPROCESSABLE_ENTITY, "Bad rows"),
            ProblemCode::IdempotencyKeyReused => {
                (StatusCode::UNPROCESSABLE_ENTITY, "Idempotency-Key reused")
            }
            ProblemCode::DatabaseUnavailable => {
                (StatusCode::SERVICE_UNAVAILABLE, "Database unavailable")
            }
            ProblemCode::Busy => (StatusCode::SERVICE_UNAVAILABLE, "Busy"),
            ProblemCode::SpoolFull => (StatusCode::SERVICE_UNAVAILABLE, "Spool full"),
            ProblemCode::LimitExceeded => (StatusCode::UNPROCESSABLE_ENTITY, "Limit exceeded"),
            ProblemCode::TooManyConnections => {
                (StatusCode::TOO_MANY_REQUESTS, "Too many connections")
            }
            ProblemCode::Internal => (StatusCode::INTERNAL_SERVER_ERROR, "Internal server error"),
        }
    }

    pub fn status(&self) -> StatusCode {
        Self::status_and_title(self.code()).0
    }

    /// The row errors a refusal lists, and how many rows were refused.
    fn row_errors(&self) -> Option<(&[BadRow], Option<u64>)> {
        match self {
            ApiError::Write(WriteError::BadRows { count, errors, .. }) => {
                Some((errors, Some(*count)))
            }
            ApiError::Write(WriteError::Malformed { error, .. }) => {
                Some((std::slice::from_ref(&**error), None))
            }
            ApiError::Write(WriteError::Store(StoreError::RepeatedKeys { keys, listed })) => {
                Some((listed, Some(*keys)))
            }
            ApiError::Write(WriteError::Store(StoreError::ConflictingVersions {
                versions,
                listed,
            })) => Some((listed, Some(*versions))),
            _ => None,
        }
    }

    /// The audit report a refused publish carries.
    fn report(&self) -> Option<&AuditReport> {
        match self {
            ApiError::AuditFailed(report) => Some(report),
            ApiError::Write(WriteError::AuditFailed(report)) => Some(report),
            _ => None,
        }
    }

    /// How long a client should wait before it retries, when it should.
    fn retry_after(&self) -> Option<Duration> {
        let store = match self {
            ApiError::Store(e) | ApiError::Write(WriteError::Store(e)) => e,
            ApiError::Write(WriteError::Busy | WriteError::ShareTaken) => return Some(RETRY_BUSY),
            ApiError::Write(WriteError::SpoolFull(_)) => return Some(RETRY_SPOOL_FULL),
            ApiError::TooManyRequestsFromClient => return Some(RETRY_BUSY),
            ApiError::TooManyStreams(_) => return Some(RETRY_UNAVAILABLE),
            _ => return None,
        };
        match store {
            StoreError::KeyInFlight { retry_after } => Some(*retry_after),
            StoreError::Unavailable(_) => Some(RETRY_UNAVAILABLE),
            StoreError::Busy(_) => Some(RETRY_BUSY),
            _ => None,
        }
    }

    /// What the client reads: the error's own text, except for failures,
    /// whose causes (database text among them) stay in the log.
    pub fn detail(&self) -> String {
        if let ApiError::Write(share @ WriteError::ShareTaken) = self {
            // Not the pool's fault: the client is told it is its own writes.
            return share.to_string();
        }
        match self.status() {
            s if s.is_server_error() => match self.code() {
                ProblemCode::DatabaseUnavailable => {
                    "the database is unavailable; retry later".into()
                }
                ProblemCode::Busy => "every database connection is in use; retry later".into(),
                ProblemCode::SpoolFull => {
                    "the server has no room to spool this write; retry later".into()
                }
                _ => "internal error".into(),
            },
            _ => self.to_string(),
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let code = self.code();
        let (status, title) = Self::status_and_title(code);
        // A 503 is the database away or every turn taken: expected while
        // it lasts, and the client retries; ERROR is for what an operator
        // must look at.
        if status == StatusCode::SERVICE_UNAVAILABLE {
            tracing::warn!(error = ?self, "request failed");
        } else if status.is_server_error() {
            tracing::error!(error = ?self, "request failed");
        }
        let row_errors = self.row_errors();
        let problem = Problem {
            errors: row_errors.map(|(errors, _)| errors.to_vec()),
            rejected: row_errors.and_then(|(_, count)| count),
            report: self.report().cloned(),
            ..Problem::new(code, title, status.as_u16(), self.detail())
        };
        let body = serde_json::to_vec(&problem).unwrap_or_default();
        let mut response = (status, body).into_response();
        response.headers_mut().insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/problem+json"),
        );
        if let ApiError::Unauthorized { token_sent, .. } = self {
            let challenge = if token_sent {
                r#"Bearer realm="idem", error="invalid_token""#
            } else {
                r#"Bearer realm="idem""#
            };
            response.headers_mut().insert(
                header::WWW_AUTHENTICATE,
                HeaderValue::from_static(challenge),
            );
        }
        // For the metrics, which count problem answers by code.
        response.extensions_mut().insert(code);
        if let Some(wait) = self.retry_after() {
            response.headers_mut().insert(
                header::RETRY_AFTER,
                HeaderValue::from(wait.as_secs().max(1)),
            );
        }
        response
    }
}

pub type ApiResult<T> = Result<T, ApiError>;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::names::TableName;
    use crate::versions::Unmet;

    fn orders() -> TableName {
        TableName::parse("orders").unwrap()
    }

    #[test]
    fn every_layer_error_that_is_the_callers_fault_answers_4xx() {
        let refusals: Vec<(ApiError, u16)> = vec![
            (TableName::parse("Bad").unwrap_err().into(), 400),
            (SchemaError::Invalid("x".into()).into(), 400),
            (SchemaError::Conflict("x".into()).into(), 409),
            (BodyError::UnsupportedMediaType("x".into()).into(), 415),
            (BodyError::UnsupportedEncoding("x".into()).into(), 415),
            (BodyError::TooLarge { limit: 1 }.into(), 413),
            (BodyError::Unreadable("x".into()).into(), 400),
            (WriteError::TableNotFound(orders()).into(), 404),
            (WriteError::Mode("x".into()).into(), 400),
            (WriteError::KeyReused.into(), 422),
            (
                WriteError::BadRows {
                    count: 1,
                    rows_received: 1,
                    errors: vec![],
                }
                .into(),
                422,
            ),
            (StoreError::TableChanged(orders()).into(), 409),
            (ApiError::ChannelNotFound("x".into()), 404),
            (ChannelError::Invalid("x".into()).into(), 400),
            (
                WriteError::Channel(ChannelError::KindMismatch {
                    name: "c".into(),
                    stored: crate::channel::OffsetKind::Lsn,
                    asked: crate::channel::OffsetKind::Integer,
                })
                .into(),
                409,
            ),
            (ApiError::HostNotAllowed("x".into()), 421),
            (ApiError::ConfirmRequired("x".into()), 400),
            (
                ApiError::AuditFailed(Box::new(AuditReport {
                    passed: false,
                    audits: vec![],
                })),
                422,
            ),
            (StoreError::PreconditionFailed(Unmet::Exists).into(), 412),
            (
                WriteError::Store(StoreError::KeyInFlight {
                    retry_after: Duration::from_secs(3),
                })
                .into(),
                409,
            ),
            (
                StoreError::Unavailable(sqlx::Error::PoolTimedOut).into(),
                503,
            ),
        ];
        for (error, status) in refusals {
            assert_eq!(error.status().as_u16(), status, "{error:?}");
        }
    }

    #[tokio::test]
    async fn a_failed_audit_is_a_422_that_carries_its_report() {
        let report = AuditReport {
            passed: false,
            audits: vec![crate::schema::AuditResult {
                audit: "min_rows".into(),
                partition: Some("2026-10-12".into()),
                columns: None,
                passed: false,
                expected: serde_json::json!(1000),
                found: serde_json::json!(12),
                examples: vec![],
            }],
        };
        let response = ApiError::AuditFailed(Box::new(report.clone())).into_response();
        assert_eq!(response.status(), StatusCode::UNPROCESSABLE_ENTITY);
        let body = axum::body::to_bytes(response.into_body(), 1 << 20)
            .await
            .unwrap();
        let problem: serde_json::Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(problem["code"], "audit_failed");
        assert_eq!(problem["report"], serde_json::to_value(&report).unwrap());
        assert!(problem["detail"].as_str().unwrap().contains("1 audit"));
    }

    #[test]
    fn a_full_spool_is_a_503_that_says_when_to_retry() {
        let full = std::io::Error::from(std::io::ErrorKind::StorageFull);
        let full = ApiError::from(WriteError::SpoolFull(full));
        assert_eq!(full.status(), StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(full.code(), ProblemCode::SpoolFull);
        let response = full.into_response();
        assert_eq!(response.headers()[header::RETRY_AFTER], "5");
    }

    #[test]
    fn a_token_over_its_share_is_told_so_in_a_busy_503_that_says_when_to_retry() {
        let over = ApiError::from(WriteError::ShareTaken);
        assert_eq!(over.status(), StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(over.code(), ProblemCode::Busy);
        assert!(
            over.detail().contains("this token's writes"),
            "{}",
            over.detail()
        );
        let response = over.into_response();
        assert_eq!(response.headers()[header::RETRY_AFTER], "1");
    }

    #[test]
    fn a_failure_hides_its_cause_and_a_wait_says_how_long() {
        let failure = ApiError::from(StoreError::Database(sqlx::Error::RowNotFound));
        assert_eq!(failure.status(), StatusCode::INTERNAL_SERVER_ERROR);
        assert_eq!(failure.detail(), "internal error");
        let in_flight = ApiError::from(WriteError::Store(StoreError::KeyInFlight {
            retry_after: Duration::from_secs(3),
        }));
        let response = in_flight.into_response();
        assert_eq!(response.headers()[header::RETRY_AFTER], "3");
    }
}
