//! Every status idem keeps or answers, each an enum with its text on the
//! wire and in its table's `status` column: the ledger's (`LoadStatus`), a
//! staged load's (`StagedStatus`), a reject's (`RejectStatus`), what a load
//! of several partitions did (`ReceiptStatus`) and an Idempotency-Key's
//! (`KeyStatus`). A text this server does not know is refused, on the wire
//! and from the database alike.

use std::fmt;

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use sqlx::postgres::{PgTypeInfo, PgValueRef};
use sqlx::{Decode, Postgres, Type};

/// Declares a status enum with each variant's text, `ALL`, its
/// serialization as that text, and its decoding from a `text` column.
macro_rules! statuses {
    ($(#[$doc:meta])* $name:ident { $($(#[$vdoc:meta])* $variant:ident => $text:literal,)+ }) => {
        $(#[$doc])*
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
        pub enum $name {
            $($(#[$vdoc])* $variant,)+
        }

        impl $name {
            /// Every status, in the order declared.
            pub const ALL: &'static [$name] = &[$($name::$variant,)+];

            /// The status as the wire and the database say it.
            pub const fn as_str(self) -> &'static str {
                match self {
                    $($name::$variant => $text,)+
                }
            }

            /// The status `text` names, if any.
            pub fn parse(text: &str) -> Option<Self> {
                Self::ALL.iter().copied().find(|s| s.as_str() == text)
            }

            /// Every status's text, joined by `, ` (for messages).
            pub fn listed() -> String {
                Self::ALL
                    .iter()
                    .map(|s| s.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(self.as_str())
            }
        }

        impl Serialize for $name {
            fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
                serializer.serialize_str(self.as_str())
            }
        }

        impl<'de> Deserialize<'de> for $name {
            fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
                let text = String::deserialize(deserializer)?;
                Self::parse(&text).ok_or_else(|| {
                    serde::de::Error::custom(format!(
                        "{text:?} is not one of {}",
                        Self::listed()
                    ))
                })
            }
        }

        impl Type<Postgres> for $name {
            fn type_info() -> PgTypeInfo {
                <str as Type<Postgres>>::type_info()
            }

            fn compatible(ty: &PgTypeInfo) -> bool {
                <str as Type<Postgres>>::compatible(ty)
            }
        }

        impl<'r> Decode<'r, Postgres> for $name {
            fn decode(value: PgValueRef<'r>) -> Result<Self, sqlx::error::BoxDynError> {
                let text = <&str as Decode<Postgres>>::decode(value)?;
                Self::parse(text).ok_or_else(|| {
                    format!("{} {text:?} is unknown", stringify!($name)).into()
                })
            }
        }
    };
}

statuses! {
    /// A finished load in the ledger (`idem.loads`).
    LoadStatus {
        Published => "published",
        Unchanged => "unchanged",
        Rejected => "rejected",
        Failed => "failed",
        /// A load whose audits failed: nothing was published.
        AuditFailed => "audit_failed",
    }
}

impl LoadStatus {
    /// An accepted merge's status: published when it changed rows.
    pub fn of_merge(changed: bool) -> Self {
        if changed {
            LoadStatus::Published
        } else {
            LoadStatus::Unchanged
        }
    }
}

statuses! {
    /// Where a staged load (`POST /loads`) stands.
    StagedStatus {
        Open => "open",
        Published => "published",
        AuditFailed => "audit_failed",
        Abandoned => "abandoned",
        Expired => "expired",
    }
}

impl StagedStatus {
    /// Whether parts may still be staged and the load published.
    pub fn is_open(self) -> bool {
        matches!(self, StagedStatus::Open | StagedStatus::AuditFailed)
    }
}

statuses! {
    /// A reject kept under the `quarantine` policy (`idem.rejects`).
    RejectStatus {
        /// Waiting for a replay.
        Pending => "pending",
        /// Written by a replay.
        Replayed => "replayed",
        /// Past its table's retry window.
        Expired => "expired",
        /// Of a day a later PUT replaced.
        Superseded => "superseded",
    }
}

statuses! {
    /// What a load of several partitions did (its receipt's `status`).
    ReceiptStatus {
        Published => "published",
        Unchanged => "unchanged",
        /// Planned only (`?dry_run=true`).
        DryRun => "dry_run",
        /// Audited only (`POST /loads/{id}/audit`).
        Staged => "staged",
    }
}

statuses! {
    /// What became of an Idempotency-Key.
    KeyStatus {
        Completed => "completed",
        InFlight => "in_flight",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_status_is_its_text_both_ways_and_an_unknown_one_is_refused() {
        for status in LoadStatus::ALL {
            let json = serde_json::to_value(status).unwrap();
            assert_eq!(json, status.as_str());
            assert_eq!(serde_json::from_value::<LoadStatus>(json).unwrap(), *status);
        }
        assert_eq!(
            serde_json::to_string(&StagedStatus::AuditFailed).unwrap(),
            r#""audit_failed""#
        );
        assert_eq!(
            RejectStatus::parse("superseded"),
            Some(RejectStatus::Superseded)
        );
        assert_eq!(RejectStatus::parse("gone"), None);
        let unknown = serde_json::from_str::<KeyStatus>(r#""lost""#).unwrap_err();
        assert!(
            unknown.to_string().contains("completed, in_flight"),
            "{unknown}"
        );
        assert_eq!(
            RejectStatus::listed(),
            "pending, replayed, expired, superseded"
        );
    }
}
