//! Small POSTs, written together: many producers sending a few rows each
//! would otherwise each pay a transaction (its round trips and its commit)
//! for the work of one statement.
//!
//! A small body, decoded before any transaction, waits in one queue for all
//! tables. A few workers (`batch_workers`) take what waits, one batch
//! written at a time (the next gathers what arrives while it is written,
//! and is written while it commits), as much as fits in a batch, and
//! write it in one transaction: the keys of all its POSTs claimed by one
//! statement (a key in flight elsewhere is skipped, not waited for; a
//! completed one is handed back with its stored answer, and its POST
//! answered as a replay: a replay is a read, wherever its key was made),
//! then each table's POSTs (of one mode) by the statements of one POST,
//! tables in name order: the rows merged (each row carries its load's id,
//! which tells each POST its share); then every POST's deltas, ledger row
//! and key completion, whatever its table, in one statement; and one
//! commit. POSTs spread over many tables so share a commit as POSTs to one
//! table do. Each POST gets the receipt it would have had alone. A POST the
//! batch could not take (its key skipped, its table changed since it was
//! decoded, or the whole batch failed) is written alone, as it would have
//! been without batching: nothing of it was committed.
//!
//! A POST on a channel without an Idempotency-Key is claimed by its offset
//! instead: a batch holds at most one POST per channel (a channel's next
//! POST waits for the next batch), locks their channels (after the keys, in
//! one order) and takes each whose offset is after the committed one,
//! committing the offsets with the rows. A POST on a new channel, or whose
//! offset is not after the committed one, goes alone, where the channel is
//! made or the offset answered `committed: false`.
//!
//! Two POSTs that touch one row, or share a key, never go in one batch. The
//! queue coordinates nothing: keys, channels and partitions are locked in
//! Postgres as for a POST alone, so processes batching side by side stay
//! correct.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use chrono::Utc;
use sqlx::pool::PoolConnection;
use sqlx::Postgres;
use tokio::sync::oneshot;

use super::answer::{AnswerForm, KeyedAnswer};
use super::batch_queue::{
    with_predecoded, BatchClaim, BatchData, BatchItem, BatchOutcome, PostWritten, Queue, Waiting,
    WritingTurn, WRITING_TURN_BOUND,
};
use super::predecode::Predecoding;
use crate::channel::{ChannelCommitted, ChannelName, ChannelOffset, Offset};
use crate::idempotency::{IdempotencyKey, StoredKey, COMPLETED_STATUS};
use crate::ids::{LoadId, Principal};
use crate::names::TableName;
use crate::period::Period;
use crate::pipeline::error::{WriteError, WriteResult};
use crate::pipeline::rows::receipt::{RowsReceipt, RowsWritten};
use crate::pipeline::rows::request::PostRows;
use crate::pipeline::Pipeline;
use crate::schema::{MergeMode, TableDef};
use crate::store::channels::{commit_offsets, lock_channels, OffsetCommit};
use crate::store::idempotency::{begin_bounded_on, claim_keys, ClaimedKeys, Completion};
use crate::store::write::arrays::TupleArrays;
use crate::store::write::closing::{close_rows_writes, RowsClosing};
use crate::store::write::incoming::{fits_arrays, small_bodies};
use crate::store::write::merge::{apply_batch, LoadRows, Merged};
use crate::store::write::touched::lock_existing_partitions;

/// What became of a POST offered to a batch.
pub enum Batched {
    /// Answered: written by the batch, or found completed under its key
    /// (its stored answer replayed).
    Answered(KeyedAnswer),
    /// To be written alone (its body perhaps decoded already).
    Alone(Box<PostRows>),
}

/// A batch's POSTs by table (in name order) and mode.
type Groups<'a> = BTreeMap<(TableName, &'static str), Vec<&'a BatchData>>;

