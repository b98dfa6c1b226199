//! `PUT /partitions/{table}/{ds}`: decode → stage → publish.
//!
//! The rows go into COPY while the body is still being decoded. When the
//! partition exists already, the body may well be a re-send of the one it
//! was built from (a retried job), so it is first spooled to a temporary file
//! while its SHA-256 is taken: if it is the same body (same bytes, format
//! and table definition), nothing is decoded or staged. Bodies that differ
//! in bytes but hold the same rows are found out at publish time, by the
//! order-independent content hash, and change nothing either.

use std::time::Instant;

use sha2::{Digest, Sha256};
use sqlx::PgConnection;
use tokio_stream::wrappers::ReceiverStream;

use super::receipt::Receipt;
use super::request::{PutPartition, MODE};
use crate::ingest::reject_spool::RejectSpool;
use crate::ingest::{BodyFormat, EncodeOptions};
use crate::metrics::Metrics;
use crate::names::TableName;
use crate::period::Period;
use crate::pipeline::error::{WriteError, WriteResult};
use crate::pipeline::intake::body::BodyReader;
use crate::pipeline::intake::decode::{self, DecodeJob, Decoded, Quarantine, RepeatCheck};
use crate::pipeline::intake::spool::{hash_rest, spool_body, spool_failed, Spooled};
use crate::pipeline::intake::target::Target;
use crate::pipeline::intake::ticket::LoadTicket;
use crate::pipeline::intake::turns;
use crate::pipeline::table::evolve::{BodyReading, DayBody, FittedBody};
use crate::pipeline::Pipeline;
use crate::schema::{BadRowPolicy, DistributionDefault, DuplicatePolicy, TableDef};
use crate::store::catalog;
use crate::store::ledger::{self, LoadStatus};
use crate::store::write::duplicates::Resolve;
use crate::store::write::publish::{current, publish, BodyFacts, Current, Published, Swap};
use crate::store::write::stage::{self, StageFate, Staged};
use crate::store::StoreError;
use crate::versions::Expected;

/// The connections a PUT works on: its stage's, and for a keyed PUT the
/// transaction that claimed the key, in which the swap then happens so that
/// the key's record commits with it. (A keyed write holds every connection
/// it needs before it claims its key, so the requests that wait for the key
/// cannot starve it of connections.)
pub struct PutConnections<'c> {
    pub stage: &'c mut PgConnection,
    pub key_tx: Option<&'c mut PgConnection>,
}

impl Pipeline {
    /// Replaces a day without an Idempotency-Key: its own connection, its
    /// refusals recorded in the ledger.
    pub async fn put_partition_unkeyed(&self, mut req: PutPartition) -> WriteResult<Receipt> {
        let ticket = req.ticket(None);
        let result = async {
            let reader = std::mem::replace(&mut req.body.reader, Box::new(tokio::io::empty()));
            req.body.reader = turns::arrived(reader).await?;
            let principal = req.actor.principal.clone();
            let _slot = self
                .load_slots
                .acquire(&[&principal], self.settings.load_wait())
                .await?;
            let mut conn = self.store.acquire().await?;
            let conns = PutConnections {
                stage: &mut conn,
                key_tx: None,
            };
            self.replace_partition(req, &ticket, conns).await
        }
        .await;
        if let Err(e) = &result {
            ticket.record_refusal(&self.store, e).await;
        }
        result
    }

    /// Replaces partition `ds`: the conditions checked, the table resolved,
    /// a re-sent body recognized, otherwise the rows staged and published.
    #[tracing::instrument(skip_all, fields(table = %req.table, ds = %req.ds, load_id = %ticket.load_id))]
    pub(crate) async fn replace_partition(
        &self,
        req: PutPartition,
        ticket: &LoadTicket,
        conns: PutConnections<'_>,
    ) -> WriteResult<Receipt> {
        let PutPartition {
            table,
            ds,
            body,
            conditions,
            bad_rows,
            create_table,
            .. // the actor: the ticket carries it
        } = req;
        let PutConnections {
            stage: conn,
            key_tx,
        } = conns;
        let live = current(&mut *conn, &table, ds).await?;
        conditions.check(live.as_ref().map(|c| c.content_sha256.as_str()))?;

        let format = body.format;
        let options = put_options(ds);
        let (target, body) =
            Target::resolve(&self.settings, &mut *conn, &table, create_table, body).await?;
        check_grain(target.def(), ds)?;
        self.refuse_expired(target.def(), [ds])?;
        let reading = BodyReading {
            format,
            options: &options,
            ticket,
            lock_wait: Some(self.settings.idempotency_wait()),
            set_aside_bad_rows: false,
        };
        let day = live
            .as_ref()
            .map(|live| day_body(live, format, target.def(), bad_rows));
        // On the stage's connection, which has no transaction open yet.
        let (target, body) = self
            .fit_table_to_body(&mut *conn, target, reading, body, day)
            .await?;
        if let (FittedBody::DaysOwn, Some(live)) = (&body, &live) {
            return days_own_body(ticket, ds, live, key_tx.unwrap_or(conn)).await;
        }
        let put = PutAttempt {
            ticket,
            ds,
            format,
            options: options.clone(),
            bad_rows,
            live: live.as_ref(),
            conditions: &conditions,
        };
        self.stage_until_published(put, target, body, reading, conn, key_tx)
            .await
    }

