//! Completed Idempotency-Keys this process has read or written, so that a
//! replay pays no read of `idem.idempotency_keys`.
//!
//! A completed POST key's row never changes until it expires (only an
//! expired row is taken over or reaped) or its table is dropped (which
//! deletes it; the dropping process forgets its copies, other processes
//! keep theirs: a known limit, said in docs/guide/schema.md). Nothing is served past
//! `expires_at`. A PUT's key is
//! completed again when its day no longer holds what it recorded (see
//! `pipeline/keyed/key.rs`): a copy elsewhere may then name the earlier load of
//! the same request: a PUT's key is therefore always read from the table.
//! The copies are bounded in bytes (each answer counted by its JSON text);
//! past the bound the oldest go first, a few at each new one (never a mass
//! of them at once, which would hold a thread for long). An answer is kept
//! as a replay sends it (`StoredAnswer`): a replay from memory clones a
//! few strings and a reference to its bytes.

use std::collections::{HashMap, VecDeque};
use std::sync::Mutex;

use chrono::Utc;

#[cfg(test)]
use super::StoredAnswer;
use super::{IdempotencyKey, StoredKey};
use crate::ids::Principal;

/// Bytes of keys and answers remembered at most.
const MAX_BYTES: usize = 16 * 1024 * 1024;
/// An answer larger than this is not remembered (a PUT's receipt is small;
/// nothing large is expected, and one must not fill the cache).
const MAX_ANSWER_BYTES: usize = 16 * 1024;

#[derive(Default)]
pub struct CompletedKeys {
    inner: Mutex<Inner>,
}

#[derive(Default)]
struct Inner {
    keys: HashMap<(Principal, String), StoredKey>,
    /// The keys in the order they were remembered, oldest first.
    order: VecDeque<(Principal, String)>,
    bytes: usize,
}

/// What an entry takes, about: its strings (the key twice: in the map and
/// in the order) and its answer's text.
fn size_of(stored: &StoredKey) -> usize {
    2 * (std::mem::size_of::<Principal>() + stored.key.len())
        + stored.fingerprint.len()
        + stored.response_etag.as_ref().map_or(0, String::len)
        + stored.response_body.size()
        + 256
}

impl CompletedKeys {
    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The completed key, if remembered and not expired.
    pub fn get(&self, principal: &Principal, key: &IdempotencyKey) -> Option<StoredKey> {
        let id = (principal.clone(), key.as_str().to_string());
        let inner = self.lock();
        let stored = inner.keys.get(&id)?;
        if stored.expires_at <= Utc::now() {
            return None;
        }
        Some(stored.clone())
    }

    /// Forgets every key: a dropped table's keys no longer stand (a drop
    /// is rare; the keys of other tables are read again once).
    pub fn forget_all(&self) {
        *self.lock() = Inner::default();
    }

    /// Remembers a key that is completed (committed).
    pub fn remember(&self, stored: StoredKey) {
        let size = size_of(&stored);
        if size > MAX_ANSWER_BYTES || stored.expires_at <= Utc::now() {
            return;
        }
        let id = (stored.principal.clone(), stored.key.clone());
        let mut inner = self.lock();
        if let Some(old) = inner.keys.insert(id.clone(), stored) {
            inner.bytes -= size_of(&old);
        } else {
            inner.order.push_back(id);
        }
        inner.bytes += size;
        while inner.bytes > MAX_BYTES {
            let Some(oldest) = inner.order.pop_front() else {
                break;
            };
            if let Some(old) = inner.keys.remove(&oldest) {
                inner.bytes -= size_of(&old);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(text: &str) -> IdempotencyKey {
        IdempotencyKey::parse(text).unwrap()
    }

    fn stored(key: &str, expires_in_secs: i64) -> StoredKey {
        StoredKey {
            principal: Principal::Admin,
            key: key.into(),
            fingerprint: "f".into(),
            load_id: None,
            response_status: 200,
            response_body: StoredAnswer::new(serde_json::json!({"rows_written": 1})),
            response_etag: None,
            created_at: Utc::now(),
            expires_at: Utc::now() + chrono::Duration::seconds(expires_in_secs),
        }
    }

    #[test]
    fn a_remembered_key_is_served_until_it_expires() {
        let cache = CompletedKeys::default();
        cache.remember(stored("live", 60));
        cache.remember(stored("expired", -1));
        let live = cache.get(&Principal::Admin, &key("live")).unwrap();
        assert_eq!(live.fingerprint, "f");
        assert_eq!(
            live.response_body.json(),
            &serde_json::json!({"rows_written": 1})
        );
        assert_eq!(
            &live.response_body.replay_bytes()[..],
            br#"{"replayed":true,"rows_written":1}"#
        );
        assert!(cache.get(&Principal::Admin, &key("expired")).is_none());
        assert!(
            cache.get(&Principal::Anonymous, &key("live")).is_none(),
            "keys belong to a principal"
        );
    }

    #[test]
    fn past_its_bound_the_oldest_keys_go_first() {
        let cache = CompletedKeys::default();
        let each = size_of(&stored("k-0", 60));
        let fit = MAX_BYTES / each;
        for i in 0..fit + 10 {
            cache.remember(stored(&format!("k-{i}"), 60));
        }
        assert!(
            cache.get(&Principal::Admin, &key("k-0")).is_none(),
            "the oldest went"
        );
        let newest = format!("k-{}", fit + 9);
        assert!(
            cache.get(&Principal::Admin, &key(&newest)).is_some(),
            "the newest stays"
        );
        assert!(cache.lock().bytes <= MAX_BYTES);
    }
}
