//! A write under an `Idempotency-Key` (IETF httpapi draft "The
//! Idempotency-Key HTTP Header Field"):
//!
//! - first use: the write runs in the transaction that claimed the key, and
//!   the key, the request's fingerprint and the response are stored in it;
//! - the same key and request again: the stored response, replayed;
//! - the same key, another request: 422;
//! - the same key while the first is running: wait for it (bounded), then
//!   replay; past the bound, 409 with `Retry-After`.
//!
//! Only completed writes are stored. A refusal (4xx) or a failure (5xx)
//! rolls the key back with the write, so the client can fix the request and
//! retry under the same key.
//!
//! A PUT's record answers only while its partition still holds the content
//! it recorded: a PUT describes the whole day, so one sent again after
//! another load replaced the day (a revert to an earlier file) is applied
//! again, under its key's lock, and its key then records this newest run.

use chrono::Utc;
use sqlx::pool::PoolConnection;
use sqlx::{PgConnection, Postgres, Transaction};

use super::answer::{AnswerForm, KeyedAnswer};
use super::batch::Batched;
use super::batch_queue::BatchClaim;
use super::channel::Gated;
use crate::idempotency::{IdempotencyKey, KeyedRequest, OnCompleted, StoredKey};
use crate::ids::LoadId;
use crate::ingest::ContentDelta;
use crate::metrics::RowCounts;
use crate::names::TableName;
use crate::period::Period;
use crate::pipeline::day::put::PutConnections;
use crate::pipeline::day::request::{self, PutPartition};
use crate::pipeline::error::{WriteError, WriteResult};
use crate::pipeline::intake::body::{drain, BodyDigest, BodySource};
use crate::pipeline::intake::ticket::LoadTicket;
use crate::pipeline::intake::turns;
use crate::pipeline::rows::receipt::ReplayWritten;
use crate::pipeline::rows::receipt::RowsWritten;
use crate::pipeline::rows::request::PostRows;
use crate::pipeline::rows::request::ReplayRejects;
use crate::pipeline::Pipeline;
use crate::store::idempotency::{complete_key, renew_key, unbound_lock_waits, Claim, Completion};
use crate::store::ledger::LoadEntry;
use crate::store::write::closing::{close_rows_writes, RowsClosing};
use crate::store::write::publish::{current, Current};
use crate::store::write::stage::{self, StageFate};

/// A write that runs under an Idempotency-Key.
pub enum KeyedWrite {
    Rows(Box<PostRows>),
    Partition(PutPartition),
    Replay(ReplayRejects),
}

/// What a keyed write leaves for its commit besides its key's answer.
enum Recorded {
    /// A write that merged rows: its deltas and ledger row.
    Rows(RowsWritten),
    Replay(ReplayWritten),
    /// A PUT, whose publish recorded its load itself.
    Published,
    /// A POST on a channel whose offset was committed already: no load.
    Skipped,
}

impl Recorded {
    /// The ledger row and the partitions' deltas of a write that merged rows.
    fn merged<'a>(
        &'a self,
        ticket: &'a LoadTicket,
    ) -> Option<(LoadEntry<'a>, &'a [(Period, ContentDelta)])> {
        match self {
            Recorded::Rows(rows) => Some((rows.receipt.entry(ticket), &rows.deltas)),
            Recorded::Replay(replay) => Some((replay.receipt.entry(ticket), &replay.deltas)),
            Recorded::Published | Recorded::Skipped => None,
        }
    }

    /// The load its key names: none when nothing was loaded.
    fn load_id(&self, ticket: &LoadTicket) -> Option<LoadId> {
        match self {
            Recorded::Skipped => None,
            _ => Some(ticket.load_id),
        }
    }
}

impl KeyedWrite {
    fn body(&mut self) -> &mut BodySource {
        match self {
            KeyedWrite::Rows(r) => &mut r.body,
            KeyedWrite::Partition(p) => &mut p.body,
            KeyedWrite::Replay(r) => &mut r.body,
        }
    }

    fn ticket(&self, key: &IdempotencyKey) -> LoadTicket {
        match self {
            KeyedWrite::Rows(rows) => rows.ticket(),
            KeyedWrite::Partition(put) => put.ticket(Some(key.as_str())),
            KeyedWrite::Replay(replay) => replay.ticket(),
        }
    }
}

