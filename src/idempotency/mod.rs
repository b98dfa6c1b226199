//! The vocabulary of a write under an `Idempotency-Key`: the key (parsed
//! once, at the edge), the request it is bound to, the fingerprint that
//! tells a repeat of that request from a reuse of its key, and the answer a
//! completed key keeps. `http` builds these, `pipeline/keyed/` runs the
//! write and `store::idempotency` keeps the key's row; all three speak
//! these types. `completed` remembers completed keys in memory, so that
//! `store::idempotency` reads a replayed key's row once.

pub mod completed;

use std::fmt;
use std::sync::Arc;

use bytes::Bytes;

use crate::ids::LoadId;
use crate::ids::Principal;
use chrono::{DateTime, Utc};
use serde::Deserialize;
use sha2::{Digest, Sha256};

/// An `Idempotency-Key`: 1 to 255 visible ASCII characters, without the
/// surrounding whitespace and double quotes a client may send.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct IdempotencyKey(String);

/// Why a text is not an `Idempotency-Key`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KeyError;

impl fmt::Display for KeyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("the Idempotency-Key must be 1 to 255 visible ASCII characters")
    }
}

impl std::error::Error for KeyError {}

impl IdempotencyKey {
    /// The key a header's text names: trimmed, unquoted, then checked.
    pub fn parse(text: &str) -> Result<Self, KeyError> {
        let key = text.trim();
        let key = key
            .strip_prefix('"')
            .and_then(|k| k.strip_suffix('"'))
            .unwrap_or(key);
        if key.is_empty() || key.len() > 255 || !key.bytes().all(|b| b.is_ascii_graphic()) {
            return Err(KeyError);
        }
        Ok(IdempotencyKey(key.to_string()))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for IdempotencyKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// What the fingerprint of a keyed request is made of.
pub struct KeyedRequest {
    pub principal: Principal,
    pub key: IdempotencyKey,
    pub method: &'static str,
    pub path_and_query: String,
    pub content_type: String,
}

impl KeyedRequest {
    /// SHA-256 of method, path and query, content type and the body's
    /// SHA-256 (hex), each followed by a NUL: what a key's row records, so
    /// that the key answers only the request it was first used for.
    pub fn fingerprint(&self, body_sha256: &str) -> String {
        let mut h = Sha256::new();
        for part in [
            self.method,
            &self.path_and_query,
            &self.content_type,
            body_sha256,
        ] {
            h.update(part.as_bytes());
            h.update(b"\0");
        }
        hex::encode(h.finalize())
    }
}

/// The status of every keyed write's answer: only completed writes are
/// stored, and they all answer 200.
pub const COMPLETED_STATUS: u16 = 200;

/// A completed key, as stored.
#[derive(Clone, Debug, Deserialize, sqlx::FromRow)]
pub struct StoredKey {
    pub principal: Principal,
    pub key: String,
    pub fingerprint: String,
    pub load_id: Option<LoadId>,
    pub response_status: i32,
    #[sqlx(try_from = "sqlx::types::Json<serde_json::Value>")]
    pub response_body: StoredAnswer,
    /// The `ETag` the response carried, if any (a keyed PUT's).
    pub response_etag: Option<String>,
    pub created_at: DateTime<Utc>,
    pub expires_at: DateTime<Utc>,
}

/// A completed key's answer body: as the write answered it, and as a
/// replay sends it (`"replayed": true`), serialized once when the key is
/// read or completed, so that a replay from memory sends its bytes as they
/// are. Cheap to clone.
#[derive(Clone, Debug, Deserialize)]
#[serde(from = "serde_json::Value")]
pub struct StoredAnswer {
    json: Arc<serde_json::Value>,
    replay: Bytes,
}

impl StoredAnswer {
    pub fn new(mut json: serde_json::Value) -> StoredAnswer {
        // `"replayed"` set for the serialization and then put back, rather
        // than a copy of the answer made: this runs for every keyed write.
        let replay = match json.as_object_mut() {
            Some(fields) => {
                let was = fields.insert("replayed".into(), true.into());
                let replay = serde_json::to_vec(fields);
                match was {
                    Some(was) => fields.insert("replayed".into(), was),
                    None => fields.remove("replayed"),
                };
                replay
            }
            None => serde_json::to_vec(&json),
        };
        StoredAnswer {
            replay: Bytes::from(replay.expect("a JSON value serializes")),
            json: Arc::new(json),
        }
    }

    /// The body as the write answered it.
    pub fn json(&self) -> &serde_json::Value {
        &self.json
    }

    /// The body a replay sends.
    pub fn replay_bytes(&self) -> Bytes {
        self.replay.clone()
    }

    /// About what it takes in memory: the answer's text, twice.
    pub fn size(&self) -> usize {
        2 * self.replay.len()
    }
}

impl From<serde_json::Value> for StoredAnswer {
    fn from(json: serde_json::Value) -> StoredAnswer {
        StoredAnswer::new(json)
    }
}

impl From<sqlx::types::Json<serde_json::Value>> for StoredAnswer {
    fn from(json: sqlx::types::Json<serde_json::Value>) -> StoredAnswer {
        StoredAnswer::new(json.0)
    }
}

/// What a claim does with a key it finds completed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OnCompleted {
    /// Lets the key go at once: its record is the answer.
    Release,
    /// Keeps the key's lock: a PUT's record is the answer only while its
    /// partition still holds what it recorded, which the claimer checks
    /// under the lock.
    Hold,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_is_trimmed_and_unquoted() {
        let key = IdempotencyKey::parse("  \"abc-1\" ").unwrap();
        assert_eq!(key.as_str(), "abc-1");
    }

    #[test]
    fn a_key_of_invisible_or_too_many_characters_is_refused() {
        assert_eq!(IdempotencyKey::parse(""), Err(KeyError));
        assert_eq!(IdempotencyKey::parse("\"\""), Err(KeyError));
        assert_eq!(IdempotencyKey::parse("a b"), Err(KeyError));
        assert_eq!(IdempotencyKey::parse(&"k".repeat(256)), Err(KeyError));
        assert!(IdempotencyKey::parse(&"k".repeat(255)).is_ok());
    }
}