/// What a batch wrote of one table's (and mode's) POSTs, closed with the
/// other tables' at the end of the batch (see `close_rows_writes`).
struct GroupWritten<'a> {
    table: TableName,
    /// The POSTs it wrote.
    taken: Vec<&'a BatchData>,
    written: PostsWritten,
}

/// What a batch's transaction did with one of its POSTs.
enum Settled {
    Written(Box<PostWritten>),
    /// Its key was found completed: its stored answer.
    Completed(Box<StoredKey>),
    /// Not taken: it goes alone.
    Alone,
}

impl Pipeline {
    /// Writes a small POST to a declared table in a batch; hands back any
    /// other (and a small one the batch could not take) to be written alone.
    /// A small body is read and decoded here, before any transaction: a
    /// refusal is answered (and recorded) without one. The answer is stored
    /// and given in `form`.
    /// `claim` is called once the body is read (a key's fingerprint is
    /// the body's digest).
    pub(super) async fn try_batch(
        &self,
        claim: impl FnOnce() -> BatchClaim,
        rows: Box<PostRows>,
        form: &'static dyn AnswerForm,
    ) -> WriteResult<Batched> {
        let (rows, pre) = match self.predecode(rows).await? {
            Predecoding::Ready(rows, pre) => (rows, pre),
            Predecoding::Alone(rows) => return Ok(Batched::Alone(rows)),
        };
        if !fits_arrays(pre.mode, pre.decoded.maybe_repeated) {
            return Ok(Batched::Alone(with_predecoded(rows, pre)));
        }
        let item = match BatchItem::new(rows, pre, claim(), form) {
            Ok(item) => item,
            Err(rows) => return Ok(Batched::Alone(rows)),
        };
        Ok(match self.write_in_batch(item).await? {
            BatchOutcome::Written(post) => {
                Batched::Answered(KeyedAnswer::written(post.body, None, post.receipt.counts()))
            }
            BatchOutcome::Replayed(answer) => Batched::Answered(answer?),
            BatchOutcome::Alone(item) => Batched::Alone(item.alone()),
        })
    }

    /// Writes `item` in a batch, or hands it back to be written alone.
    pub(super) async fn write_in_batch(&self, item: BatchItem) -> WriteResult<BatchOutcome> {
        let queue = self.queue();
        let (reply, answer) = oneshot::channel();
        queue.lock().push_back(Waiting { item, reply });
        queue.wake.notify_one();
        // A worker answers every POST it takes, unless it died (a bug): the
        // POST's transaction, if it had begun, was rolled back with it.
        answer.await.map_err(|_| {
            WriteError::Internal(anyhow::anyhow!("a batch worker stopped without answering"))
        })
    }

    /// The queue of small POSTs, whatever their table, with its workers
    /// started.
    fn queue(&self) -> Arc<Queue> {
        let mut queue = self.batches.queue.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(queue) = &*queue {
            return queue.clone();
        }
        let started = Arc::new(Queue::default());
        // Batches written at once (`batch_workers`): while one commits,
        // another is written.
        for _ in 0..self.settings.batch_workers {
            tokio::spawn(self.clone().drain(started.clone()));
        }
        *queue = Some(started.clone());
        started
    }

    /// A worker: writes what waits, batch after batch, on a connection it
    /// keeps while batches follow each other (sqlx tests a connection given
    /// back to its pool by a round trip: one a batch, as dear as a small
    /// batch's statement). The connection goes back when nothing waits,
    /// and after a batch that failed (the pool tests it, and drops it if it
    /// is broken).
    async fn drain(self, queue: Arc<Queue>) {
        loop {
            queue.wake.notified().await;
            let mut kept: Option<PoolConnection<Postgres>> = None;
            // Until nothing waits, or another worker is writing a batch
            // (it wakes one of us when it reaches its commit).
            while let Some((batch, turn)) = queue.take() {
                let (bounded, number) = (queue.clone(), turn.number);
                let bound = tokio::spawn(async move {
                    tokio::time::sleep(WRITING_TURN_BOUND).await;
                    bounded.give_back(number);
                });
                self.run_batch(batch, turn, &mut kept).await;
                bound.abort();
            }
        }
    }

