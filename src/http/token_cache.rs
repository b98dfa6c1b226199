//! Valid tokens remembered by this process, so that a request pays no read
//! of `idem.tokens`.
//!
//! Revocations reach every process at once through the database: `revoke_token`
//! notifies on commit, and each process, LISTENing (`follow_revocations`),
//! forgets the token. The cache serves only while that listener is
//! connected (a lost connection may have lost notices: everything is
//! forgotten until it listens again), never past a token's expiry, and no
//! entry longer than `MAX_AGE`.
//!
//! A look-up that read `idem.tokens` before a revocation must not cache the
//! token after the notice went by: every forgetting moves an epoch on, and
//! an entry is kept only if the epoch did not move during its look-up.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::ids::TokenId;
use crate::store::tokens::{TokenInfo, TokenLookup};
use crate::store::Store;

/// The longest a token is served from memory without a fresh read.
const MAX_AGE: Duration = Duration::from_secs(60);
/// Tokens remembered at most; past it the cache starts over.
const MAX_TOKENS: usize = 10_000;
/// How long a lost listener waits before it connects again.
const RELISTEN_AFTER: Duration = Duration::from_secs(1);

#[derive(Default)]
pub struct TokenCache {
    inner: Mutex<Inner>,
}

#[derive(Default)]
struct Inner {
    /// Whether revocations are being heard (nothing is served otherwise).
    listening: bool,
    epoch: u64,
    tokens: HashMap<[u8; 32], Cached>,
}

struct Cached {
    token: TokenInfo,
    until: Instant,
}

impl Inner {
    fn forget_all(&mut self) {
        self.epoch += 1;
        self.tokens.clear();
    }
}

impl TokenCache {
    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        // A panic while holding it left nothing half-done that matters.
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The token of this secret digest, from memory when it may be, else
    /// from the database (and then remembered).
    pub async fn lookup(
        &self,
        store: &Store,
        digest: &[u8; 32],
    ) -> crate::store::StoreResult<TokenLookup> {
        let epoch = {
            let inner = self.lock();
            if let Some(cached) = inner
                .tokens
                .get(digest)
                .filter(|c| c.until > Instant::now())
            {
                return Ok(TokenLookup::Valid {
                    token: cached.token.clone(),
                    expires_in: None,
                });
            }
            inner.epoch
        };
        let lookup = store.token_by_secret(digest).await?;
        if let TokenLookup::Valid { token, expires_in } = &lookup {
            let max_age = expires_in.map_or(MAX_AGE, |left| left.min(MAX_AGE));
            self.remember(*digest, token, max_age, epoch);
        }
        Ok(lookup)
    }

    fn remember(&self, digest: [u8; 32], token: &TokenInfo, max_age: Duration, epoch: u64) {
        let mut inner = self.lock();
        if !inner.listening || inner.epoch != epoch {
            return;
        }
        if inner.tokens.len() >= MAX_TOKENS {
            inner.forget_all();
            return;
        }
        let cached = Cached {
            token: token.clone(),
            until: Instant::now() + max_age,
        };
        inner.tokens.insert(digest, cached);
    }

    /// Forgets a revoked token (this process revoked it, or heard of it).
    pub fn forget(&self, id: TokenId) {
        let mut inner = self.lock();
        inner.epoch += 1;
        inner.tokens.retain(|_, cached| cached.token.id != id);
    }

    fn set_listening(&self, listening: bool) {
        let mut inner = self.lock();
        inner.forget_all();
        inner.listening = listening;
    }
}

/// Hears revocations for as long as the process runs, and keeps the cache
/// serving only while it hears them.
pub async fn follow_revocations(store: Store, cache: std::sync::Arc<TokenCache>) {
    loop {
        match store.revocations().await {
            Ok(mut revocations) => {
                cache.set_listening(true);
                loop {
                    match revocations.next().await {
                        Ok(Some(id)) => cache.forget(id),
                        // A notice naming no token: forget them all.
                        Ok(None) => cache.set_listening(true),
                        Err(e) => {
                            cache.set_listening(false);
                            tracing::warn!(error = %e, "lost the revocations listener; tokens are read for every request until it is back");
                            break;
                        }
                    }
                }
            }
            Err(e) => {
                cache.set_listening(false);
                tracing::debug!(error = %e, "could not listen for revocations");
            }
        }
        tokio::time::sleep(RELISTEN_AFTER).await;
    }
}
