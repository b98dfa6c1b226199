//! `POST /rows?table=`: rows appended or merged by key, in the transaction
//! that also records the request's Idempotency-Key.

use bytes::Bytes;
use sqlx::PgConnection;
use tokio_stream::wrappers::ReceiverStream;
use uuid::Uuid;

use crate::access::Actor;
use crate::channel::{ChannelCommitted, ChannelOffset};
use crate::idempotency::IdempotencyKey;
use crate::ingest::encode::row_hash_of_text;
use crate::ingest::reject_spool::RejectSpool;
use crate::ingest::ContentDelta;
use crate::ingest::EncodeOptions;
use crate::metrics::RowCounts;
use crate::names::TableName;
use crate::period::Period;
use crate::pipeline::error::{WriteError, WriteResult};
use crate::pipeline::intake::body::BodySource;
use crate::pipeline::intake::decode::{self, Decode, DecodeJob, Decoded, Quarantine};
use crate::pipeline::intake::target::Target;
use crate::pipeline::intake::ticket::LoadTicket;
use crate::pipeline::table::evolve::BodyReading;
use crate::pipeline::Pipeline;
use crate::schema::{BadRowPolicy, DuplicatePolicy, MergeMode, TableDef};
use crate::store::catalog::{self, Declared, Origin};
use crate::store::ledger::{LoadEntry, LoadStatus};
use crate::store::rejects;
use crate::store::write::incoming::{
    copy_incoming, fits_arrays, small_body, Incoming, IncomingRows,
};
use crate::store::write::merge::{apply_incoming, Merged, PartitionAfter};

/// What an accepted POST did (its HTTP form is `http::receipts`).
#[derive(Clone, Debug)]
pub struct RowsReceipt {
    pub load_id: Uuid,
    pub table: TableName,
    pub mode: MergeMode,
    /// The partition written, when there was exactly one.
    pub ds: Option<Period>,
    /// Every partition written, with its row count and content hash after.
    pub partitions: Vec<PartitionAfter>,
    pub rows_received: u64,
    /// Inserted + updated + deleted.
    pub rows_written: u64,
    pub inserted: u64,
    pub updated: u64,
    pub deleted: u64,
    /// Rows that changed nothing: the same as stored, an older cursor, an
    /// existing key under `insert_missing`, a tombstone for nothing.
    pub unchanged: u64,
    /// The unchanged rows that are stored already as they are (a versions
    /// write's: the version is stored).
    pub already_present: u64,
    /// Versions stored already with other content, held (versions only).
    pub conflicts: u64,
    /// Versions written to the table's history (see `Merged`).
    pub history_written: u64,
    pub duplicates: u64,
    /// Bad rows kept in the rejects store (`bad_rows: quarantine`).
    pub rejected: u64,
    /// Values of fields the table has no column for, dropped under
    /// `schema: discard_unknown`.
    pub discarded_fields: u64,
    pub changed: bool,
    /// The channel offset the write committed, for a POST on a channel.
    pub channel: Option<ChannelCommitted>,
    /// No one had declared the table: this write made it, from its body.
    pub table_created: bool,
}

pub struct PostRows {
    pub table: TableName,
    pub mode: Option<MergeMode>,
    pub body: BodySource,
    /// Who sent it and under which key: a keyless table's row ids are scoped
    /// by them (see `EncodeOptions::row_id_scope`).
    pub principal: String,
    /// Required but on a channel, whose offset makes the write idempotent.
    pub idempotency_key: Option<IdempotencyKey>,
    /// The channel and offset it commits, if any (see `channel`); boxed,
    /// as most POSTs have none.
    pub channel: Option<Box<ChannelOffset>>,
    /// Who sent it, for the ledger.
    pub actor: Actor,
    /// The table's definition, when the key's claim read it already.
    pub known_def: Option<TableDef>,
    /// The body, decoded already (it went to a batch, which could not
    /// write it; see `batch`).
    pub predecoded: Option<Box<Predecoded>>,
    /// `?bad_rows=`: the table's policy for this request only.
    pub bad_rows: Option<BadRowPolicy>,
    /// Whether an undeclared table may be made from the body (`?create=`,
    /// true unless asked otherwise).
    pub create_table: bool,
}

/// A small body decoded before its write's transaction: for that table
/// definition and mode, under that ticket (its load id is in the rows).
pub struct Predecoded {
    pub def: TableDef,
    pub mode: MergeMode,
    pub ticket: LoadTicket,
    pub decoded: Decoded,
    /// The body as sent (after gunzip), to decode again if the table
    /// changed meanwhile.
    pub body: Bytes,
    /// The rows as binary COPY data.
    pub copy: Bytes,
}

impl PostRows {
    /// The ledger's ticket for this load; its mode is the one asked for, if
    /// any (the table's default is known only later).
    pub fn ticket(&self) -> LoadTicket {
        if let Some(predecoded) = &self.predecoded {
            return predecoded.ticket.clone();
        }
        let mode = self.mode.map(MergeMode::as_str).unwrap_or("default");
        LoadTicket::new(
            &self.table,
            None,
            mode,
            Some(&self.write_key()),
            &self.actor,
        )
    }

