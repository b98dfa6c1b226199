//! What every handler can reach: the store, the settings, the counters, the
//! write path, the tokens this process remembers; built once per server.
//! (What a write's answer counts into it is `write.rs`'s.)

use std::sync::Arc;

use super::client_requests::PerClient;
use super::load_events_heard::LoadEvents;
use super::token_cache::TokenCache;
use crate::config::Settings;
use crate::metrics::{Metrics, PoolGauges};
use crate::pipeline::Pipeline;
use crate::store::Store;

/// What every handler can reach: shared behind one `Arc`, since axum
/// clones the state for each layer and handler a request passes (a clone
/// of each of its fields, and their drops, took a tenth of a replay's
/// CPU).
#[derive(Clone)]
pub struct AppState(Arc<Shared>);

impl std::ops::Deref for AppState {
    type Target = Shared;

    fn deref(&self) -> &Shared {
        &self.0
    }
}

/// What `AppState` shares.
pub struct Shared {
    pub store: Store,
    pub settings: Arc<Settings>,
    /// This server's own counters (see `crate::metrics`).
    pub metrics: Arc<Metrics>,
    /// The SHA-256 of the bootstrap admin token, if there is one.
    pub(super) admin_digest: Option<[u8; 32]>,
    /// Valid tokens this process remembers (see `token_cache`).
    pub tokens: Arc<TokenCache>,
    /// The write path: its turns to write, its batches, the definitions
    /// it remembers.
    pipeline: Pipeline,
    /// Requests in flight per client behind a trusted proxy.
    pub(super) client_requests: PerClient,
    /// The announced loads this process heard of, and its event streams.
    pub load_events: LoadEvents,
}

impl AppState {
    pub fn new(store: Store, settings: Settings) -> AppState {
        let admin_digest = settings
            .admin_token
            .as_ref()
            .map(|token| crate::access::secret_digest(token.expose()));
        let client_requests = PerClient::new(settings.max_connections_per_client);
        let settings = Arc::new(settings);
        let metrics = Arc::<Metrics>::default();
        let pipeline = Pipeline::new(store.clone(), settings.clone(), metrics.clone());
        AppState(Arc::new(Shared {
            store,
            metrics,
            admin_digest,
            client_requests,
            settings,
            tokens: Arc::default(),
            pipeline,
            load_events: LoadEvents::default(),
        }))
    }

    /// The write path, over the same store and settings.
    pub fn pipeline(&self) -> Pipeline {
        self.pipeline.clone()
    }

    /// The pool and the turns to write, as they are now.
    pub fn pool_gauges(&self) -> PoolGauges {
        let pool = self.store.pool_state();
        PoolGauges {
            open: pool.open.into(),
            idle: pool.idle,
            waiting: pool.waiting,
            max: pool.max.into(),
            load_slots_free: u64::try_from(self.pipeline.load_slots.available())
                .unwrap_or(u64::MAX),
        }
    }
}
