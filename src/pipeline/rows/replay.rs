//! `POST /rejects/replay?table=`: a table's pending rejects sent again
//! through the normal write path (merge with a key, append without), once
//! the table was fixed to fit them.
//!
//! A replay runs under its Idempotency-Key, in the transaction that claims
//! it: the pending rejects past the table's retry window become `expired`;
//! the oldest pending ones (within `REPLAY_BOUNDS`) are locked, grouped by
//! what they must be read as (format, CSV header, a PUT's partition), each
//! group rebuilt as a body of the records as they were sent and written
//! with bad rows listed instead of refused; then each tried reject is marked
//! `replayed` by this load, or left `pending` with one more try and its new
//! problems. All of it commits with the key, or none of it.

use std::collections::BTreeMap;
use std::time::Duration;

use bytes::Bytes;
use sqlx::PgConnection;

use super::receipt::{ReplayReceipt, ReplayWritten, RowsReceipt, RowsWritten};
use super::request::{choose_mode, encode_options, ReplayRejects, REPLAY_MODE};
use crate::ids::{LoadId, Principal};
use crate::ingest::reject_spool::{Problem, RejectSpool};
use crate::ingest::{BodyFormat, ContentDelta, EncodeOptions};
use crate::period::Period;
use crate::pipeline::error::{WriteError, WriteResult};
use crate::pipeline::intake::decode::{self, decode_whole, Decode, DecodeJob, Quarantine};
use crate::pipeline::intake::target::Target;
use crate::pipeline::intake::ticket::LoadTicket;
use crate::pipeline::table::evolve::{BodyReading, Rereadable};
use crate::pipeline::Pipeline;
use crate::schema::{MergeMode, SchemaPolicy, TableDef};
use crate::store::catalog;
use crate::store::rejects::{self, PendingReject, ReplayBounds, Tried};
use crate::store::write::incoming::clear_incoming;
use crate::store::write::merge::PartitionAfter;
use crate::store::StoreError;

/// What one replay takes at most; the receipt says when more are pending.
const REPLAY_BOUNDS: ReplayBounds = ReplayBounds {
    max_rows: 10_000,
    max_bytes: 32 << 20,
};

/// Rejects read and written the same way: one body each.
#[derive(Clone, PartialEq, Eq, PartialOrd, Ord)]
struct GroupKey {
    /// A POST's mode (a PUT's rows go by the table's default).
    mode: Option<String>,
    format: String,
    csv_header: Option<Vec<u8>>,
    /// A PUT's partition (its rows are read as that partition's).
    put_ds: Option<String>,
}

/// What the groups' writes add up to.
#[derive(Default)]
struct ReplayTally {
    receipt: ReplayReceipt,
    deltas: BTreeMap<Period, ContentDelta>,
    partitions: BTreeMap<Period, i64>,
    /// Per tried reject: `None` when written, else its problems.
    tried: Vec<(LoadId, i64, Option<Vec<Problem>>)>,
}

impl Pipeline {
    /// Replays the table's pending rejects in `tx` (see the module's doc).
    #[tracing::instrument(skip_all, fields(table = %req.table, load_id = %ticket.load_id))]
    pub(crate) async fn replay_rejects(
        &self,
        req: ReplayRejects,
        ticket: &LoadTicket,
        tx: &mut PgConnection,
    ) -> WriteResult<ReplayWritten> {
        let ReplayRejects {
            table,
            principal,
            idempotency_key,
            ..
        } = req;
        let def = catalog::table_def(&mut *tx, &table)
            .await?
            .ok_or(WriteError::TableNotFound(table))?;
        let window = Duration::from_secs(def.reject_retry_window.secs);
        let expired = rejects::expire(&mut *tx, &def.name, window).await?;
        let (pending, more) = rejects::take_pending(&mut *tx, &def.name, REPLAY_BOUNDS).await?;
        let mut outcome = ReplayTally::default();
        let mut def = def;
        for (i, (key, group)) in group_rejects(&pending).into_iter().enumerate() {
            if i > 0 {
                clear_incoming(&mut *tx, &def).await?;
            }
            let scope = format!("{idempotency_key}\0replay {i}");
            let group = Group {
                key: &key,
                rejects: &group,
                principal: &principal,
                scope: &scope,
            };
            def = self
                .replay_group(tx, def, ticket, group, &mut outcome)
                .await?;
        }
        let tried: Vec<Tried<'_>> = outcome
            .tried
            .iter()
            .map(|(load_id, record, problems)| Tried {
                load_id: *load_id,
                record: *record,
                problems: problems.as_deref(),
            })
            .collect();
        rejects::mark_tried(&mut *tx, &def.name, ticket.load_id, &tried).await?;
        Ok(outcome.finish(ticket, &def, expired, more))
    }
}