    /// Writes one batch and answers each of its POSTs.
    async fn run_batch(
        &self,
        batch: Vec<Waiting>,
        turn: WritingTurn<'_>,
        kept: &mut Option<PoolConnection<Postgres>>,
    ) {
        let items: Vec<&BatchData> = batch.iter().map(|w| &w.item.data).collect();
        let settled = match self.write_batch(&items, turn, kept).await {
            Ok(settled) => settled,
            Err(e) => {
                *kept = None;
                tracing::info!(error = %e, posts = batch.len(), "a batch failed; its POSTs go alone");
                batch.iter().map(|_| Settled::Alone).collect()
            }
        };
        for (waiting, settled) in batch.into_iter().zip(settled) {
            let outcome = match settled {
                Settled::Written(post) => BatchOutcome::Written(post),
                Settled::Completed(stored) => {
                    let fingerprint = waiting.item.data.fingerprint().unwrap_or_default();
                    BatchOutcome::Replayed(KeyedAnswer::replay(fingerprint, *stored))
                }
                Settled::Alone => BatchOutcome::Alone(Box::new(waiting.item)),
            };
            let _ = waiting.reply.send(outcome);
        }
    }

    /// The batch's transaction; what became of each POST: written, found
    /// completed (a replay: no write of its own), or left to go alone. Its
    /// POSTs' keys are claimed at once, then each table's (and mode's) POSTs
    /// are written by the statements of one POST, tables in name order; one
    /// commit for all.
    async fn write_batch(
        &self,
        items: &[&BatchData],
        turn: WritingTurn<'_>,
        kept: &mut Option<PoolConnection<Postgres>>,
    ) -> WriteResult<Vec<Settled>> {
        let claimed_at = Utc::now();
        // Each token with a POST in the batch has one of its turns taken.
        let principals: Vec<&Principal> = items.iter().map(|item| &item.principal).collect();
        let _slot = match self.load_slots.acquire(&principals, Duration::ZERO).await {
            Ok(slot) => slot,
            // Not waited for holding a connection: the writes that hold
            // the turns may be waiting for one.
            Err(_) => {
                *kept = None;
                self.load_slots
                    .acquire(&principals, self.settings.load_wait())
                    .await?
            }
        };
        let conn = match kept {
            Some(conn) => conn,
            None => kept.insert(self.store.acquire().await?),
        };
        let mut tx = begin_bounded_on(conn, self.settings.idempotency_wait()).await?;
        let keys: Vec<(&Principal, &IdempotencyKey)> =
            items.iter().filter_map(|item| item.key()).collect();
        let mut tables: Vec<&TableName> = items.iter().map(|item| &item.pre.def.name).collect();
        tables.sort();
        tables.dedup();
        let mut keys = claim_keys(&mut tx, &keys, &tables).await?;
        for stored in keys.completed.values() {
            self.store.remember_completed(stored.clone());
        }
        let groups = self.groups(items, &keys);
        let locked = lock_partitions_at_once(&mut tx, &groups, &keys.claimed).await?;
        let mut written = Vec::new();
        for ((table, _), group) in groups {
            let locked = locked.get(&table).unwrap_or(&NONE_LOCKED);
            let group = self
                .write_group(&mut tx, group, &keys.claimed, locked)
                .await?;
            written.extend(group);
        }
        if written.is_empty() {
            // Nothing written: the transaction ends without a commit to wait for.
            return Ok(settle(items, &mut keys.completed, HashMap::new()));
        }
        let completions = self.close(&mut tx, &written, claimed_at).await?;
        // The next batch is written while this one commits.
        drop(turn);
        tx.commit().await.map_err(crate::store::StoreError::from)?;
        for key in completions {
            self.store.remember_completed(key);
        }
        let mut posts = HashMap::new();
        for group in written {
            self.metrics
                .batch(group.table.as_str(), group.written.len());
            posts.extend(group.written.into_iter().map(|(id, (rows, body))| {
                let receipt = rows.receipt;
                (id, PostWritten { receipt, body })
            }));
        }
        Ok(settle(items, &mut keys.completed, posts))
    }

