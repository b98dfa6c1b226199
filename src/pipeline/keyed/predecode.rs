//! A small POST made ready for a batch, before any transaction: its body
//! read whole (a large one goes alone) and decoded for the table's
//! definition as this process remembers it. A refusal is answered (and
//! recorded in the ledger) without a transaction; a body that needs the
//! table changed, or was refused for a definition that has changed since,
//! goes alone and is decoded there again.

use bytes::Bytes;

use super::batch_queue::with_predecoded;
use crate::pipeline::error::{WriteError, WriteResult};
use crate::pipeline::intake::decode::{
    decode_whole, read_small, verdict, BodyRead, DecodeJob, Decoded,
};
use crate::pipeline::intake::ticket::LoadTicket;
use crate::pipeline::rows::post::quarantined;
use crate::pipeline::rows::request::{choose_mode, encode_options, PostRows, Predecoded};
use crate::pipeline::Pipeline;
use crate::schema::{MergeMode, TableDef};
use crate::store::Store;

/// A POST's body decoded before its transaction, or the POST to write alone.
pub(super) enum Predecoding {
    Ready(Box<PostRows>, Box<Predecoded>),
    Alone(Box<PostRows>),
}

impl Pipeline {
    /// Reads and decodes a small POST's body for its table's definition, as
    /// this process knows it; hands back a POST that is not for a batch
    /// (batching off, a table not known, a patch, a large body).
    pub(super) async fn predecode(&self, mut rows: Box<PostRows>) -> WriteResult<Predecoding> {
        let Some((def, mode)) = self.batch_mode(&rows) else {
            return Ok(Predecoding::Alone(rows));
        };
        let ticket = rows.ticket();
        let Some(body) = self.read_whole_small(&mut rows, &ticket).await? else {
            return Ok(Predecoding::Alone(rows));
        };
        let (decoded, copy) = self.decode_for_batch(&rows, &def, mode, &ticket, &body);
        // Rows that need the table changed (`schema: evolve`): the write
        // alone changes it, and decodes the body again.
        if !decoded.wants.is_empty() {
            return Ok(Predecoding::Alone(body_put_back(rows, body)));
        }
        let decoded = match verdict(decoded) {
            Ok(decoded) => decoded,
            Err(e) => {
                return self
                    .refused_as_remembered(rows, &def, &ticket, body, e)
                    .await
            }
        };
        // A write to a period past retention is refused by the write alone.
        if self
            .refuse_expired(&def, decoded.periods.iter().copied())
            .is_err()
        {
            return Ok(Predecoding::Alone(body_put_back(rows, body)));
        }
        let copy = copy.ok_or_else(|| {
            WriteError::Internal(anyhow::anyhow!("a good body's rows went missing"))
        })?;
        let has_rejects = decoded.rejects.as_ref().is_some_and(|r| r.count() > 0);
        let pre = Box::new(Predecoded {
            def,
            mode,
            ticket,
            decoded,
            body,
            copy,
        });
        // Rejects are kept by a write alone (a batch has no place for them).
        if has_rejects {
            return Ok(Predecoding::Alone(with_predecoded(rows, pre)));
        }
        Ok(Predecoding::Ready(rows, pre))
    }

    /// The definition and mode a POST would be batched with: none when
    /// batching is off, the table is not known to this process, or the
    /// POST is a patch.
    fn batch_mode(&self, rows: &PostRows) -> Option<(TableDef, MergeMode)> {
        let def = rows
            .known_def
            .clone()
            .filter(|_| self.settings.batch_writes)?;
        // A patch reads stored rows: it is written alone. (A versions write
        // whose version conflicts with a stored one fails its batch, whose
        // POSTs then go alone, where the conflict is refused or held.)
        match choose_mode(&def, rows.mode) {
            Ok(mode) if mode != MergeMode::Patch => Some((def, mode)),
            _ => None,
        }
    }

    /// The POST's whole body when it is small; none (the body's reader put
    /// back as read so far) when it is not.
    async fn read_whole_small(
        &self,
        rows: &mut PostRows,
        ticket: &LoadTicket,
    ) -> WriteResult<Option<Bytes>> {
        let body = std::mem::replace(&mut rows.body.reader, Box::new(tokio::io::empty()));
        let read = read_small(body, self.settings.small_body_bytes()).await;
        Ok(match refused_or(ticket, &self.store, read).await? {
            BodyRead::Whole(body) => Some(Bytes::from(body)),
            BodyRead::Large(reader) => {
                rows.body.reader = reader;
                None
            }
        })
    }

    fn decode_for_batch(
        &self,
        rows: &PostRows,
        def: &TableDef,
        mode: MergeMode,
        ticket: &LoadTicket,
        body: &Bytes,
    ) -> (Decoded, Option<Bytes>) {
        let options = encode_options(def, mode, &rows.principal, &rows.write_key());
        let job = DecodeJob::new(
            &self.settings,
            def.clone(),
            options,
            ticket,
            rows.body.format,
        );
        let job = DecodeJob {
            collect_wants: true,
            ..quarantined(job, rows.bad_rows, mode, ticket)
        };
        decode_whole(&job, body)
    }

    /// A body refused for the definition this process remembers: unless the
    /// table is still so, the write alone decides. So it does for a POST on
    /// a channel, whose offset, if committed already, answers it whatever
    /// its body holds.
    async fn refused_as_remembered(
        &self,
        rows: Box<PostRows>,
        def: &TableDef,
        ticket: &LoadTicket,
        body: Bytes,
        refusal: WriteError,
    ) -> WriteResult<Predecoding> {
        let changed = self.store.table(&def.name).await?.as_ref() != Some(def);
        if changed {
            self.definitions.forget(&def.name);
        }
        if changed || rows.channel.is_some() {
            return Ok(Predecoding::Alone(body_put_back(rows, body)));
        }
        refused_or(ticket, &self.store, Err(refusal)).await
    }
}

/// `result`, or its error recorded in the ledger as the load's refusal.
async fn refused_or<T>(
    ticket: &LoadTicket,
    store: &Store,
    result: WriteResult<T>,
) -> WriteResult<T> {
    if let Err(e) = &result {
        ticket.record_refusal(store, e).await;
    }
    result
}

/// A POST whose body was read whole, to be read again from memory.
fn body_put_back(mut rows: Box<PostRows>, body: Bytes) -> Box<PostRows> {
    rows.body.reader = Box::new(std::io::Cursor::new(body));
    rows
}