/// One group of rejects to replay as one body.
struct Group<'a> {
    key: &'a GroupKey,
    rejects: &'a [&'a PendingReject],
    principal: &'a Principal,
    /// Keeps a keyless table's row ids of this group apart from others'.
    scope: &'a str,
}

impl Pipeline {
    /// Writes one group's records that now fit, the table grown for them
    /// first under `schema: evolve`; notes each one's fate. Returns the
    /// table as it is now.
    async fn replay_group(
        &self,
        tx: &mut PgConnection,
        def: TableDef,
        ticket: &LoadTicket,
        group: Group<'_>,
        outcome: &mut ReplayTally,
    ) -> WriteResult<TableDef> {
        let (format, mode, options) = match how_to_read(&def, &group)? {
            Ok(how) => how,
            Err(refusal) => {
                outcome.all_still_bad(group.rejects, &refusal);
                return Ok(def);
            }
        };
        // Only rejects whose record was kept are taken (`take_pending`).
        let body = replay_body(format, group.key.csv_header.as_deref(), group.rejects);
        let body = Bytes::from(body);
        let reading = BodyReading {
            format,
            options: &options,
            ticket,
            // The claim's transaction bounds its lock waits.
            lock_wait: None,
            set_aside_bad_rows: true,
        };
        let def = self.fit_replayed(tx, def, reading, &body).await?;
        let decoding = match self
            .decode_group(&def, options, ticket, format, body)
            .await?
        {
            Ok(decoding) => decoding,
            Err(refusal) => {
                outcome.all_still_bad(group.rejects, &refusal);
                return Ok(def);
            }
        };
        let target = Target::Stored(def.clone());
        let (listed, written) = self
            .merge_decoding(tx, target, mode, ticket, decoding)
            .await?;
        outcome.group_written(group.rejects, listed.as_ref(), written)?;
        Ok(def)
    }

    /// The group's body decoded whole, its bad rows listed (up to
    /// `REPLAY_BOUNDS` of records: off the async threads); a body refused
    /// as a whole is the refusal's message.
    async fn decode_group(
        &self,
        def: &TableDef,
        options: EncodeOptions,
        ticket: &LoadTicket,
        format: BodyFormat,
        body: Bytes,
    ) -> WriteResult<Result<Decode, String>> {
        let job = DecodeJob::new(&self.settings, def.clone(), options, ticket, format);
        let job = DecodeJob {
            quarantine: Some(Quarantine::List),
            ..job
        };
        let (decoded, copy) =
            tokio::task::spawn_blocking(move || decode_whole(&job, &body)).await?;
        match decode::verdict(decoded) {
            Ok(decoded) => Ok(Ok(Decode::Whole(Box::new(decoded), copy))),
            Err(e) if e.is_refusal() => Ok(Err(e.to_string())),
            Err(e) => Err(e),
        }
    }

    /// Under `schema: evolve`, the table grown to fit the group's records
    /// as it would be for a POST of them (the records still bad for other
    /// reasons set aside meanwhile); any other table as it is.
    async fn fit_replayed(
        &self,
        tx: &mut PgConnection,
        def: TableDef,
        reading: BodyReading<'_>,
        body: &Bytes,
    ) -> WriteResult<TableDef> {
        if def.schema != SchemaPolicy::Evolve {
            return Ok(def);
        }
        let body = Rereadable::in_memory(body.clone());
        let target = self
            .fit_again(tx, Target::Stored(def), reading, Some(&body))
            .await?;
        Ok(target.into_def())
    }
}

/// How a group's records are read: their format, the mode their write
/// asked for (a patch's rows stay patches) and the encoding's options; a
/// mode the table no longer allows is the refusal's message.
fn how_to_read(
    def: &TableDef,
    group: &Group<'_>,
) -> WriteResult<Result<(BodyFormat, MergeMode, EncodeOptions), String>> {
    let Some(format) = BodyFormat::from_name(&group.key.format) else {
        return Err(StoreError::Corrupt("a reject of an unknown format").into());
    };
    let asked = group.key.mode.as_deref().and_then(MergeMode::from_name);
    let mode = match choose_mode(def, asked) {
        Ok(mode) => mode,
        Err(e) => return Ok(Err(e.to_string())),
    };
    let mut options = encode_options(def, mode, group.principal, group.scope);
    options.ds = match &group.key.put_ds {
        Some(label) => Some(Period::parse(label, def.grain).ok_or(StoreError::Corrupt(
            "a reject's partition is not one of its table",
        ))?),
        None => None,
    };
    Ok(Ok((format, mode, options)))
}