    /// Stages the body and publishes it. When another writer changed the
    /// table while the body was staged, and the body was kept to be read
    /// again, the table is fitted and the body staged again (a few times),
    /// rather than answer 409.
    async fn stage_until_published(
        &self,
        put: PutAttempt<'_>,
        mut target: Target,
        mut body: FittedBody,
        reading: BodyReading<'_>,
        conn: &mut PgConnection,
        mut key_tx: Option<&mut PgConnection>,
    ) -> WriteResult<Receipt> {
        let mut stagings = 0;
        loop {
            stagings += 1;
            let reader = body.reader()?.ok_or_else(|| {
                WriteError::Internal(anyhow::anyhow!("a PUT's body went missing"))
            })?;
            let written = self
                .stage_and_publish(
                    put.clone(),
                    target,
                    reader,
                    &mut *conn,
                    key_tx.as_deref_mut(),
                )
                .await;
            match written {
                Err(WriteError::Store(StoreError::TableChanged(_)))
                    if body.kept().is_some() && stagings < MAX_STAGINGS =>
                {
                    let stored = stored_def(&mut *conn, &put.ticket.table).await?;
                    target = self
                        .fit_again(&mut *conn, Target::Stored(stored), reading, body.kept())
                        .await?;
                }
                written => return written,
            }
        }
    }

    /// Stages the body for `target` and publishes it, unless it is the body
    /// the live partition was built from.
    async fn stage_and_publish(
        &self,
        put: PutAttempt<'_>,
        target: Target,
        body: BodyReader,
        conn: &mut PgConnection,
        key_tx: Option<&mut PgConnection>,
    ) -> WriteResult<Receipt> {
        let PutAttempt {
            ticket,
            ds,
            format,
            options,
            bad_rows,
            live,
            conditions,
        } = put;
        let new_table = matches!(target, Target::Inferred(_));
        let def = target.into_def();
        let bad_rows = bad_rows.unwrap_or(def.bad_rows);
        let body_hash = body_hash_prefix(format, &def, bad_rows);
        let body = match live {
            None => body,
            Some(live) => match self
                .spool_unless_same(body, body_hash.clone(), live)
                .await?
            {
                Resent::Different(file) => file,
                Resent::Same => {
                    return days_own_body(ticket, ds, live, key_tx.unwrap_or(conn)).await;
                }
            },
        };
        // A stage's unique index finds repeated keys at no extra cost.
        let job = DecodeJob::new(&self.settings, def, options, ticket, format);
        let job = DecodeJob {
            repeats: RepeatCheck::LeaveToIndex,
            hash_prefix: body_hash,
            quarantine: (bad_rows == BadRowPolicy::Quarantine)
                .then(|| Quarantine::Keep(ticket.reject_source("put", None, format))),
            ..job
        };
        let stage = StagedPut {
            ticket,
            ds,
            conditions,
            new_table,
            distribution_default: self.store.distribution_default(),
            metrics: &self.metrics,
        };
        stage.run(job, body, conn, key_tx).await
    }

