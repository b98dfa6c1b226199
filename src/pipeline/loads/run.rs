//! A staged load's audit and publish (`POST /loads/{id}/audit`,
//! `/publish`): under the load's lock, its parts read, assembled, audited,
//! and published once. A publish of a published load answers its stored
//! receipt; two processes publishing one load publish it once.

use std::collections::BTreeMap;

use super::part::not_open;
use super::publish::{Finish, Finishing, PartSource};
use super::target::{target_periods, LoadTarget};
use crate::access::Actor;
use crate::ids::LoadId;
use crate::ingest::ContentHash;
use crate::names::TableName;
use crate::period::Period;
use crate::pipeline::error::{WriteError, WriteResult};
use crate::pipeline::intake::ticket::LoadTicket;
use crate::pipeline::Pipeline;
use crate::schema::{Audits, TableDef};
use crate::store::catalog;
use crate::store::locks::{lock_load, unlock_load};
use crate::store::staged_loads::{self, LoadPart, StagedLoad, StagedStatus};
use crate::store::write::parts::definition_digest;
use crate::store::StoreError;
use crate::versions::Expected;

/// A publish or an audit of a staged load.
pub struct RunLoad {
    pub load_id: LoadId,
    pub actor: Actor,
    /// Publish despite failed audits, for this reason (an admin's).
    pub force: Option<String>,
    pub audit_only: bool,
}

/// A staged load's publish answer: its receipt (or, for an audit alone,
/// its report), and whether it is the one stored by an earlier publish.
pub struct RunAnswer {
    pub body: serde_json::Value,
    pub replayed: bool,
}

impl Pipeline {
    /// Audits or publishes a staged load, holding its lock throughout.
    pub async fn run_load(&self, req: RunLoad) -> WriteResult<RunAnswer> {
        let mut conn = self.store.acquire().await?;
        lock_load(&mut conn, req.load_id).await?;
        let answer = self.run_locked(&mut conn, &req).await;
        if let Err(e) = unlock_load(&mut conn, req.load_id).await {
            // The session goes with the connection, and the lock with it.
            tracing::warn!(error = %e, "could not let go of a load's lock");
            conn.close_on_drop();
        }
        let answer = answer?;
        if !req.audit_only && !answer.replayed {
            self.store.drop_published_parts(req.load_id).await;
        }
        Ok(answer)
    }

    async fn run_locked(
        &self,
        conn: &mut sqlx::PgConnection,
        req: &RunLoad,
    ) -> WriteResult<RunAnswer> {
        let load = staged_loads::get(&mut *conn, req.load_id, false)
            .await?
            .ok_or(WriteError::LoadNotFound(req.load_id))?;
        if let Some(answer) = published_answer(&load, req)? {
            return Ok(answer);
        }
        if !load.status.is_open() {
            return Err(not_open(load.load_id, Some(load.status)));
        }
        let (table, def) = load_table(&mut *conn, &load).await?;
        let target = LoadTarget::from_json(&load.target, &def)?;
        // The table's audits as they are now, the load's keys over them.
        let audits = def.audits.overlay(&Audits::parse(&load.audits, &def)?);
        let parts = parts_that_fit(&mut *conn, &load, &table, &def).await?;
        let ticket = ticket(&load, &table, &target, &req.actor);
        let finish = Finish {
            def: &def,
            ticket: &ticket,
            periods: target_periods(&def, &target),
            rows_received: parts.iter().map(|p| p.rows_received).sum(),
            parts: part_sources(&def, &parts)?,
            audits,
            conditions: &Expected::Any,
            how: if req.audit_only {
                Finishing::AuditOnly
            } else {
                Finishing::Publish
            },
            staged: true,
            forced: forced_note(req),
            discarded_fields: 0,
            rejects: None,
            rejected: 0,
            range: target.range_bounds(),
        };
        let receipt = self.finish_load(&mut *conn, finish).await?;
        let body = match req.audit_only {
            true => serde_json::to_value(&receipt.audit),
            false => serde_json::to_value(&receipt),
        }
        .expect("a receipt serializes");
        Ok(RunAnswer {
            body,
            replayed: false,
        })
    }
}

/// The receipt a published load answers again (not to an audit, which
/// is run again whatever the load's state).
fn published_answer(load: &StagedLoad, req: &RunLoad) -> WriteResult<Option<RunAnswer>> {
    if load.status != StagedStatus::Published || req.audit_only {
        return Ok(None);
    }
    let body = load
        .receipt
        .clone()
        .ok_or(StoreError::Corrupt("a published load has no receipt"))?;
    Ok(Some(RunAnswer {
        body,
        replayed: true,
    }))
}

/// The staged load's table and its definition as it is now.
async fn load_table(
    conn: &mut sqlx::PgConnection,
    load: &StagedLoad,
) -> WriteResult<(TableName, TableDef)> {
    let table = TableName::parse(&load.table)
        .map_err(|e| WriteError::Internal(anyhow::anyhow!("a staged load's table: {e}")))?;
    let def = catalog::table_def(&mut *conn, &table)
        .await?
        .ok_or_else(|| WriteError::TableNotFound(table.clone()))?;
    Ok((table, def))
}

/// The load's parts, refused when any was staged for another definition of
/// the table (its rows no longer fit).
async fn parts_that_fit(
    conn: &mut sqlx::PgConnection,
    load: &StagedLoad,
    table: &TableName,
    def: &TableDef,
) -> WriteResult<Vec<LoadPart>> {
    let parts = staged_loads::parts(&mut *conn, load.load_id).await?;
    let definition = definition_digest(def);
    if parts.iter().any(|p| p.definition_sha256 != definition) {
        return Err(StoreError::TableChanged(table.clone()).into());
    }
    Ok(parts)
}

/// What the ledger keeps of a forced publish: why, and who forced it.
fn forced_note(req: &RunLoad) -> Option<serde_json::Value> {
    req.force.as_ref().map(|reason| {
        serde_json::json!({"reason": reason, "token_id": req.actor.token_id(),
                           "token_name": req.actor.token_name})
    })
}

/// The ledger's ticket of a staged load: its own id.
fn ticket(load: &StagedLoad, table: &TableName, target: &LoadTarget, actor: &Actor) -> LoadTicket {
    let single = match target.periods() {
        Some(periods) if periods.len() == 1 => Some(periods[0]),
        _ => None,
    };
    LoadTicket {
        load_id: load.load_id,
        ..LoadTicket::new(table, single, "load", None, actor)
    }
}

/// The parts as the publish reads them: their contents per partition, from
/// what registering them recorded.
fn part_sources(def: &TableDef, parts: &[LoadPart]) -> WriteResult<Vec<PartSource>> {
    parts
        .iter()
        .map(|part| {
            let mut contents = BTreeMap::new();
            let additions = part.additions.as_object().ok_or(corrupt())?;
            for (label, added) in additions {
                let period = Period::parse(label, def.grain).ok_or(corrupt())?;
                let rows = added
                    .get("rows")
                    .and_then(|r| r.as_u64())
                    .ok_or(corrupt())?;
                let sum = added
                    .get("sum")
                    .and_then(|s| s.as_str())
                    .and_then(|s| hex::decode(s).ok())
                    .and_then(|s| <[u8; 32]>::try_from(s).ok())
                    .ok_or(corrupt())?;
                contents.insert(period, ContentHash::from_parts(&sum, rows));
            }
            Ok(PartSource {
                stage_name: part.stage_name.clone(),
                contents,
            })
        })
        .collect()
}

fn corrupt() -> WriteError {
    WriteError::Store(StoreError::Corrupt(
        "a load part's additions are unreadable",
    ))
}