impl Pipeline {
    /// Runs `write` under the request's Idempotency-Key (see the module's
    /// doc): a replay when the key is completed, otherwise the write in the
    /// transaction that claims the key, which stores its answer in `form`.
    pub async fn run_keyed(
        &self,
        req: KeyedRequest,
        mut write: KeyedWrite,
        form: &'static dyn AnswerForm,
    ) -> WriteResult<KeyedAnswer> {
        let digest = write
            .body()
            .digest
            .clone()
            .expect("a keyed body is digested");
        // Most repeats find their key completed: answer them without a
        // transaction. A POST's look-up also brings its table's definition.
        let day = write_day(&write);
        let stored = match (&mut write, day) {
            (KeyedWrite::Rows(rows), _) => self.look_up_rows_key(&req, rows).await?,
            (_, Some(day)) => self.look_up_put_key(&req, day).await?,
            _ => self.store.completed_key(&req.principal, &req.key).await?,
        };
        if let Some(stored) = stored {
            return replay(&req, &mut write, &digest, stored).await;
        }
        let write = match write {
            // A POST on a channel under a key is written alone: a batch
            // gates a POST by its key or by its channel, not by both.
            KeyedWrite::Rows(rows) if rows.channel.is_none() => {
                let claim = || BatchClaim::Key {
                    key: req.key.clone(),
                    fingerprint: req.fingerprint(&digest.hex()),
                };
                match self.try_batch(claim, rows, form).await? {
                    Batched::Answered(answer) => return Ok(answer),
                    Batched::Alone(rows) => KeyedWrite::Rows(rows),
                }
            }
            other => other,
        };
        self.write_alone(req, write, digest, form).await
    }

    /// A POST's key, completed, if it is; and its table's definition. With
    /// batching, a key this process does not remember and a definition it
    /// does cost no read of their own: the batch's claim finds a key
    /// completed elsewhere (and answers its stored response), and checks
    /// the definition.
    async fn look_up_rows_key(
        &self,
        req: &KeyedRequest,
        rows: &mut PostRows,
    ) -> WriteResult<Option<StoredKey>> {
        let (principal, key) = (&req.principal, &req.key);
        if self.settings.batch_writes {
            if let Some(stored) = self.store.remembered_key(principal, key) {
                return Ok(Some(stored));
            }
            if let Some(def) = self.definitions.get(&rows.table) {
                rows.known_def = Some(def);
                return Ok(None);
            }
        }
        let (stored, def) = self
            .store
            .completed_key_and_table(principal, key, &rows.table)
            .await?;
        if let Some(def) = &def {
            self.definitions.remember(def);
        }
        rows.known_def = def;
        Ok(stored)
    }

    /// A PUT's key, completed, if its record stands (see `record_stands`).
    /// The partition is read before the key, and the key from the table:
    /// a rerun under the key commits the key's new record with the content
    /// it puts back, so a key read after the partition is never older than
    /// the content it is compared with (read the other way round, or from
    /// a memory that another process's rerun left behind, a repeat could
    /// replay the record of a load the rerun replaced).
    async fn look_up_put_key(
        &self,
        req: &KeyedRequest,
        (table, ds): (TableName, Period),
    ) -> WriteResult<Option<StoredKey>> {
        let mut conn = self.store.acquire().await?;
        let live = current(&mut conn, &table, ds).await?;
        let stored = self
            .store
            .completed_key_now(&mut conn, &req.principal, &req.key)
            .await?;
        Ok(stored.filter(|stored| record_stands((&table, ds), stored, live.as_ref())))
    }

    /// The write in a transaction of its own, which claims its key.
    async fn write_alone(
        &self,
        req: KeyedRequest,
        mut write: KeyedWrite,
        digest: BodyDigest,
        form: &'static dyn AnswerForm,
    ) -> WriteResult<KeyedAnswer> {
        // No later than the database's clock will start the key's retention.
        let claimed_at = Utc::now();
        self.body_arrived(&req, &mut write).await?;
        let _slot = self
            .load_slots
            .acquire(&[&req.principal], self.settings.load_wait())
            .await?;
        let stages_a_day = matches!(write, KeyedWrite::Partition(_));
        let mut stage_conn = self.stage_connection(stages_a_day).await?;
        let (mut tx, rerun) = match self.claim(&req, &mut write).await? {
            Claimed::Write(tx, rerun) => (tx, rerun),
            Claimed::Replay(stored) => {
                drop(stage_conn);
                return replay(&req, &mut write, &digest, stored).await;
            }
        };
        let ticket = write.ticket(&req.key);
        let written = self
            .write_claimed(write, &ticket, &mut tx, stage_conn.as_deref_mut(), form)
            .await;
        let (answer, recorded) = match written {
            Ok(written) => written,
            Err(e) => {
                // The key goes with the write, so that the fixed request can use it.
                let _ = tx.rollback().await;
                drop(stage_conn);
                ticket.record_refusal(&self.store, &e).await;
                return Err(e);
            }
        };
        let fingerprint = req.fingerprint(&digest.hex());
        if rerun.is_some_and(|recorded| recorded != fingerprint) {
            return self.refuse_rerun(tx, stage_conn, &ticket).await;
        }
        let completion = Completion {
            principal: &req.principal,
            key: &req.key,
            fingerprint: &fingerprint,
            load_id: recorded.load_id(&ticket),
            status: answer.status,
            body: answer.body.as_stored(),
            etag: answer.etag.as_deref(),
            retention: self.settings.idempotency_retention(),
        };
        complete(&mut tx, &ticket, &completion, &recorded).await?;
        tx.commit().await.map_err(crate::store::StoreError::from)?;
        self.store.remember_completed(completion.stored(claimed_at));
        Ok(answer)
    }