    /// Copies the body to the spool, taking its SHA-256 on the way; when it
    /// is the body the live partition was built from, there is nothing to
    /// do. That is told by the hash alone: with the spool's disk full, the
    /// body is still read to its end and hashed, and only a body that
    /// differs needs the spool (503 `spool_full` then).
    async fn spool_unless_same(
        &self,
        body: BodyReader,
        mut hash: Sha256,
        live: &Current,
    ) -> WriteResult<Resent> {
        let dir = self.settings.spool_dir.as_deref();
        let kept = match spool_body(body, &mut hash, dir).await? {
            Spooled::Kept(file) => Ok(file),
            Spooled::Full { error, rest } => {
                hash_rest(rest, &mut hash).await?;
                Err(error)
            }
        };
        if hex::encode(hash.finalize()) == live.body_sha256 {
            return Ok(Resent::Same);
        }
        Ok(Resent::Different(Box::new(kept.map_err(spool_failed)?)))
    }
}

/// A body sent for a partition that exists: the one it was built from, or
/// another (kept to be decoded).
enum Resent {
    Same,
    Different(BodyReader),
}

/// How many times, at most, a PUT whose body is kept (`schema: evolve`) is
/// staged while other writers keep changing its table (each time one did,
/// so writers as a whole progress).
const MAX_STAGINGS: usize = 8;

/// What one staging of a PUT needs besides its table and body.
#[derive(Clone)]
struct PutAttempt<'a> {
    ticket: &'a LoadTicket,
    ds: Period,
    format: BodyFormat,
    options: EncodeOptions,
    /// `?bad_rows=`, if asked.
    bad_rows: Option<BadRowPolicy>,
    live: Option<&'a Current>,
    conditions: &'a Expected,
}

/// A PUT past its checks: its rows go to a stage, which is then published.
struct StagedPut<'a> {
    ticket: &'a LoadTicket,
    ds: Period,
    conditions: &'a Expected,
    /// The table is created when the stage is published.
    new_table: bool,
    distribution_default: DistributionDefault,
    metrics: &'a Metrics,
}

impl StagedPut<'_> {
    async fn run(
        &self,
        job: DecodeJob,
        body: BodyReader,
        conn: &mut PgConnection,
        key_tx: Option<&mut PgConnection>,
    ) -> WriteResult<Receipt> {
        let def = job.def.clone();
        // Under a quarantine (its bad rows set aside) a repeat is held.
        let repeats = Resolve {
            policy: def.duplicates,
            load_id: self.ticket.load_id,
            log: def.duplicate_log,
            refuse: def.duplicates == DuplicatePolicy::Reject && job.quarantine.is_none(),
        };
        let decoding = decode::spawn_decoder(job, body);
        let stage_name = stage::staging_name(self.ticket.load_id);
        stage::claim(&mut *conn, &stage_name).await?;
        let result = async {
            let staged = stage::stage_rows(
                &mut *conn,
                &def,
                self.ds,
                repeats,
                ReceiverStream::new(decoding.chunks),
            )
            .await;
            let decoded = decode::finish(decoding.decoder).await?;
            let staged = decode::copy_result(staged)?;
            let publish_conn = match key_tx {
                Some(tx) => tx,
                None => &mut *conn,
            };
            self.publish(publish_conn, &def, &stage_name, decoded, staged)
                .await
        }
        .await;
        // The stage is gone after a swap; otherwise it is dropped here. Either
        // way the claim ends: a stage that could not be dropped is left to the
        // janitor, which can take it once no session holds its lock.
        let fate = match &result {
            Ok(r) if r.changed => StageFate::Published,
            _ => StageFate::Discarded,
        };
        if let Err(e) = stage::release(&mut *conn, &stage_name, fate).await {
            tracing::warn!(error = %e, "could not release the stage");
            stage::abandon_claims(&mut *conn).await;
            return Err(result.err().unwrap_or(e.into()));
        }
        result
    }

    /// Swaps the stage in (or finds the partition already equal to it), and
    /// answers what happened.
    async fn publish(
        &self,
        conn: &mut PgConnection,
        def: &TableDef,
        stage_name: &str,
        mut decoded: Decoded,
        staged: Staged,
    ) -> WriteResult<Receipt> {
        // An empty body still makes its table and an empty day: that day is
        // what the PUT stores.
        if self.new_table && staged.rows == 0 {
            decode::refuse_rejects_without_table(&decoded)?;
        }
        let mut content = decoded.input_hash;
        for dropped in &staged.dropped_row_hashes {
            content.remove(dropped);
        }
        let duplicates = u64::try_from(staged.dropped_row_hashes.len()).expect("fits u64");
        let rejects = decoded.rejects.take();
        let rejected = rejects.as_ref().map_or(0, RejectSpool::count);
        let receipt = Receipt {
            load_id: self.ticket.load_id,
            table: def.name.clone(),
            ds: self.ds,
            mode: MODE,
            rows_received: decoded.rows_received,
            rows_written: staged.rows,
            duplicates,
            rejected,
            rejected_by: self.ticket.load_id,
            discarded_fields: decoded.discarded_fields,
            row_count: staged.rows,
            content_sha256: content.hex(),
            changed: true,
            table_created: false,
        };
        let mut entry = receipt.entry(self.ticket, LoadStatus::Published);
        let body = BodyFacts {
            sha256: &decoded.body_sha256,
            rows_received: decoded.rows_received,
            rejected,
            content: &content,
        };
        let swap = Swap {
            def,
            new_table: self.new_table,
            distribution_default: self.distribution_default,
            ds: self.ds,
            stage_name,
            body,
            conditions: self.conditions,
            rejects,
        };
        // Timed here rather than in the store: the swap's cost as a write
        // sees it, lock waits included.
        let started = Instant::now();
        let published = publish(conn, swap, &mut entry).await?;
        let swapped = matches!(published, Published::Swapped { .. });
        self.metrics
            .swap(def.name.as_str(), swapped, started.elapsed());
        Ok(receipt.once_published(published))
    }
}

