//! `POST /rows?table=`: a body's rows decoded, landed (kept in memory, or
//! COPYed into the session's table) and appended or merged by key, all in
//! the caller's transaction: the one that records the request's
//! Idempotency-Key or channel offset (`keyed/`).

use sqlx::PgConnection;
use tokio_stream::wrappers::ReceiverStream;

use super::receipt::{RowsReceipt, RowsWritten};
use super::request::{choose_mode, encode_options, PostRows, Predecoded};
use crate::ingest::encode::row_hash_of_text;
use crate::ingest::reject_spool::RejectSpool;
use crate::pipeline::error::{WriteError, WriteResult};
use crate::pipeline::intake::decode::{self, Decode, DecodeJob, Decoded, Quarantine};
use crate::pipeline::intake::target::Target;
use crate::pipeline::intake::ticket::LoadTicket;
use crate::pipeline::table::evolve::BodyReading;
use crate::pipeline::Pipeline;
use crate::schema::{BadRowPolicy, DistributionDefault, DuplicatePolicy, MergeMode, TableDef};
use crate::store::catalog::{self, Declared, Origin};
use crate::store::rejects;
use crate::store::write::incoming::{
    copy_incoming, fits_arrays, small_body, Incoming, IncomingRows,
};
use crate::store::write::merge::{apply_incoming, Merged};

impl Pipeline {
    /// Writes the body's rows in `tx`, and nothing else: every statement of
    /// the write runs in that transaction. The caller records what it
    /// returns (the partitions' deltas and the ledger row; see
    /// `store::write::closing`) in it and commits, or records a refusal after
    /// rolling back.
    #[tracing::instrument(level = "debug", skip_all, fields(table = %req.table, load_id = %ticket.load_id))]
    pub(crate) async fn write_rows(
        &self,
        req: PostRows,
        ticket: &LoadTicket,
        tx: &mut PgConnection,
    ) -> WriteResult<RowsWritten> {
        let (target, mode, decoding) = self.decoding(req, ticket, tx).await?;
        let (rejects, mut written) = self
            .merge_decoding(tx, target, mode, ticket, decoding)
            .await?;
        if let Some(rejects) = rejects {
            let receipt = &mut written.receipt;
            receipt.rejected = rejects::keep(tx, rejects).await?;
        }
        Ok(written)
    }

    /// Merges (or appends) the decoded rows into the target's table in
    /// `tx`, created there if it is new and rows are written; returns the
    /// bad rows set aside under a quarantine, and what was written.
    pub(crate) async fn merge_decoding(
        &self,
        tx: &mut PgConnection,
        target: Target,
        mode: MergeMode,
        ticket: &LoadTicket,
        decoding: Decode,
    ) -> WriteResult<(Option<RejectSpool>, RowsWritten)> {
        let (mut decoded, landed) = self.land_rows(tx, target.def(), mode, decoding).await?;
        self.refuse_expired(target.def(), decoded.periods.iter().copied())?;
        let (def, table_created) = match target {
            Target::Inferred(def) if landed.rows == 0 => {
                return nothing_stored(ticket, &def, mode, decoded);
            }
            target => create_if_new(&mut *tx, target, self.store.distribution_default()).await?,
        };
        let def = &def;
        let incoming = Incoming {
            rows: landed.rows,
            content: decoded.input_hash,
            tombstones: decoded.tombstones,
            maybe_repeated: decoded.maybe_repeated,
            // A patch rewrites its rows in place (`fill_in_patches`), which
            // moves them out of the order they came in.
            in_key_order: decoded.in_key_order && mode != MergeMode::Patch,
            // Under a quarantine (its bad rows set aside) a repeat is held.
            refuse_repeats: def.duplicates == DuplicatePolicy::Reject && decoded.rejects.is_none(),
            refuse_conflicts: decoded.rejects.is_none(),
            periods: decoded.periods.clone(),
            additions: decoded.additions.clone(),
        };
        let rehash = |values: &[Option<String>]| row_hash_of_text(def, values);
        let mut merged = apply_incoming(
            tx,
            def,
            mode,
            ticket.load_id,
            incoming,
            landed.source,
            &rehash,
        )
        .await?;
        let deltas = std::mem::take(&mut merged.deltas);
        let receipt = RowsReceipt {
            table_created,
            ..RowsReceipt::new(ticket, def, mode, &decoded, merged)
        };
        Ok((decoded.rejects.take(), RowsWritten { receipt, deltas }))
    }
}

/// The table, created in transaction `tx` when it is new (it goes with
/// the transaction if the write fails), and whether this write created
/// it (not a write that raced it there).
async fn create_if_new(
    tx: &mut PgConnection,
    target: Target,
    distribution_default: DistributionDefault,
) -> WriteResult<(TableDef, bool)> {
    Ok(match target {
        Target::Stored(def) => (def, false),
        Target::Inferred(def) => {
            let declared =
                catalog::declare(tx, &def, Origin::Inferred, distribution_default).await?;
            let created = matches!(declared, Declared::Created(_));
            (declared.into_def(), created)
        }
    })
}

