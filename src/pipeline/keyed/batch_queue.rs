//! What the batches of small POSTs are made of (see `batch`): a POST
//! ready for a batch (its body decoded, what claims it, its rows' ids), the
//! one queue they wait in, and how a batch is taken from it: as much as fits,
//! never two POSTs that share a key or a row, one batch written at a time.

use std::collections::{HashSet, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::{oneshot, Notify};

use super::answer::{AnswerForm, KeyedAnswer};
use crate::channel::ChannelOffset;
use crate::idempotency::IdempotencyKey;
use crate::ids::Principal;
use crate::pipeline::error::WriteResult;
use crate::pipeline::rows::receipt::RowsReceipt;
use crate::pipeline::rows::request::{PostRows, Predecoded};
use crate::store::write::incoming::row_id_prefixes;

/// Most POSTs in one batch.
const MAX_POSTS: usize = 64;
/// Most rows in one batch (a single POST may bring more, and goes alone in
/// its batch).
const MAX_ROWS: u64 = 10_000;

/// A POST ready for a batch.
pub struct BatchItem {
    /// The request (its body read already), to be written alone if the
    /// batch cannot take it.
    rows: Box<PostRows>,
    pub(super) data: BatchData,
}

/// What keeps a POST in a batch from being written twice.
pub enum BatchClaim {
    /// Its Idempotency-Key and the request's fingerprint.
    Key {
        key: IdempotencyKey,
        fingerprint: String,
    },
    /// Its channel's offset (a POST on a channel without a key).
    Channel(Box<ChannelOffset>),
}

/// What a batch needs of a POST.
pub(super) struct BatchData {
    pub(super) principal: Principal,
    pub(super) claim: BatchClaim,
    /// The form its key's answer is stored in.
    pub(super) form: &'static dyn AnswerForm,
    /// Its body decoded, the COPY data of its rows included.
    pub(super) pre: Box<Predecoded>,
    /// The first 16 bytes of each row's id (one per row): two POSTs sharing
    /// one are not batched together.
    row_ids: Vec<u128>,
}

/// A POST a batch wrote: its receipt, and its answer in its form (as its
/// key stores it).
pub struct PostWritten {
    pub receipt: RowsReceipt,
    pub body: serde_json::Value,
}

/// `rows` with its body decoded already, to be written alone.
pub(super) fn with_predecoded(mut rows: Box<PostRows>, pre: Box<Predecoded>) -> Box<PostRows> {
    rows.predecoded = Some(pre);
    rows
}

pub enum BatchOutcome {
    Written(Box<PostWritten>),
    /// Its key was found completed: the stored answer, or the refusal of
    /// another request under that key.
    Replayed(WriteResult<KeyedAnswer>),
    /// Not written; nothing of it was committed.
    Alone(Box<BatchItem>),
}

impl BatchItem {
    /// `rows` and its body decoded already, as a batch takes them; or `rows`
    /// back (with the decoded body) when its rows cannot go in a batch.
    pub fn new(
        rows: Box<PostRows>,
        pre: Box<Predecoded>,
        claim: BatchClaim,
        form: &'static dyn AnswerForm,
    ) -> Result<Self, Box<PostRows>> {
        let Ok(row_ids) = row_id_prefixes(&pre.def, pre.mode, &pre.copy) else {
            return Err(with_predecoded(rows, pre));
        };
        let data = BatchData {
            principal: rows.principal.clone(),
            claim,
            form,
            pre,
            row_ids,
        };
        Ok(BatchItem { rows, data })
    }

    /// The request, to be written alone.
    pub fn alone(self) -> Box<PostRows> {
        with_predecoded(self.rows, self.data.pre)
    }
}

impl BatchData {
    /// Its Idempotency-Key, if it has one.
    pub(super) fn key(&self) -> Option<(&Principal, &IdempotencyKey)> {
        match &self.claim {
            BatchClaim::Key { key, .. } => Some((&self.principal, key)),
            BatchClaim::Channel(_) => None,
        }
    }

    /// What no two POSTs of one batch may share: a principal's key, or its
    /// channel (a channel's next POST waits for the next batch).
    pub(super) fn claim_id(&self) -> (Principal, String) {
        match &self.claim {
            BatchClaim::Key { key, .. } => (self.principal.clone(), key.to_string()),
            BatchClaim::Channel(channel) => (self.principal.clone(), format!("\0{}", channel.name)),
        }
    }

    /// The request's fingerprint, if it is claimed by its key.
    pub(super) fn fingerprint(&self) -> Option<&str> {
        match &self.claim {
            BatchClaim::Key { fingerprint, .. } => Some(fingerprint),
            BatchClaim::Channel(_) => None,
        }
    }

    /// Its channel, if it is claimed by one.
    pub(super) fn channel(&self) -> Option<&ChannelOffset> {
        match &self.claim {
            BatchClaim::Channel(channel) => Some(channel),
            BatchClaim::Key { .. } => None,
        }
    }

    pub(super) fn row_count(&self) -> u64 {
        u64::try_from(self.row_ids.len()).expect("a count fits u64")
    }
}

pub(super) struct Waiting {
    pub(super) item: BatchItem,
    pub(super) reply: oneshot::Sender<BatchOutcome>,
}

/// The POSTs waiting for a batch, and whether a batch is being written.
#[derive(Default)]
pub(super) struct Queue {
    waiting: Mutex<VecDeque<Waiting>>,
    /// A batch is being written (not yet committing): the next one waits
    /// for it, gathering what arrives meanwhile. One batch written at a
    /// time while others commit makes batches as large as the load allows:
    /// several workers starting at once would each take a few POSTs, at
    /// the CPU (idem's and Postgres's) of a transaction each. The number
    /// of the turn held (0: none).
    writing: AtomicU64,
    /// The number of the last turn given.
    turns: AtomicU64,
    pub(super) wake: Notify,
}

/// The longest a batch holds the turn to write: one that waits for a lock
/// (a swap of its partition, a row another write holds) must not hold up
/// the batches of every other table meanwhile; past it, the next batch is
/// written beside it.
pub(super) const WRITING_TURN_BOUND: Duration = Duration::from_millis(50);

/// The turn to write a batch (see `Queue::writing`); given back when the
/// batch reaches its commit, or fails, or after `WRITING_TURN_BOUND`
/// (`Queue::give_back`).
pub(super) struct WritingTurn<'a> {
    queue: &'a Queue,
    pub(super) number: u64,
}