/// The answer to the body the live partition was built from, recorded in
/// the ledger (in the key's transaction, for a keyed PUT).
async fn days_own_body(
    ticket: &LoadTicket,
    ds: Period,
    live: &Current,
    conn: &mut PgConnection,
) -> WriteResult<Receipt> {
    let receipt = same_body(ticket, ds, live);
    let entry = receipt.entry(ticket, LoadStatus::Unchanged);
    ledger::insert(conn, &entry).await?;
    Ok(receipt)
}

/// How a PUT's rows are encoded: all of partition `ds`.
fn put_options(ds: Period) -> EncodeOptions {
    EncodeOptions {
        allowed: None,
        ds: Some(ds),
        row_id_scope: None,
        tombstones: false,
        presence: false,
    }
}

/// The partition was read by the grain of the table as it was when the
/// request came; a table declared meanwhile may have another.
fn check_grain(def: &TableDef, ds: Period) -> WriteResult<()> {
    if def.grain == ds.grain() {
        return Ok(());
    }
    Err(WriteError::Mode(format!(
        "table {:?} is partitioned by {}; {ds} is not one",
        def.name,
        def.grain.as_str()
    )))
}

/// The body hash covers what the bytes mean too: their format, the table
/// definition they are read against, and what becomes of bad rows.
fn body_hash_prefix(format: BodyFormat, def: &TableDef, bad_rows: BadRowPolicy) -> Sha256 {
    let mut hash = Sha256::new();
    hash.update(b"idem-body-v1\0");
    hash.update(format!("{format:?}\0{}\0", bad_rows.as_str()).as_bytes());
    hash.update(serde_json::to_vec(def).expect("a definition serializes"));
    hash.update(b"\0");
    hash
}

/// The answer when the body is the very one the live partition was built
/// from: nothing to do but say so.
fn same_body(ticket: &LoadTicket, ds: Period, live: &Current) -> Receipt {
    Receipt {
        load_id: ticket.load_id,
        table: ticket.table.clone(),
        ds,
        mode: MODE,
        rows_received: live.rows_received,
        rows_written: 0,
        duplicates: live
            .rows_received
            .saturating_sub(live.rejected)
            .saturating_sub(live.row_count),
        rejected: live.rejected,
        rejected_by: live.load_id,
        // Not decoded again: the first PUT of this body told its count.
        discarded_fields: 0,
        row_count: live.row_count,
        content_sha256: live.content_sha256.clone(),
        changed: false,
        table_created: false,
    }
}

/// What tells a body that is the live day's own: the hash the day's body
/// hash was begun with, and that hash.
fn day_body<'a>(
    live: &'a Current,
    format: BodyFormat,
    def: &TableDef,
    bad_rows: Option<BadRowPolicy>,
) -> DayBody<'a> {
    DayBody {
        hash: body_hash_prefix(format, def, bad_rows.unwrap_or(def.bad_rows)),
        body_sha256: &live.body_sha256,
    }
}

/// The table's definition as stored now (another writer changed it).
async fn stored_def(conn: &mut PgConnection, table: &TableName) -> WriteResult<TableDef> {
    catalog::table_def(conn, table)
        .await?
        .ok_or_else(|| WriteError::TableNotFound(table.clone()))
}
