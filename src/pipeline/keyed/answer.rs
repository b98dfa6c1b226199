//! A keyed write's answer, and the form its stored body takes. `pipeline/`
//! returns receipts and knows no wire format; the caller (`http/`) supplies
//! the form, and the keyed write (alone or in a batch) calls it where it
//! stores the key's answer, in the write's own transaction, so the record
//! holds what the client was sent.

use crate::channel::ChannelSkipped;
use crate::idempotency::{StoredAnswer, StoredKey, COMPLETED_STATUS};
use crate::metrics::RowCounts;
use crate::pipeline::day::receipt::Receipt;
use crate::pipeline::error::{WriteError, WriteResult};
use crate::pipeline::rows::receipt::ReplayReceipt;
use crate::pipeline::rows::receipt::RowsReceipt;

/// Renders each receipt as the body a keyed write stores and answers.
pub trait AnswerForm: Send + Sync {
    /// A PUT's receipt.
    fn partition(&self, receipt: &Receipt) -> serde_json::Value;
    /// A POST's receipt.
    fn rows(&self, receipt: &RowsReceipt) -> serde_json::Value;
    /// A replay of rejects' receipt.
    fn replay(&self, receipt: &ReplayReceipt) -> serde_json::Value;
    /// A POST on a channel whose offset was committed already.
    fn channel_skipped(&self, skipped: &ChannelSkipped) -> serde_json::Value;
}

/// A keyed write's answer: status and body, the partition's `ETag` for a
/// PUT, and what the write did.
pub struct KeyedAnswer {
    pub status: u16,
    pub body: AnswerBody,
    pub etag: Option<String>,
    /// What the write did; `None` for a replay, which wrote nothing.
    pub counts: Option<RowCounts>,
}

/// A keyed write's answer body.
pub enum AnswerBody {
    /// The write's receipt, in the caller's form (`"replayed": false`).
    Written(serde_json::Value),
    /// A completed key's stored answer, replayed.
    Replayed(StoredAnswer),
}

impl AnswerBody {
    /// The body as its key stores it (`"replayed": false`).
    pub fn as_stored(&self) -> &serde_json::Value {
        match self {
            AnswerBody::Written(body) => body,
            AnswerBody::Replayed(stored) => stored.json(),
        }
    }

    /// The body as JSON, with `"replayed"` as it is sent.
    pub fn into_json(self) -> serde_json::Value {
        match self {
            AnswerBody::Written(body) => body,
            AnswerBody::Replayed(stored) => {
                let mut body = stored.json().clone();
                body["replayed"] = true.into();
                body
            }
        }
    }
}

impl KeyedAnswer {
    /// A completed key's stored answer, given again to the request of
    /// `fingerprint`: refused when that is another request than the key's.
    pub fn replay(fingerprint: &str, stored: StoredKey) -> WriteResult<KeyedAnswer> {
        if fingerprint != stored.fingerprint {
            return Err(WriteError::KeyReused);
        }
        Ok(KeyedAnswer {
            status: u16::try_from(stored.response_status).unwrap_or(COMPLETED_STATUS),
            body: AnswerBody::Replayed(stored.response_body),
            etag: stored.response_etag,
            counts: None,
        })
    }

    /// A write's answer.
    pub fn written(body: serde_json::Value, etag: Option<String>, counts: RowCounts) -> Self {
        KeyedAnswer {
            status: COMPLETED_STATUS,
            body: AnswerBody::Written(body),
            etag,
            counts: Some(counts),
        }
    }

    /// Whether it is a stored answer replayed.
    pub fn replayed(&self) -> bool {
        matches!(self.body, AnswerBody::Replayed(_))
    }
}
