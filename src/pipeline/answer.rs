//! The form a keyed write's stored answer takes. `pipeline/` returns
//! receipts and knows no wire format; the caller (`http/`) supplies this
//! form, and the keyed write calls it where it stores the key's answer, in
//! the write's own transaction, so the record holds what the client was
//! sent.

use super::partition::Receipt;
use super::replay::ReplayReceipt;
use super::rows::RowsReceipt;

/// Renders each receipt as the body a keyed write stores and answers.
pub trait AnswerForm: Send + Sync {
    /// A PUT's receipt.
    fn partition(&self, receipt: &Receipt) -> serde_json::Value;
    /// A POST's receipt.
    fn rows(&self, receipt: &RowsReceipt) -> serde_json::Value;
    /// A replay of rejects' receipt.
    fn replay(&self, receipt: &ReplayReceipt) -> serde_json::Value;
}