    /// The deltas, ledger rows and key completions of every table's
    /// written POSTs, in one statement (one round trip a batch, not one a
    /// table); their keys as stored once the batch commits.
    async fn close(
        &self,
        tx: &mut sqlx::PgConnection,
        written: &[GroupWritten<'_>],
        claimed_at: chrono::DateTime<Utc>,
    ) -> WriteResult<Vec<StoredKey>> {
        let closings: Vec<RowsClosing<'_>> = written
            .iter()
            .flat_map(|group| self.closings(group))
            .collect();
        close_rows_writes(tx, &closings).await?;
        Ok(closings
            .iter()
            .filter_map(|c| c.key.as_ref())
            .map(|key| key.stored(claimed_at))
            .collect())
    }

    /// The batch's POSTs by table (in name order) and mode, each decoded for
    /// its table's definition as it is now; a POST decoded for another goes
    /// alone (decoded again there), and its table's definition is forgotten.
    fn groups<'a>(&self, items: &[&'a BatchData], keys: &ClaimedKeys) -> Groups<'a> {
        let mut groups: BTreeMap<_, Vec<&BatchData>> = BTreeMap::new();
        for item in items {
            let def = &item.pre.def;
            if keys.defs.get(def.name.as_str()) != Some(def) {
                self.definitions.forget(&def.name);
                continue;
            }
            let group = (def.name.clone(), item.pre.mode.as_str());
            groups.entry(group).or_default().push(*item);
        }
        groups
    }

    /// One table's (and mode's) POSTs of a batch, written in its
    /// transaction: their rows and their channels' offsets (their ledger
    /// rows and keys are written with the other tables', by `close`);
    /// `None` when none of them is written here.
    async fn write_group<'a>(
        &self,
        tx: &mut sqlx::PgConnection,
        items: Vec<&'a BatchData>,
        claimed: &HashSet<(Principal, String)>,
        locked: &BTreeSet<Period>,
    ) -> WriteResult<Option<GroupWritten<'a>>> {
        let (def, mode) = (&items[0].pre.def, items[0].pre.mode);
        let (open, def_now) = open_channels(tx, &def.name, &items).await?;
        // A wait for a channel may have outlasted a change of the table
        // (a POST alone on that channel may have evolved it).
        if !open.is_empty() && def_now.as_ref() != Some(def) {
            self.definitions.forget(&def.name);
            return Ok(None);
        }
        let taken = taken_items(&items, claimed, &open);
        if taken.is_empty() {
            return Ok(None);
        }
        let (loads, arrays, tombstones) = gather(def, mode, &taken)?;
        let merged = apply_batch(tx, def, mode, &loads, arrays, tombstones, locked).await?;
        let written = receipts(def, mode, &taken, merged, &open);
        commit_channels(tx, &taken, &written).await?;
        Ok(Some(GroupWritten {
            table: def.name.clone(),
            taken,
            written,
        }))
    }

    /// Each POST's deltas, ledger row and key completion, of one table's
    /// written POSTs.
    fn closings<'a>(&self, group: &'a GroupWritten<'_>) -> Vec<RowsClosing<'a>> {
        let GroupWritten { taken, written, .. } = group;
        taken
            .iter()
            .map(|item| {
                let pre = &item.pre;
                let load_id = pre.ticket.load_id;
                let (RowsWritten { receipt, deltas }, body) = &written[&load_id];
                RowsClosing {
                    load_id,
                    deltas,
                    entry: receipt.entry(&pre.ticket),
                    key: match &item.claim {
                        BatchClaim::Key { key, fingerprint } => Some(Completion {
                            principal: &item.principal,
                            key,
                            fingerprint,
                            load_id: Some(load_id),
                            status: COMPLETED_STATUS,
                            body,
                            etag: None,
                            retention: self.settings.idempotency_retention(),
                        }),
                        BatchClaim::Channel(_) => None,
                    },
                }
            })
            .collect()
    }
}

