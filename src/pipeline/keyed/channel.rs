//! A POST on a channel (`POST /rows?channel=&offset=`): its offset checked
//! against the one the channel committed, and committed with its rows in
//! their transaction. The channel's row is locked first, before any
//! partition: a second producer sending the same offsets waits there, then
//! finds them committed and writes nothing. Without an Idempotency-Key the
//! write runs in a transaction of its own (here); with one, in the key's
//! (`key`), whose stored answer is then whatever the channel answered.
//! A small POST without a key is offered to its table's batch first (see
//! `batch`), which locks channels as it claims keys; one with a key, or one
//! the batch does not take, is written here.

use sqlx::PgConnection;

use super::answer::{AnswerForm, KeyedAnswer};
use super::batch::Batched;
use super::batch_queue::BatchClaim;
use crate::channel::{ChannelCommitted, ChannelSkipped};
use crate::metrics::RowCounts;
use crate::pipeline::error::WriteResult;
use crate::pipeline::intake::body::drain;
use crate::pipeline::intake::body::BodyReader;
use crate::pipeline::intake::ticket::LoadTicket;
use crate::pipeline::intake::turns;
use crate::pipeline::rows::receipt::RowsWritten;
use crate::pipeline::rows::request::PostRows;
use crate::pipeline::Pipeline;
use crate::store::channels::{commit_offset, lock_channel, OffsetCommit};
use crate::store::write::closing::{close_rows_writes, RowsClosing};
use crate::store::StoreError;

/// What a POST came to behind its channel's gate.
pub enum Gated {
    Written(RowsWritten),
    /// Nothing written; the body, unread, is the caller's to drain (once it
    /// let the channel go, when it can).
    Skipped(ChannelSkipped, BodyReader),
}

impl Pipeline {
    /// A POST on a channel without an Idempotency-Key: its offset checked
    /// and committed in the rows' own transaction, its refusals recorded in
    /// the ledger.
    pub async fn post_on_channel(
        &self,
        rows: PostRows,
        form: &'static dyn AnswerForm,
    ) -> WriteResult<KeyedAnswer> {
        let rows = match self.try_channel_batch(rows, form).await? {
            Batched::Answered(answer) => return Ok(answer),
            Batched::Alone(rows) => *rows,
        };
        let ticket = rows.ticket();
        let result = self.channel_transaction(rows, &ticket, form).await;
        if let Err(e) = &result {
            ticket.record_refusal(&self.store, e).await;
        }
        result
    }

    /// The POST in its table's batch, when batching is on and this process
    /// knows the table; or the POST back, to be written alone.
    async fn try_channel_batch(
        &self,
        mut rows: PostRows,
        form: &'static dyn AnswerForm,
    ) -> WriteResult<Batched> {
        let Some(channel) = rows.channel.clone() else {
            return Ok(Batched::Alone(Box::new(rows)));
        };
        rows.known_def = self.definitions.get(&rows.table);
        self.try_batch(|| BatchClaim::Channel(channel), Box::new(rows), form)
            .await
    }

    /// The write in a transaction of its own: committed with its deltas,
    /// ledger row and channel offset, or rolled back when its offset is
    /// not after the channel's (then its body is drained).
    async fn channel_transaction(
        &self,
        mut rows: PostRows,
        ticket: &LoadTicket,
        form: &dyn AnswerForm,
    ) -> WriteResult<KeyedAnswer> {
        let reader = std::mem::replace(&mut rows.body.reader, Box::new(tokio::io::empty()));
        rows.body.reader = turns::arrived(reader).await?;
        let _slot = self
            .load_slots
            .acquire(&[&rows.principal], self.settings.load_wait())
            .await?;
        // Bounded as a keyed write's transaction is: a producer waits that
        // long for another on its channel, then is told to retry.
        let wait = self.settings.idempotency_wait();
        let mut tx = self.store.begin_bounded(wait).await?;
        let gated = match self.write_gated(rows, ticket, &mut tx).await {
            Ok(gated) => gated,
            Err(e) => {
                let _ = tx.rollback().await;
                return Err(e);
            }
        };
        let (body, counts) = match gated {
            Gated::Written(written) => {
                let closing = RowsClosing {
                    load_id: ticket.load_id,
                    deltas: &written.deltas,
                    entry: written.receipt.entry(ticket),
                    key: None,
                };
                close_rows_writes(&mut tx, &[closing]).await?;
                tx.commit().await.map_err(StoreError::from)?;
                (form.rows(&written.receipt), written.receipt.counts())
            }
            Gated::Skipped(skipped, mut reader) => {
                tx.rollback().await.map_err(StoreError::from)?;
                drain(&mut reader).await?;
                (form.channel_skipped(&skipped), RowCounts::default())
            }
        };
        Ok(KeyedAnswer::written(body, None, counts))
    }

    /// The POST's rows written in `tx`, behind its channel's gate when it
    /// has a channel: the channel locked, then the rows written and the
    /// offset committed, or nothing written when the offset is not after
    /// the committed one.
    pub(crate) async fn write_gated(
        &self,
        mut rows: PostRows,
        ticket: &LoadTicket,
        tx: &mut PgConnection,
    ) -> WriteResult<Gated> {
        let Some(channel) = rows.channel.clone() else {
            return Ok(Gated::Written(self.write_rows(rows, ticket, tx).await?));
        };
        let principal = rows.principal.clone();
        let kind = channel.first_kind();
        let locked = lock_channel(tx, &principal, &channel.name, kind, &rows.table).await?;
        let offset = channel.offset_as(locked.kind)?;
        // The table as it is once the channel is ours (a wait for another
        // producer may have outlasted a claim's read of it); remembered, so
        // that the channel's next POST may go in a batch.
        if let Some(def) = &locked.def {
            self.definitions.remember(def);
        }
        rows.known_def = locked.def;
        if let Some(committed) = locked.committed.filter(|c| offset <= *c) {
            let body = std::mem::replace(&mut rows.body.reader, Box::new(tokio::io::empty()));
            let skipped = ChannelSkipped {
                table: rows.table,
                name: channel.name,
                offset,
                committed,
            };
            return Ok(Gated::Skipped(skipped, body));
        }
        let mut written = self.write_rows(rows, ticket, tx).await?;
        let commit = OffsetCommit {
            principal: &principal,
            name: &channel.name,
            offset: &offset,
            table: &written.receipt.table,
            load_id: ticket.load_id,
        };
        commit_offset(tx, &commit).await?;
        written.receipt.channel = Some(ChannelCommitted {
            name: channel.name,
            offset,
        });
        Ok(Gated::Written(written))
    }
}
