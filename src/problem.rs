//! The stable, machine-readable problem codes: what clients match on, what
//! the ledger records for a refused or failed load, and what the metrics
//! count. Each layer names its error's code here; the HTTP status that goes
//! with a code is the edge's business (`http::error`).

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// Declares `ProblemCode` with each code's string form, and `ALL`, from one
/// list, so no code can be missing from either.
macro_rules! problem_codes {
    ($($(#[$doc:meta])* $variant:ident => $text:literal,)+) => {
        /// Every code a problem answer can carry.
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
        pub enum ProblemCode {
            $($(#[$doc])* $variant,)+
        }

        impl ProblemCode {
            /// Every code, in the order declared.
            pub const ALL: &'static [ProblemCode] = &[$(ProblemCode::$variant,)+];

            /// The code as sent on the wire and stored in the ledger.
            pub const fn as_str(self) -> &'static str {
                match self {
                    $(ProblemCode::$variant => $text,)+
                }
            }
        }
    };
}

problem_codes! {
    InvalidName => "invalid_name",
    InvalidDs => "invalid_ds",
    /// The partitions a load names run backwards, or are too many or none.
    InvalidRange => "invalid_range",
    InvalidRequest => "invalid_request",
    InvalidDeclaration => "invalid_declaration",
    TableTooWide => "table_too_wide",
    /// A `"distribution"` this table cannot have (its column is not in the
    /// key, a reference table with partitions, …).
    InvalidDistribution => "invalid_distribution",
    BodyUnreadable => "body_unreadable",
    BodyTimeout => "body_timeout",
    BodyTooSlow => "body_too_slow",
    PayloadTooLarge => "payload_too_large",
    RecordTooLarge => "record_too_large",
    /// Sent by the listener itself, before a connection reaches the router.
    TooManyConnections => "too_many_connections",
    UnsupportedMediaType => "unsupported_media_type",
    UnsupportedContentEncoding => "unsupported_content_encoding",
    HostNotAllowed => "host_not_allowed",
    MalformedBody => "malformed_body",
    BadRows => "bad_rows",
    /// Staged rows failed an audit; nothing was published.
    AuditFailed => "audit_failed",
    LimitExceeded => "limit_exceeded",
    TableNotFound => "table_not_found",
    NotFound => "not_found",
    MethodNotAllowed => "method_not_allowed",
    SchemaConflict => "schema_conflict",
    /// A declaration asks for distribution on a database without Citus.
    CitusNotInstalled => "citus_not_installed",
    /// Something Citus cannot do on a distributed or reference table.
    CitusUnsupported => "citus_unsupported",
    /// A `/partitions` request for a table without partitions.
    NotPartitioned => "not_partitioned",
    /// A write to a partition whose period is past its table's retention.
    PartitionExpired => "partition_expired",
    /// A history read of a table declared without `"history"`.
    NoHistory => "no_history",
    PreconditionFailed => "precondition_failed",
    InvalidAuthorization => "invalid_authorization",
    Unauthorized => "unauthorized",
    Forbidden => "forbidden",
    InvalidTokenRequest => "invalid_token_request",
    ConfirmRequired => "confirm_required",
    IdempotencyKeyMissing => "idempotency_key_missing",
    IdempotencyKeyInvalid => "idempotency_key_invalid",
    IdempotencyKeyReused => "idempotency_key_reused",
    IdempotencyKeyInFlight => "idempotency_key_in_flight",
    /// A part or publish sent to a load that is published, abandoned or expired.
    LoadNotOpen => "load_not_open",
    /// A `DELETE` of a load that is already published.
    LoadPublished => "load_published",
    /// A channel that never committed an offset (or was reset).
    ChannelNotFound => "channel_not_found",
    /// An `offset_kind` other than the one the channel's first commit fixed.
    ChannelKind => "channel_kind",
    DatabaseUnavailable => "database_unavailable",
    Busy => "busy",
    SpoolFull => "spool_full",
    Internal => "internal",
}

impl std::fmt::Display for ProblemCode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// As its string, so problem documents and the ledger's JSON read as they
/// always have.
impl Serialize for ProblemCode {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.as_str())
    }
}

/// Read from its string; a code this build does not know is refused.
impl<'de> Deserialize<'de> for ProblemCode {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = String::deserialize(deserializer)?;
        ProblemCode::ALL
            .iter()
            .copied()
            .find(|code| code.as_str() == text)
            .ok_or_else(|| serde::de::Error::custom(format!("unknown problem code {text:?}")))
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use super::ProblemCode;

    /// The `enum:` list of `components.schemas.ProblemCode` in the spec.
    fn documented_codes() -> BTreeSet<&'static str> {
        let spec = include_str!("../openapi.yaml");
        let schema = spec
            .split_once("\n    ProblemCode:\n")
            .expect("openapi.yaml declares the ProblemCode schema")
            .1;
        let list = schema
            .split_once("\n      enum:\n")
            .expect("the ProblemCode schema has an enum")
            .1;
        list.lines()
            .map_while(|line| line.strip_prefix("        - "))
            .map(str::trim)
            .collect()
    }

    #[test]
    fn every_code_is_the_one_openapi_yaml_lists() {
        let ours: BTreeSet<&str> = ProblemCode::ALL.iter().map(|c| c.as_str()).collect();
        assert_eq!(ours.len(), ProblemCode::ALL.len(), "a code is spelt twice");
        assert_eq!(ours, documented_codes());
    }

    #[test]
    fn a_code_serializes_as_its_string() {
        let json = serde_json::json!({ "code": ProblemCode::IdempotencyKeyInFlight });
        assert_eq!(json.to_string(), r#"{"code":"idempotency_key_in_flight"}"#);
        for code in ProblemCode::ALL {
            let text = serde_json::to_value(code).unwrap();
            assert_eq!(serde_json::from_value::<ProblemCode>(text).unwrap(), *code);
        }
        assert!(serde_json::from_str::<ProblemCode>(r#""no_such_code""#).is_err());
    }
}