/// A table none of whose partitions the batch locked at once.
static NONE_LOCKED: BTreeSet<Period> = BTreeSet::new();

/// The partitions the claimed POSTs of a batch over several tables touch,
/// locked at once, by table: one statement, not one a table (see
/// `lock_existing_partitions`: up to the first that does not exist). None
/// when the batch writes one table (its one lock statement is as dear), or
/// holds a channel's POST (a channel is locked before its table's
/// partitions, and a channel's writer alone locks in that order).
async fn lock_partitions_at_once(
    tx: &mut sqlx::PgConnection,
    groups: &Groups<'_>,
    claimed: &HashSet<(Principal, String)>,
) -> WriteResult<BTreeMap<TableName, BTreeSet<Period>>> {
    let items = || groups.values().flatten();
    let tables = groups
        .keys()
        .map(|(table, _)| table)
        .collect::<BTreeSet<_>>();
    if tables.len() < 2 || items().any(|item| item.channel().is_some()) {
        return Ok(BTreeMap::new());
    }
    let mut wanted = BTreeSet::new();
    for item in items() {
        let Some((principal, key)) = item.key() else {
            continue;
        };
        if claimed.contains(&(principal.clone(), key.to_string())) {
            let table = &item.pre.def.name;
            wanted.extend(item.pre.decoded.periods.iter().map(|&ds| (table, ds)));
        }
    }
    let wanted: Vec<(&TableName, Period)> = wanted.into_iter().collect();
    let count = lock_existing_partitions(tx, &wanted).await?;
    let mut locked: BTreeMap<TableName, BTreeSet<Period>> = BTreeMap::new();
    for (table, ds) in &wanted[..count] {
        locked.entry((*table).clone()).or_default().insert(*ds);
    }
    Ok(locked)
}

/// What became of each of the batch's POSTs: its receipt and answer when
/// written, its key's stored answer when found completed, else it goes
/// alone.
fn settle(
    items: &[&BatchData],
    completed: &mut HashMap<(Principal, String), StoredKey>,
    mut posts: HashMap<LoadId, PostWritten>,
) -> Vec<Settled> {
    items
        .iter()
        .map(|item| {
            if let Some(post) = posts.remove(&item.pre.ticket.load_id) {
                return Settled::Written(Box::new(post));
            }
            let stored = item.key().and_then(|(principal, key)| {
                completed.remove(&(principal.clone(), key.to_string()))
            });
            match stored {
                Some(stored) => Settled::Completed(Box::new(stored)),
                None => Settled::Alone,
            }
        })
        .collect()
}

/// The POSTs the batch writes: those whose keys it claimed, and those on
/// channels it opened.
fn taken_items<'a>(
    items: &[&'a BatchData],
    claimed: &HashSet<(Principal, String)>,
    open: &HashMap<LoadId, Offset>,
) -> Vec<&'a BatchData> {
    items
        .iter()
        .copied()
        .filter(|item| match item.key() {
            Some((principal, key)) => claimed.contains(&(principal.clone(), key.to_string())),
            None => open.contains_key(&item.pre.ticket.load_id),
        })
        .collect()
}

/// Each written POST's receipt and deltas, and its answer in its form (as
/// its key stores it and as it is sent).
type PostsWritten = HashMap<LoadId, (RowsWritten, serde_json::Value)>;

