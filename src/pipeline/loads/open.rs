//! Loads that outlive a request (`POST /loads`): opened under an
//! Idempotency-Key, shown with their parts, abandoned. Their parts are
//! `part.rs`'s, their audit and publish `run.rs`'s.

use chrono::Utc;

use super::target::LoadTarget;
use crate::access::Actor;
use crate::idempotency::IdempotencyKey;
use crate::ids::LoadId;
use crate::names::TableName;
use crate::pipeline::error::{WriteError, WriteResult};
use crate::pipeline::Pipeline;
use crate::schema::Audits;
use crate::store::catalog;
use crate::store::staged_loads::{self, LoadPart, NewLoad, StagedLoad, StagedStatus};

/// A `POST /loads`.
pub struct OpenLoad {
    pub table: TableName,
    pub target: serde_json::Value,
    pub audits: Option<serde_json::Value>,
    pub actor: Actor,
    pub key: IdempotencyKey,
    /// SHA-256 of the request, so the same key with another is refused.
    pub fingerprint: String,
    /// How long it stays open for parts and a publish.
    pub ttl: std::time::Duration,
}

/// A staged load as `GET /loads/{id}` shows it.
pub struct LoadView {
    pub load: StagedLoad,
    pub parts: Vec<LoadPart>,
}

impl Pipeline {
    /// Opens a load that outlives the request, or answers the one its
    /// Idempotency-Key opened (the bool: new).
    pub async fn open_load(&self, req: OpenLoad) -> WriteResult<(LoadView, bool)> {
        let mut conn = self.store.acquire().await?;
        let def = catalog::table_def(&mut conn, &req.table)
            .await?
            .ok_or_else(|| WriteError::TableNotFound(req.table.clone()))?;
        let target = LoadTarget::from_json(&req.target, &def)?;
        self.refuse_expired(&def, target.periods().unwrap_or_default())?;
        let audits = match &req.audits {
            Some(value) => Audits::parse(value, &def)?,
            None => Audits::default(),
        };
        let principal = req.actor.principal.clone();
        let new = NewLoad {
            load_id: LoadId::new(),
            table: &req.table,
            target: target.to_json(),
            audits: serde_json::to_value(&audits).expect("audits serialize"),
            principal: &principal,
            idempotency_key: req.key.as_str(),
            fingerprint: &req.fingerprint,
            token_id: req.actor.token_id(),
            expires_at: Utc::now() + req.ttl,
        };
        let (load, created) = staged_loads::open(&mut conn, &new).await?;
        if load.fingerprint != req.fingerprint {
            return Err(WriteError::KeyReused);
        }
        let parts = staged_loads::parts(&mut conn, load.load_id).await?;
        Ok((LoadView { load, parts }, created))
    }

    /// The staged load `load_id`, with its parts.
    /// (A load open past its time is expired first.)
    pub async fn load_view(&self, load_id: LoadId) -> WriteResult<Option<LoadView>> {
        let mut conn = self.store.acquire().await?;
        let Some(mut load) = staged_loads::get(&mut conn, load_id, false).await? else {
            return Ok(None);
        };
        if load.status.is_open() && load.expires_at < Utc::now() {
            self.store.expire_if_due(load_id).await?;
            load = staged_loads::get(&mut conn, load_id, false)
                .await?
                .ok_or(WriteError::LoadNotFound(load_id))?;
        }
        let parts = staged_loads::parts(&mut conn, load_id).await?;
        Ok(Some(LoadView { load, parts }))
    }

    /// Abandons the load: its parts dropped. Waits for a publish in
    /// progress; a published load stays published (409).
    pub async fn abandon_load(&self, load_id: LoadId) -> WriteResult<LoadView> {
        let mut conn = self.store.acquire().await?;
        match staged_loads::abandon(&mut conn, load_id).await? {
            None => return Err(WriteError::LoadNotFound(load_id)),
            Some(StagedStatus::Published) => return Err(WriteError::LoadPublished(load_id)),
            Some(_) => {}
        }
        drop(conn);
        self.load_view(load_id)
            .await?
            .ok_or(WriteError::LoadNotFound(load_id))
    }
}
