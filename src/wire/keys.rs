//! What became of an Idempotency-Key (`GET /idempotency-keys/{key}`): the
//! completed request's record and the answer it keeps, or a request still
//! in flight. Both are answered with their fields in name order.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use super::receipts::KeyedReceipt;
use super::status::KeyStatus;
use crate::ids::LoadId;
use crate::ids::Principal;

/// A key's record.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum KeyRecord {
    Completed(CompletedKey),
    InFlight(KeyInFlight),
}

/// A key whose request completed: its record and the answer it keeps.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CompletedKey {
    pub created_at: DateTime<Utc>,
    pub expires_at: DateTime<Utc>,
    /// The SHA-256 of the request the key was first sent with.
    pub fingerprint: String,
    pub key: String,
    pub load_id: Option<LoadId>,
    pub principal: Principal,
    pub response: KeptAnswer,
    /// How long the server keeps a completed key.
    pub retention_seconds: u64,
    /// `completed`.
    pub status: KeyStatus,
}

/// The answer a completed key keeps, given again to a retry.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct KeptAnswer {
    /// As stored: a `KeyedReceipt`.
    pub body: serde_json::Value,
    pub status: i32,
}

impl KeptAnswer {
    /// The stored body as the receipt it is (`None` for a body of another
    /// form).
    pub fn receipt(&self) -> Option<KeyedReceipt> {
        KeyedReceipt::deserialize(&self.body).ok()
    }
}

/// A key whose request is still being written.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct KeyInFlight {
    pub key: String,
    pub principal: Principal,
    pub retention_seconds: u64,
    /// `in_flight`.
    pub status: KeyStatus,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_record_answered_as_a_json_value_has_its_fields_in_name_order() {
        let at = DateTime::parse_from_rfc3339("2026-10-12T10:00:00Z")
            .unwrap()
            .with_timezone(&Utc);
        let completed = KeyRecord::Completed(CompletedKey {
            created_at: at,
            expires_at: at,
            fingerprint: "f".into(),
            key: "k".into(),
            load_id: None,
            principal: Principal::Admin,
            response: KeptAnswer {
                body: serde_json::json!({"table": "orders"}),
                status: 200,
            },
            retention_seconds: 60,
            status: KeyStatus::Completed,
        });
        let in_flight = KeyRecord::InFlight(KeyInFlight {
            key: "k".into(),
            principal: Principal::Admin,
            retention_seconds: 60,
            status: KeyStatus::InFlight,
        });
        for record in [completed, in_flight] {
            let text = serde_json::to_string(&record).unwrap();
            assert_eq!(text, serde_json::to_value(&record).unwrap().to_string());
            assert_eq!(serde_json::from_str::<KeyRecord>(&text).unwrap(), record);
        }
    }
}