    /// Waits for the first of the write's body (see `turns::arrived`); a
    /// body that does not come is refused, and the refusal recorded.
    async fn body_arrived(&self, req: &KeyedRequest, write: &mut KeyedWrite) -> WriteResult<()> {
        let body = write.body();
        let reader = std::mem::replace(&mut body.reader, Box::new(tokio::io::empty()));
        match turns::arrived(reader).await {
            Ok(reader) => {
                body.reader = reader;
                Ok(())
            }
            Err(e) => {
                write.ticket(&req.key).record_refusal(&self.store, &e).await;
                Err(e)
            }
        }
    }

    /// The second connection a PUT stages its day on. Every connection the
    /// write needs is taken before the key is claimed: requests waiting for
    /// the key hold connections while they wait, and must not starve the
    /// one they wait for.
    async fn stage_connection(
        &self,
        stages_a_day: bool,
    ) -> WriteResult<Option<PoolConnection<Postgres>>> {
        Ok(match stages_a_day {
            true => Some(self.store.acquire().await?),
            false => None,
        })
    }

    /// Claims the write's key (waiting, bounded, for a request in flight
    /// with it). A POST takes the table's definition its claim read; a PUT
    /// lifts the bound on its other lock waits (its swap waits for readers).
    /// A PUT whose key is completed holds it while it checks that the key's
    /// record stands; if not, it runs again under the key (see the module's
    /// doc), with the fingerprint its body must have.
    async fn claim(&self, req: &KeyedRequest, write: &mut KeyedWrite) -> WriteResult<Claimed> {
        let wait = self.settings.idempotency_wait();
        let retention = self.settings.idempotency_retention();
        let (table, on_completed) = match &*write {
            KeyedWrite::Rows(rows) => (Some(&rows.table), OnCompleted::Release),
            KeyedWrite::Partition(_) => (None, OnCompleted::Hold),
            KeyedWrite::Replay(_) => (None, OnCompleted::Release),
        };
        let claim = self
            .store
            .claim_key(
                &req.principal,
                &req.key,
                wait,
                table,
                retention,
                on_completed,
            )
            .await?;
        let (mut tx, def, rerun) = match claim {
            Claim::Fresh(tx, def) => (tx, def, None),
            Claim::Completed(stored) => return Ok(Claimed::Replay(stored)),
            Claim::Held(mut tx, stored) => {
                if held_record_stands(write_day(write), &stored, &mut tx).await? {
                    // Let the key go before the replay reads the body.
                    tx.rollback()
                        .await
                        .map_err(crate::store::StoreError::from)?;
                    return Ok(Claimed::Replay(stored));
                }
                renew_key(&mut tx, &req.principal, &req.key, retention).await?;
                (tx, None, Some(stored.fingerprint))
            }
        };
        match write {
            KeyedWrite::Rows(rows) => rows.known_def = def,
            KeyedWrite::Partition(_) => unbound_lock_waits(&mut tx).await?,
            KeyedWrite::Replay(_) => {}
        }
        Ok(Claimed::Write(tx, rerun))
    }

    /// A PUT run again under its key whose body is not the key's request:
    /// refused as any reuse of a key, and nothing it did stays (its swap
    /// rolls back with the key's transaction, and its stage is dropped).
    async fn refuse_rerun(
        &self,
        tx: Transaction<'static, Postgres>,
        stage_conn: Option<PoolConnection<Postgres>>,
        ticket: &LoadTicket,
    ) -> WriteResult<KeyedAnswer> {
        let _ = tx.rollback().await;
        if let Some(mut conn) = stage_conn {
            let name = stage::staging_name(ticket.load_id);
            if let Err(e) = stage::release(&mut conn, &name, StageFate::Discarded).await {
                tracing::warn!(error = %e, "could not drop the stage; the janitor will");
            }
        }
        let refused = WriteError::KeyReused;
        ticket.record_refusal(&self.store, &refused).await;
        Err(refused)
    }

