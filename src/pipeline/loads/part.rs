//! `PUT /loads/{id}/parts/{n}`: a part's body decoded and COPYed into a
//! table of its own, then registered as part `n` of its load (replacing an
//! earlier part `n`; the same rows again change nothing). Parts of one
//! load stage in parallel, each on its own connection.
//!
//! Also the one part of a single-request load (a range or whole-table PUT),
//! which is staged the same way but never registered.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use tokio_stream::wrappers::ReceiverStream;

use super::open::LoadView;
use super::target::LoadTarget;
use crate::access::Actor;
use crate::ids::LoadId;
use crate::ingest::{ContentHash, EncodeOptions};
use crate::period::Period;
use crate::pipeline::error::{WriteError, WriteResult};
use crate::pipeline::intake::body::BodySource;
use crate::pipeline::intake::decode::{self, DecodeJob, Decoded, Quarantine, RepeatCheck};
use crate::pipeline::intake::ticket::LoadTicket;
use crate::pipeline::intake::turns;
use crate::pipeline::Pipeline;
use crate::schema::TableDef;
use crate::store::catalog;
use crate::store::staged_loads::StagedStatus;
use crate::store::write::parts::{self, PartFacts, Registered};
use crate::store::write::stage::{self, StageFate};
use crate::wire::loads::PartReceipt;

/// A part as sent.
pub struct PartUpload {
    pub load_id: LoadId,
    pub part: u32,
    pub body: BodySource,
    /// `?ds=`: the partition of rows that give none.
    pub ds: Option<Period>,
    pub actor: Actor,
}

/// A staged body: its table (claimed by the connection that staged it) and
/// what its rows add to each partition.
pub struct StagedBody {
    pub stage_name: String,
    /// The definition the rows were encoded for.
    pub def: TableDef,
    pub decoded: Decoded,
    pub rows: u64,
}

impl StagedBody {
    /// The rows' content per partition.
    pub fn contents(&self) -> BTreeMap<Period, ContentHash> {
        self.decoded
            .additions
            .iter()
            .map(|(period, delta)| {
                let rows = u64::try_from(delta.rows()).expect("additions are not negative");
                (*period, ContentHash::from_parts(&delta.sum_bytes(), rows))
            })
            .collect()
    }
}

impl Pipeline {
    /// Stages part `n` of a load and registers it.
    pub async fn put_part(&self, mut req: PartUpload) -> WriteResult<PartReceipt> {
        let view = self
            .load_view(req.load_id)
            .await?
            .ok_or(WriteError::LoadNotFound(req.load_id))?;
        check_open(&view)?;
        let mut conn = self.store.acquire().await?;
        let table = crate::names::TableName::parse(&view.load.table)
            .map_err(|e| WriteError::Internal(anyhow::anyhow!("a staged load's table: {e}")))?;
        let def = catalog::table_def(&mut conn, &table)
            .await?
            .ok_or_else(|| WriteError::TableNotFound(table.clone()))?;
        let target = LoadTarget::from_json(&view.load.target, &def)?;
        let allowed = target.periods().map(|p| Arc::new(p.into_iter().collect()));
        check_ds(req.ds, allowed.as_deref())?;
        let reader = std::mem::replace(&mut req.body.reader, Box::new(tokio::io::empty()));
        req.body.reader = turns::arrived(reader).await?;
        let principal = req.actor.principal.clone();
        let _slot = self
            .load_slots
            .acquire(&[&principal], self.settings.load_wait())
            .await?;
        let ticket = LoadTicket::new(&table, None, "load", None, &req.actor);
        let ticket = LoadTicket {
            load_id: req.load_id,
            ..ticket
        };
        let body = std::mem::replace(&mut req.body, BodySource::empty());
        let staged = self
            .stage_body(&mut conn, &def, &ticket, body, req.ds, allowed, false)
            .await?;
        let registered = self
            .register(&mut conn, req.load_id, req.part, &staged)
            .await;
        let fate = match registered {
            Ok(Registered::Replaced) => StageFate::Published,
            _ => StageFate::Discarded,
        };
        stage::release(&mut conn, &staged.stage_name, fate).await?;
        let receipt = part_receipt(&req, &staged, registered? == Registered::Replaced);
        Ok(receipt)
    }