/// The pending rejects by how they are read, in the order taken.
fn group_rejects(pending: &[PendingReject]) -> BTreeMap<GroupKey, Vec<&PendingReject>> {
    let mut groups: BTreeMap<GroupKey, Vec<&PendingReject>> = BTreeMap::new();
    for reject in pending {
        let key = GroupKey {
            mode: reject.mode.clone(),
            format: reject.format.clone(),
            csv_header: reject.csv_header.clone(),
            put_ds: (reject.origin == "put")
                .then(|| reject.ds.clone())
                .flatten(),
        };
        groups.entry(key).or_default().push(reject);
    }
    groups
}

/// The records as one body of their format: NDJSON lines, a JSON array of
/// the elements, or CSV records under their header.
fn replay_body(
    format: BodyFormat,
    csv_header: Option<&[u8]>,
    rejects: &[&PendingReject],
) -> Vec<u8> {
    let records = rejects.iter().filter_map(|r| r.raw.as_deref());
    let mut body = Vec::new();
    match format {
        // A columnar body's bad rows are kept as NDJSON lines
        // (`BodyFormat::of_raw_records`).
        BodyFormat::Ndjson | BodyFormat::Parquet | BodyFormat::ArrowStream => {
            for record in records {
                body.extend_from_slice(record);
                body.push(b'\n');
            }
        }
        BodyFormat::JsonArray => {
            body.push(b'[');
            for (i, record) in records.enumerate() {
                if i > 0 {
                    body.push(b',');
                }
                body.extend_from_slice(record);
            }
            body.push(b']');
        }
        BodyFormat::Csv => {
            body.extend_from_slice(csv_header.unwrap_or_default());
            body.extend_from_slice(b"\r\n");
            for record in records {
                body.extend_from_slice(record);
                body.extend_from_slice(b"\r\n");
            }
        }
    }
    body
}

impl ReplayTally {
    fn tried(&mut self, reject: &PendingReject, problems: Option<Vec<Problem>>) {
        self.receipt.tried += 1;
        match &problems {
            None => self.receipt.rows_replayed += 1,
            Some(_) => self.receipt.still_pending += 1,
        }
        self.tried.push((reject.load_id, reject.record, problems));
    }

    /// Each of a group's rejects tried and still bad, for one reason.
    fn all_still_bad(&mut self, rejects: &[&PendingReject], message: &str) {
        for reject in rejects {
            let problem = Problem {
                column: None,
                message: message.to_string(),
            };
            self.tried(reject, Some(vec![problem]));
        }
    }

    /// A group written: each reject replayed, or still bad with the
    /// problems its record (numbered from 1 in the group's body) met.
    fn group_written(
        &mut self,
        rejects: &[&PendingReject],
        listed: Option<&RejectSpool>,
        written: RowsWritten,
    ) -> WriteResult<()> {
        let mut bad: BTreeMap<u64, Vec<Problem>> = listed
            .map(|listed| {
                listed
                    .listed()
                    .iter()
                    .map(|l| (l.record, l.problems.clone()))
                    .collect()
            })
            .unwrap_or_default();
        for (number, reject) in (1u64..).zip(rejects) {
            self.tried(reject, bad.remove(&number));
        }
        self.add(written.receipt, written.deltas)
    }

    /// Adds one group's write.
    fn add(
        &mut self,
        written: RowsReceipt,
        deltas: Vec<(Period, ContentDelta)>,
    ) -> WriteResult<()> {
        let r = &mut self.receipt;
        r.rows_written += written.rows_written;
        r.inserted += written.inserted;
        r.updated += written.updated;
        r.unchanged += written.unchanged;
        r.history_written += written.history_written;
        r.duplicates += written.duplicates;
        for after in written.partitions {
            *self.partitions.entry(after.ds).or_default() += after.row_delta;
        }
        for (ds, delta) in deltas {
            self.deltas
                .entry(ds)
                .or_default()
                .merge(&delta)
                .ok_or(StoreError::Corrupt("a partition's row count overflows"))?;
        }
        Ok(())
    }

    fn finish(
        self,
        ticket: &LoadTicket,
        def: &TableDef,
        expired: u64,
        more: bool,
    ) -> ReplayWritten {
        let receipt = ReplayReceipt {
            load_id: ticket.load_id,
            table: def.name.to_string(),
            mode: REPLAY_MODE,
            expired,
            more_pending: more,
            changed: self.receipt.rows_written > 0 || self.receipt.history_written > 0,
            partitions: self
                .partitions
                .into_iter()
                .map(|(ds, row_delta)| PartitionAfter { ds, row_delta })
                .collect(),
            ..self.receipt
        };
        ReplayWritten {
            receipt,
            deltas: self.deltas.into_iter().collect(),
        }
    }
}