impl Pipeline {
    /// The table, the mode and the body's rows: decoded already (before the
    /// transaction) when that was for the table as the claim read it,
    /// otherwise decoded now.
    async fn decoding(
        &self,
        mut req: PostRows,
        ticket: &LoadTicket,
        tx: &mut PgConnection,
    ) -> WriteResult<(Target, MergeMode, Decode)> {
        match req.predecoded.take() {
            Some(pre) if req.known_def.as_ref() == Some(&pre.def) => {
                let Predecoded {
                    def,
                    mode,
                    decoded,
                    copy,
                    ..
                } = *pre;
                let decoding = Decode::Whole(Box::new(decoded), Some(copy));
                return Ok((Target::Stored(def), mode, decoding));
            }
            // The table changed since: its body is decoded again.
            Some(pre) => req.body.reader = Box::new(std::io::Cursor::new(pre.body)),
            None => {}
        }
        let (format, create) = (req.body.format, req.create_table);
        let write_key = req.write_key();
        let (target, body) = match req.known_def {
            Some(def) => (Target::Stored(def), req.body.reader),
            None => Target::resolve(&self.settings, &mut *tx, &req.table, create, req.body).await?,
        };
        let mode = choose_mode(target.def(), req.mode)?;
        let options = encode_options(target.def(), mode, &req.principal, &write_key);
        let reading = BodyReading {
            format,
            options: &options,
            ticket,
            // The claim's transaction bounds its lock waits.
            lock_wait: None,
            set_aside_bad_rows: false,
        };
        let (target, mut body) = self
            .fit_table_to_body(&mut *tx, target, reading, body, None)
            .await?;
        let body = body
            .reader()?
            .ok_or_else(|| WriteError::Internal(anyhow::anyhow!("a fitted body went missing")))?;
        // A new table is made only once rows are known to land in it.
        let def = target.def().clone();
        let job = DecodeJob::new(&self.settings, def, options, ticket, format);
        let job = quarantined(job, req.bad_rows, mode, ticket);
        let small = self.settings.small_body_bytes();
        let decoding = decode::decode_small_or_spawn(job, body, small).await?;
        Ok((target, mode, decoding))
    }
}

/// The answer to a write to a table nobody declared that stores no row:
/// no table is made for it (see `decode::refuse_rejects_without_table`).
fn nothing_stored(
    ticket: &LoadTicket,
    def: &TableDef,
    mode: MergeMode,
    decoded: Decoded,
) -> WriteResult<(Option<RejectSpool>, RowsWritten)> {
    decode::refuse_rejects_without_table(&decoded)?;
    let receipt = RowsReceipt::new(ticket, def, mode, &decoded, Merged::default());
    let deltas = Vec::new();
    Ok((None, RowsWritten { receipt, deltas }))
}

/// `job` with its bad rows quarantined when the request's policy (or, when
/// it names none, its table's) says so.
pub fn quarantined(
    job: DecodeJob,
    asked: Option<BadRowPolicy>,
    mode: MergeMode,
    ticket: &LoadTicket,
) -> DecodeJob {
    let policy = asked.unwrap_or(job.def.bad_rows);
    let source = || ticket.reject_source("post", Some(mode.as_str()), job.format);
    DecodeJob {
        quarantine: (policy == BadRowPolicy::Quarantine).then(|| Quarantine::Keep(source())),
        ..job
    }
}

/// Where the decoded rows wait for the merge, and how many there are.
struct Landed {
    source: IncomingRows,
    rows: u64,
}

impl Pipeline {
    /// Puts the decoded rows where the merge reads them: a small body's
    /// (decoded whole) stay in memory, to be bound as arrays, when the merge
    /// can read them so; any other's are COPYed into the session's table
    /// (as they are decoded, for a large body). Returns the decoder's
    /// verdict once it has finished.
    async fn land_rows(
        &self,
        tx: &mut PgConnection,
        def: &TableDef,
        mode: MergeMode,
        decoding: Decode,
    ) -> WriteResult<(Decoded, Landed)> {
        match decoding {
            Decode::Whole(decoded, copy) => {
                let decoded = decode::verdict(*decoded)?;
                let copy = copy.ok_or_else(|| {
                    WriteError::Internal(anyhow::anyhow!("a good body's rows went missing"))
                })?;
                if fits_arrays(mode, decoded.maybe_repeated) {
                    let source = small_body(def, mode, &copy)?;
                    let rows = source.rows();
                    return Ok((decoded, Landed { source, rows }));
                }
                let rows = futures::stream::iter([Ok(copy)]);
                let copied = copy_incoming(tx, def, mode, rows).await;
                Ok((decoded, Landed::session(decode::copy_result(copied)?)))
            }
            Decode::Streaming(decoding) => {
                let rows = ReceiverStream::new(decoding.chunks);
                let copied = copy_incoming(tx, def, mode, rows).await;
                let decoded = decode::finish(decoding.decoder).await?;
                Ok((decoded, Landed::session(decode::copy_result(copied)?)))
            }
        }
    }
}

impl Landed {
    fn session(rows: u64) -> Self {
        Landed {
            source: IncomingRows::Session,
            rows,
        }
    }
}
