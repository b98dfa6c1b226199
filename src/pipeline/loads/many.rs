//! `PUT /partitions/{table}?from=&to=` and `PUT /tables/{table}/rows`: a
//! load of several partitions in one request. The body is staged once, as
//! one part, then finished like a staged load (`publish`): every
//! target partition replaced in one transaction, or none.

use super::part::StagedBody;
use super::publish::{Finish, Finishing, PartSource};
use super::target::{target_periods, LoadTarget};
use crate::access::Actor;
use crate::ingest::reject_spool::RejectSpool;
use crate::names::TableName;
use crate::pipeline::error::{WriteError, WriteResult};
use crate::pipeline::intake::body::BodySource;
use crate::pipeline::intake::ticket::LoadTicket;
use crate::pipeline::intake::turns;
use crate::pipeline::Pipeline;
use crate::schema::{Audits, BadRowPolicy, TableDef};
use crate::store::catalog;
use crate::store::write::stage::{self, StageFate};
use crate::versions::Expected;
use crate::wire::loads::LoadReceipt;

/// A range or whole-table PUT.
pub struct PutMany {
    pub table: TableName,
    /// A range, or the whole table.
    pub target: LoadTarget,
    pub body: BodySource,
    pub conditions: Expected,
    pub actor: Actor,
    /// `?bad_rows=`: the table's policy for this request only.
    pub bad_rows: Option<BadRowPolicy>,
    /// `?audit=`: audits beside the table's (its keys win).
    pub audits: Option<serde_json::Value>,
    pub dry_run: bool,
}

impl PutMany {
    fn mode(&self) -> &'static str {
        match &self.target {
            LoadTarget::Table => "replace_table",
            LoadTarget::Partitions(one) if one.len() == 1 => crate::pipeline::day::request::MODE,
            _ => "replace_range",
        }
    }
}

impl Pipeline {
    /// Replaces a range of partitions or the whole table in one
    /// transaction, or with `dry_run` tells what it would do; its refusals
    /// recorded in the ledger.
    pub async fn put_many(&self, req: PutMany) -> WriteResult<LoadReceipt> {
        let single = match &req.target {
            LoadTarget::Partitions(one) if one.len() == 1 => Some(one[0]),
            _ => None,
        };
        let ticket = LoadTicket::new(&req.table, single, req.mode(), None, &req.actor);
        let result = self.put_many_with(req, &ticket).await;
        if let Err(e) = &result {
            if !matches!(e, WriteError::AuditFailed(_)) {
                ticket.record_refusal(&self.store, e).await;
            }
        }
        result
    }

    async fn put_many_with(
        &self,
        mut req: PutMany,
        ticket: &LoadTicket,
    ) -> WriteResult<LoadReceipt> {
        let reader = std::mem::replace(&mut req.body.reader, Box::new(tokio::io::empty()));
        req.body.reader = turns::arrived(reader).await?;
        let principal = req.actor.principal.clone();
        let _slot = self
            .load_slots
            .acquire(&[&principal], self.settings.load_wait())
            .await?;
        let mut conn = self.store.acquire().await?;
        let def = catalog::table_def(&mut conn, &req.table)
            .await?
            .ok_or_else(|| WriteError::TableNotFound(req.table.clone()))?;
        let audits = request_audits(&def, req.audits.as_ref())?;
        let periods = target_periods(&def, &req.target);
        let allowed = periods
            .clone()
            .map(|p| std::sync::Arc::new(p.into_iter().collect()));
        let quarantine = req.bad_rows.unwrap_or(def.bad_rows) == BadRowPolicy::Quarantine;
        let body = std::mem::replace(&mut req.body, BodySource::empty());
        // A row of a one-partition load may omit its partition value.
        let ds = req.target.only_partition();
        let mut staged: StagedBody = self
            .stage_body(&mut conn, &def, ticket, body, ds, allowed, quarantine)
            .await?;
        let parts = vec![PartSource {
            stage_name: staged.stage_name.clone(),
            contents: staged.contents(),
        }];
        let finish = Finish {
            def: &def,
            ticket,
            periods,
            parts,
            audits,
            conditions: &req.conditions,
            how: if req.dry_run {
                Finishing::DryRun
            } else {
                Finishing::Publish
            },
            staged: false,
            forced: None,
            rows_received: staged.decoded.rows_received,
            discarded_fields: staged.decoded.discarded_fields,
            rejected: staged
                .decoded
                .rejects
                .as_ref()
                .map_or(0, RejectSpool::count),
            rejects: staged.decoded.rejects.take(),
            range: req.target.range_bounds(),
        };
        let receipt = self.finish_load(&mut conn, finish).await;
        // Swapped in whole when it was the one partition's stage; dropped
        // otherwise.
        stage::release(&mut conn, &staged.stage_name, StageFate::Discarded).await?;
        receipt
    }
}

/// The table's audits, the request's keys over them.
fn request_audits(def: &TableDef, asked: Option<&serde_json::Value>) -> WriteResult<Audits> {
    Ok(match asked {
        Some(value) => def.audits.overlay(&Audits::parse(value, def)?),
        None => (*def.audits).clone(),
    })
}