    async fn register(
        &self,
        conn: &mut sqlx::PgConnection,
        load_id: LoadId,
        part: u32,
        staged: &StagedBody,
    ) -> WriteResult<Registered> {
        let content = staged.decoded.input_hash.hex();
        let definition = parts::definition_digest(&staged.def);
        let additions: serde_json::Map<String, serde_json::Value> = staged
            .contents()
            .into_iter()
            .map(|(period, c)| {
                let value =
                    serde_json::json!({"rows": c.rows(), "sum": hex::encode(c.sum_bytes())});
                (period.label(), value)
            })
            .collect();
        let facts = PartFacts {
            load_id,
            part,
            stage_name: &staged.stage_name,
            rows: staged.rows,
            rows_received: staged.decoded.rows_received,
            rejected: 0,
            content_sha256: &content,
            additions: serde_json::Value::Object(additions),
            definition_sha256: &definition,
        };
        match parts::register_part(conn, &facts).await? {
            Registered::NotOpen(status) => Err(not_open(load_id, status)),
            registered => Ok(registered),
        }
    }

    /// Decodes `body` for `def` into a new claimed stage of its own (no
    /// bound, no index: `assemble` makes the partitions' stages from it).
    /// Bad rows refuse the body unless `quarantine` (the rows then kept with
    /// the load when it publishes).
    #[allow(clippy::too_many_arguments)]
    pub(crate) async fn stage_body(
        &self,
        conn: &mut sqlx::PgConnection,
        def: &TableDef,
        ticket: &LoadTicket,
        body: BodySource,
        ds: Option<Period>,
        allowed: Option<Arc<BTreeSet<Period>>>,
        quarantine: bool,
    ) -> WriteResult<StagedBody> {
        let options = EncodeOptions {
            allowed,
            ds,
            row_id_scope: None,
            tombstones: false,
            presence: false,
        };
        let format = body.format;
        let job = DecodeJob::new(&self.settings, def.clone(), options, ticket, format);
        let job = DecodeJob {
            repeats: RepeatCheck::LeaveToIndex,
            quarantine: quarantine
                .then(|| Quarantine::Keep(ticket.reject_source("put", None, format))),
            ..job
        };
        let decoding = decode::spawn_decoder(job, body.reader);
        let name = parts::part_stage_name(ticket.load_id, 0);
        stage::claim(&mut *conn, &name).await?;
        let copied = parts::copy_part(
            &mut *conn,
            def,
            &name,
            ds,
            ReceiverStream::new(decoding.chunks),
        )
        .await;
        let result = async {
            let decoded = decode::finish(decoding.decoder).await?;
            let rows = decode::copy_result(copied)?;
            Ok(StagedBody {
                stage_name: name.clone(),
                def: def.clone(),
                decoded,
                rows,
            })
        }
        .await;
        if result.is_err() {
            stage::release(&mut *conn, &name, StageFate::Discarded).await?;
        }
        result
    }
}

fn check_open(view: &LoadView) -> WriteResult<()> {
    if view.load.status.is_open() {
        return Ok(());
    }
    Err(not_open(view.load.load_id, Some(view.load.status)))
}

pub(crate) fn not_open(load_id: LoadId, status: Option<StagedStatus>) -> WriteError {
    match status {
        None => WriteError::LoadNotFound(load_id),
        Some(status) => WriteError::LoadNotOpen {
            load_id,
            status: status.as_str(),
        },
    }
}

/// `?ds=` names a partition of the target.
fn check_ds(ds: Option<Period>, allowed: Option<&BTreeSet<Period>>) -> WriteResult<()> {
    match (ds, allowed) {
        (Some(ds), Some(allowed)) if !allowed.contains(&ds) => Err(WriteError::Mode(format!(
            "ds={ds} is not a partition this load replaces"
        ))),
        _ => Ok(()),
    }
}

fn part_receipt(req: &PartUpload, staged: &StagedBody, changed: bool) -> PartReceipt {
    PartReceipt {
        load_id: req.load_id,
        part: req.part,
        rows_received: staged.decoded.rows_received,
        rows_staged: staged.rows,
        rejected: 0,
        discarded_fields: staged.decoded.discarded_fields,
        content_sha256: staged.decoded.input_hash.hex(),
        changed,
        partitions: staged
            .contents()
            .into_iter()
            .map(|(period, c)| (period.label(), c.rows()))
            .collect(),
    }
}