/// Each taken POST's receipt (with its channel's offset, on a channel),
/// deltas and answer, from what the batch's statements did for it.
fn receipts(
    def: &TableDef,
    mode: MergeMode,
    taken: &[&BatchData],
    mut merged: std::collections::BTreeMap<LoadId, Merged>,
    open: &HashMap<LoadId, Offset>,
) -> PostsWritten {
    let mut written = HashMap::new();
    for item in taken {
        let pre = &item.pre;
        let mut one = merged.remove(&pre.ticket.load_id).unwrap_or_default();
        let deltas = std::mem::take(&mut one.deltas);
        let mut receipt = RowsReceipt::new(&pre.ticket, def, mode, &pre.decoded, one);
        receipt.channel = item.channel().map(|channel| ChannelCommitted {
            name: channel.name.clone(),
            offset: open[&pre.ticket.load_id].clone(),
        });
        let body = item.form.rows(&receipt);
        written.insert(pre.ticket.load_id, (RowsWritten { receipt, deltas }, body));
    }
    written
}

/// The batch's channel POSTs it may write (one per channel; see
/// `Queue::take`), with their offsets: those after their channel's
/// committed offset, the channels locked here. A POST whose offset is not
/// after it, or whose channel is new, goes alone and is answered there.
/// With them, the table's definition as it is once they are held (when any
/// is).
async fn open_channels(
    tx: &mut sqlx::PgConnection,
    table: &TableName,
    items: &[&BatchData],
) -> WriteResult<(HashMap<LoadId, Offset>, Option<TableDef>)> {
    let on_channels: Vec<(&BatchData, &ChannelOffset)> = items
        .iter()
        .filter_map(|item| Some((*item, item.channel()?)))
        .collect();
    if on_channels.is_empty() {
        return Ok((HashMap::new(), None));
    }
    let mut names: Vec<(&Principal, &ChannelName)> = on_channels
        .iter()
        .map(|(item, channel)| (&item.principal, &channel.name))
        .collect();
    names.sort();
    debug_assert!(
        names.windows(2).all(|w| w[0] != w[1]),
        "a batch holds one POST per channel"
    );
    let locked = lock_channels(tx, &names, table).await?;
    let committed: HashMap<_, _> = names.into_iter().zip(locked.channels).collect();
    let mut open = HashMap::new();
    for (item, channel) in on_channels {
        let name = (&item.principal, &channel.name);
        let Some(Some((kind, committed))) = committed.get(&name) else {
            continue;
        };
        match channel.offset_as(*kind) {
            Ok(offset) if offset > *committed => {
                open.insert(item.pre.ticket.load_id, offset);
            }
            _ => {}
        }
    }
    Ok((open, locked.def))
}

/// Commits the offsets of the batch's channel POSTs, with their rows.
async fn commit_channels(
    tx: &mut sqlx::PgConnection,
    taken: &[&BatchData],
    written: &PostsWritten,
) -> WriteResult<()> {
    let commits: Vec<OffsetCommit<'_>> = taken
        .iter()
        .filter_map(|item| {
            let load_id = item.pre.ticket.load_id;
            let receipt = &written[&load_id].0.receipt;
            let committed = receipt.channel.as_ref()?;
            Some(OffsetCommit {
                principal: &item.principal,
                name: &committed.name,
                offset: &committed.offset,
                table: &receipt.table,
                load_id,
            })
        })
        .collect();
    if !commits.is_empty() {
        commit_offsets(tx, &commits).await?;
    }
    Ok(())
}

/// The taken POSTs' rows as one set of arrays, and each one's share.
fn gather(
    def: &TableDef,
    mode: MergeMode,
    taken: &[&BatchData],
) -> WriteResult<(Vec<LoadRows>, TupleArrays, u64)> {
    let loads = taken
        .iter()
        .map(|item| LoadRows {
            load_id: item.pre.ticket.load_id,
            rows: item.row_count(),
            periods: item.pre.decoded.periods.clone(),
            additions: Some(item.pre.decoded.additions.clone()),
        })
        .collect();
    let tombstones = taken.iter().map(|item| item.pre.decoded.tombstones).sum();
    let copies: Vec<&[u8]> = taken.iter().map(|item| &item.pre.copy[..]).collect();
    Ok((loads, small_bodies(def, mode, &copies)?, tombstones))
}