    /// The write itself, in the transaction that holds its key, its answer
    /// in `form`, and what is left to record before the commit.
    async fn write_claimed(
        &self,
        write: KeyedWrite,
        ticket: &LoadTicket,
        tx: &mut PgConnection,
        stage_conn: Option<&mut PgConnection>,
        form: &dyn AnswerForm,
    ) -> WriteResult<(KeyedAnswer, Recorded)> {
        let ((body, etag, counts), recorded) = match write {
            KeyedWrite::Rows(rows) => self.rows_claimed(*rows, ticket, tx, form).await?,
            KeyedWrite::Replay(replay) => {
                let written = self.replay_rejects(replay, ticket, tx).await?;
                let receipt = &written.receipt;
                let answer = (form.replay(receipt), None, receipt.counts());
                (answer, Recorded::Replay(written))
            }
            KeyedWrite::Partition(put) => {
                let conns = PutConnections {
                    stage: stage_conn.expect("a PUT's stage connection is taken first"),
                    key_tx: Some(tx),
                };
                let receipt = self.replace_partition(put, ticket, conns).await?;
                let etag = Some(receipt.etag().to_string());
                let answer = (form.partition(&receipt), etag, receipt.counts());
                (answer, Recorded::Published)
            }
        };
        let answer = KeyedAnswer::written(body, etag, counts);
        Ok((answer, recorded))
    }

    /// A POST in the transaction that holds its key (behind its channel's
    /// gate, when it has a channel).
    async fn rows_claimed(
        &self,
        rows: PostRows,
        ticket: &LoadTicket,
        tx: &mut PgConnection,
        form: &dyn AnswerForm,
    ) -> WriteResult<(ClaimedAnswer, Recorded)> {
        match self.write_gated(rows, ticket, tx).await? {
            Gated::Written(written) => {
                let receipt = &written.receipt;
                let answer = (form.rows(receipt), None, receipt.counts());
                Ok((answer, Recorded::Rows(written)))
            }
            // The key records the skip: its body is read for the
            // fingerprint, under the key's lock.
            Gated::Skipped(skipped, mut body) => {
                drain(&mut body).await?;
                let answer = (form.channel_skipped(&skipped), None, RowCounts::default());
                Ok((answer, Recorded::Skipped))
            }
        }
    }
}

/// A keyed write's answer body, its `ETag` and what it did.
type ClaimedAnswer = (serde_json::Value, Option<String>, RowCounts);

/// What claiming a key came to: the write to run in the key's transaction
/// (with, when it runs again under a completed key, the fingerprint that
/// key recorded), or a completed key's record to replay.
enum Claimed {
    Write(Transaction<'static, Postgres>, Option<String>),
    Replay(StoredKey),
}

/// Whether the completed key a claim holds answers the request: always
/// for a POST (its rows were written once, as the key promises); for a
/// PUT, see `record_stands`, its partition read in the claim's transaction.
async fn held_record_stands(
    day: Option<(TableName, Period)>,
    stored: &StoredKey,
    tx: &mut PgConnection,
) -> WriteResult<bool> {
    let Some((table, ds)) = day else {
        return Ok(true);
    };
    let live = current(tx, &table, ds).await?;
    Ok(record_stands((&table, ds), stored, live.as_ref()))
}

/// The partition a PUT replaces.
fn write_day(write: &KeyedWrite) -> Option<(TableName, Period)> {
    match write {
        KeyedWrite::Partition(put) => Some((put.table.clone(), put.ds)),
        _ => None,
    }
}

/// Whether a completed key's record answers a PUT: a record of another
/// request always does (its fingerprint refuses this one); a record of a
/// PUT of this partition, while the partition holds the content it names.
fn record_stands(
    (table, ds): (&TableName, Period),
    stored: &StoredKey,
    live: Option<&Current>,
) -> bool {
    let receipt = stored.response_body.json();
    let same_partition = receipt["mode"].as_str() == Some(request::MODE)
        && receipt["table"].as_str() == Some(table.as_str())
        && receipt["ds"].as_str() == Some(ds.label().as_str());
    let recorded = stored.response_etag.as_deref().filter(|_| same_partition);
    match recorded {
        None => true,
        Some(content) => live.is_some_and(|live| live.content_sha256 == content),
    }
}

/// Stores the key's answer, and a merge's deltas and ledger row with it.
async fn complete(
    tx: &mut PgConnection,
    ticket: &LoadTicket,
    completion: &Completion<'_>,
    recorded: &Recorded,
) -> WriteResult<()> {
    match recorded.merged(ticket) {
        Some((entry, deltas)) => {
            let closing = RowsClosing {
                load_id: ticket.load_id,
                deltas,
                entry,
                key: Some(completion.clone()),
            };
            close_rows_writes(tx, &[closing]).await?;
        }
        None => complete_key(tx, completion).await?,
    }
    Ok(())
}

/// The stored answer of a completed key, if this is the same request. The
/// body must be read to know whether it is.
async fn replay(
    req: &KeyedRequest,
    write: &mut KeyedWrite,
    digest: &BodyDigest,
    stored: StoredKey,
) -> WriteResult<KeyedAnswer> {
    drain(&mut write.body().reader).await?;
    KeyedAnswer::replay(&req.fingerprint(&digest.hex()), stored)
}