    /// What names this write in the ledger and scopes a keyless table's
    /// row ids: its Idempotency-Key, else its channel and offset.
    pub fn write_key(&self) -> String {
        match (&self.idempotency_key, &self.channel) {
            (Some(key), _) => key.to_string(),
            (None, Some(channel)) => channel.write_key(),
            (None, None) => String::new(),
        }
    }
}

/// How a POST's rows are encoded for `mode`.
pub fn encode_options(
    def: &TableDef,
    mode: MergeMode,
    principal: &str,
    key: &str,
) -> EncodeOptions {
    EncodeOptions {
        allowed: None,
        ds: None,
        // Without a key, a row's id is its content and its occurrence in
        // this request; the request's key keeps other requests' rows apart.
        row_id_scope: def
            .primary_key
            .is_empty()
            .then(|| format!("{principal}\0{key}").into_bytes()),
        tombstones: mode.replaces(),
        presence: mode == MergeMode::Patch,
    }
}

/// The mode asked for, or the table's default: its `write_mode`, else merge
/// with a key and append without. A table that keeps versions takes no
/// other mode, and no other table takes `versions`.
pub fn choose_mode(def: &TableDef, asked: Option<MergeMode>) -> WriteResult<MergeMode> {
    let keyed = !def.primary_key.is_empty();
    let versions = def.keeps_versions();
    match asked {
        None => Ok(def.write_mode.unwrap_or(if keyed {
            MergeMode::Merge
        } else {
            MergeMode::Append
        })),
        Some(mode) if versions && mode != MergeMode::Versions => Err(WriteError::Mode(format!(
            "table {:?} keeps every version (write_mode \"versions\"); send mode=versions or no mode, not mode={}",
            def.name,
            mode.as_str()
        ))),
        Some(MergeMode::Versions) if !versions => Err(WriteError::Mode(format!(
            "mode=versions needs a table declared with \"write_mode\": \"versions\", and table {:?} is not",
            def.name
        ))),
        Some(MergeMode::Append) if keyed => Err(WriteError::Mode(format!(
            "table {:?} has a primary key; use mode=merge or mode=insert_missing",
            def.name
        ))),
        Some(mode @ (MergeMode::Merge | MergeMode::Patch | MergeMode::InsertMissing)) if !keyed => {
            Err(WriteError::Mode(format!(
                "mode={} needs a primary key, and table {:?} has none; use mode=append",
                mode.as_str(),
                def.name
            )))
        }
        Some(mode) => Ok(mode),
    }
}

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
        let (def, table_created) = match target {
            Target::Inferred(def) if landed.rows == 0 => {
                return nothing_stored(ticket, &def, mode, decoded);
            }
            target => create_if_new(&mut *tx, target).await?,
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
async fn create_if_new(tx: &mut PgConnection, target: Target) -> WriteResult<(TableDef, bool)> {
    Ok(match target {
        Target::Stored(def) => (def, false),
        Target::Inferred(def) => {
            let declared = catalog::declare(tx, &def, Origin::Inferred).await?;
            let created = matches!(declared, Declared::Created(_));
            (declared.into_def(), created)
        }
    })
}

/// A POST's rows as written, and what is left to record before the commit.
pub struct RowsWritten {
    pub receipt: RowsReceipt,
    /// What the write changed in each partition it touched.
    pub deltas: Vec<(Period, ContentDelta)>,
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

impl RowsReceipt {
    pub fn new(
        ticket: &LoadTicket,
        def: &TableDef,
        mode: MergeMode,
        decoded: &Decoded,
        merged: Merged,
    ) -> Self {
        let rows_written = merged.inserted + merged.updated + merged.deleted;
        // A held conflict was neither written nor left as it is stored.
        let left_alone = rows_written + merged.conflicts;
        RowsReceipt {
            load_id: ticket.load_id,
            table: def.name.clone(),
            mode,
            ds: match merged.partitions.as_slice() {
                [one] => Some(one.ds),
                _ => None,
            },
            rows_received: decoded.rows_received,
            rows_written,
            inserted: merged.inserted,
            updated: merged.updated,
            deleted: merged.deleted,
            unchanged: merged.rows_after_dedup - left_alone,
            already_present: merged.already_present,
            conflicts: merged.conflicts,
            history_written: merged.history_written,
            duplicates: merged.duplicates,
            rejected: 0,
            discarded_fields: decoded.discarded_fields,
            // What the write stored anywhere: a late version changes the
            // history alone.
            changed: rows_written > 0 || merged.history_written > 0,
            partitions: merged.partitions,
            channel: None,
            table_created: false,
        }
    }

    /// What this write did, in the counts `/metrics` keeps.
    pub fn counts(&self) -> RowCounts {
        RowCounts {
            received: self.rows_received,
            written: self.rows_written,
            duplicates: self.duplicates,
            rejected: self.rejected,
        }
    }

    /// The ledger's row for this write.
    pub fn entry<'a>(&'a self, ticket: &'a LoadTicket) -> LoadEntry<'a> {
        LoadEntry {
            status: LoadStatus::of_merge(self.changed),
            ds: self.ds,
            mode: self.mode.as_str(),
            rows_received: self.rows_received,
            rows_written: self.rows_written,
            duplicates: self.duplicates,
            rejected: self.rejected,
            changed: self.changed,
            ..ticket.entry()
        }
    }
}