impl Drop for WritingTurn<'_> {
    fn drop(&mut self) {
        self.queue.give_back(self.number);
    }
}

/// Every queue of this process.
/// The queue of small POSTs, one for all tables: a batch takes POSTs of
/// several tables, so that POSTs spread over many tables share a commit as
/// POSTs to one table do.
#[derive(Default)]
pub struct Batches {
    pub(super) queue: Mutex<Option<Arc<Queue>>>,
}

impl Queue {
    pub(super) fn lock(&self) -> std::sync::MutexGuard<'_, VecDeque<Waiting>> {
        self.waiting.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// What waits, as much as fits in one batch, in arrival order (a POST
    /// that shares a key or a row with one taken waits for the next), with
    /// the turn to write it; nothing while another batch is being written.
    pub(super) fn take(&self) -> Option<(Vec<Waiting>, WritingTurn<'_>)> {
        let mut waiting = self.lock();
        if waiting.is_empty() || self.writing.load(Ordering::Acquire) != 0 {
            return None;
        }
        let mut taken: Vec<Waiting> = Vec::new();
        let mut left = VecDeque::new();
        let mut keys: HashSet<(Principal, String)> = HashSet::new();
        let mut row_ids: HashSet<u128> = HashSet::new();
        let mut rows = 0;
        while let Some(next) = waiting.pop_front() {
            let item = &next.item.data;
            let claim = item.claim_id();
            let full = taken.len() >= MAX_POSTS
                || (!taken.is_empty() && rows + item.row_count() > MAX_ROWS);
            let clash = keys.contains(&claim) || item.row_ids.iter().any(|id| row_ids.contains(id));
            if full || clash {
                left.push_back(next);
                continue;
            }
            keys.insert(claim);
            row_ids.extend(item.row_ids.iter().copied());
            rows += item.row_count();
            taken.push(next);
        }
        *waiting = left;
        let number = self.turns.fetch_add(1, Ordering::Relaxed) + 1;
        self.writing.store(number, Ordering::Release);
        Some((
            taken,
            WritingTurn {
                queue: self,
                number,
            },
        ))
    }

    /// Gives back turn `number`, if it is still held, and wakes a worker
    /// for what waits.
    pub(super) fn give_back(&self, number: u64) {
        let held = self
            .writing
            .compare_exchange(number, 0, Ordering::AcqRel, Ordering::Acquire);
        if held.is_ok() {
            self.wake.notify_one();
        }
    }
}
