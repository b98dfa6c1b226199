//! The decoder's record sink and what it reports: each good row of a body
//! encoded as binary COPY data, each bad one counted, listed, or set aside
//! under a quarantine; and the sinks of consecutive parts of one body joined
//! into one (see `decode_blocks`).

use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::io;
use std::ops::ControlFlow;

use bytes::Bytes;
use sha2::Sha256;
use tokio::sync::mpsc;

use super::body::CHUNK_BYTES;
use super::ticket::LoadTicket;
use crate::binary_copy;
use crate::config::Settings;
use crate::ids::LoadId;
use crate::ingest::formats::{ReadError, ReadLimits};
use crate::ingest::reject_spool::{Reject, RejectSource, RejectSpool};
use crate::ingest::DELETED_FIELD;
use crate::ingest::{
    not_a_column, read_records, BadRow, BodyFormat, ContentDelta, ContentHash, EncodeOptions,
    ErrorLog, RawRecord, RecordSink, RowEncoder, RowError,
};
use crate::period::Period;
use crate::schema::{ColumnType, SchemaPolicy, SchemaWants, TableDef};

/// What the decoder saw of the whole body.
pub struct Decoded {
    pub rows_received: u64,
    /// Rows marked `"_deleted": true`.
    pub tombstones: u64,
    /// Whether two rows may share a row id (so duplicates must be resolved);
    /// always true when not watched.
    pub maybe_repeated: bool,
    /// Whether the rows came in the order of the table's unique index.
    pub in_key_order: bool,
    /// The content hash of the rows as received (before duplicates collapse).
    pub input_hash: ContentHash,
    /// Values of unknown fields dropped (`schema: discard_unknown`).
    pub discarded_fields: u64,
    /// Under `schema: evolve` with `DecodeJob::collect_wants`: what rows
    /// need of the table. When not empty, the rows that need it were not
    /// encoded: the body must be read again once the table has it.
    pub wants: SchemaWants,
    /// The partitions the rows belong to, in order.
    pub periods: BTreeSet<Period>,
    /// What the rows other than tombstones add to each partition if every
    /// one of them is written (see `store::write::merge::LoadRows`).
    pub additions: BTreeMap<Period, ContentDelta>,
    /// SHA-256 of `hash_prefix` and the body.
    pub body_sha256: String,
    pub errors: ErrorLog,
    /// Under `bad_rows: quarantine`: the bad rows, to be kept with the load.
    pub rejects: Option<RejectSpool>,
    /// The first of them (as many as a refusal lists), with their problems.
    pub set_aside: Vec<BadRow>,
    /// Why the rejects could not be spooled (the load fails).
    pub spool_error: Option<io::Error>,
    pub read_error: Option<ReadError>,
    /// Every problem of a refused CSV header (`read_error` has the first).
    pub header_refusal: Option<BadRow>,
}

/// Who finds rows that share a row id.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RepeatCheck {
    /// The decoder watches, so that a body of distinct rows skips the
    /// database's duplicate work (a POST's).
    Watch,
    /// The stage's unique index finds them (a PUT's), at no extra cost.
    LeaveToIndex,
}

/// What to decode a body as.
pub struct DecodeJob {
    pub def: TableDef,
    pub options: EncodeOptions,
    pub repeats: RepeatCheck,
    pub load_id: LoadId,
    pub format: BodyFormat,
    /// The body's SHA-256 starts from this (see `Decoded::body_sha256`).
    pub hash_prefix: Sha256,
    /// Most bad rows a refusal lists.
    pub max_listed_errors: usize,
    /// The largest record (see `read_records`).
    pub max_record_bytes: usize,
    /// A Parquet body's largest row group, uncompressed.
    pub max_row_group_bytes: u64,
    /// What becomes of bad rows other than refusing the body (`None`: the
    /// body is refused on any bad row).
    pub quarantine: Option<Quarantine>,
    /// Where a large spool of rejects goes (the system's temporary directory
    /// when `None`).
    pub spool_dir: Option<std::path::PathBuf>,
    /// Under `schema: evolve`, collect what rows need of the table
    /// (`Decoded::wants`) instead of refusing them.
    pub collect_wants: bool,
}

impl DecodeJob {
    /// A load's body decoded for `def`, within the settings' bounds, its
    /// repeated rows watched for (a merge's; a stage leaves them to its
    /// index: `RepeatCheck::LeaveToIndex`).
    pub fn new(
        settings: &Settings,
        def: TableDef,
        options: EncodeOptions,
        ticket: &LoadTicket,
        format: BodyFormat,
    ) -> DecodeJob {
        DecodeJob {
            def,
            options,
            repeats: RepeatCheck::Watch,
            load_id: ticket.load_id,
            format,
            hash_prefix: Sha256::default(),
            max_listed_errors: settings.max_listed_errors,
            max_record_bytes: settings.max_record_bytes(),
            max_row_group_bytes: settings.max_row_group_bytes,
            quarantine: None,
            spool_dir: settings.spool_dir.clone(),
            collect_wants: false,
        }
    }
}

/// Bad rows set aside while the good ones are written.
#[derive(Clone, Debug)]
pub enum Quarantine {
    /// Kept in the rejects store as coming from this load.
    Keep(RejectSource),
    /// Only listed with their problems (a replay's: the rejects it tried
    /// are updated instead).
    List,
}

/// Watches for two rows with one row id, in bounded memory: up to `LIMIT`
/// ids (by a 16-byte prefix) are remembered; past that, or on a prefix seen
/// twice, it answers "maybe", and the database resolves duplicates the
/// thorough way. A body of distinct rows under the limit skips that work.
struct RepeatWatch {
    seen: std::collections::HashSet<[u8; 16]>,
    maybe: bool,
    /// Off when the caller resolves duplicates in the database anyway.
    on: bool,
}

impl RepeatWatch {
    const LIMIT: usize = 200_000;

    fn new(check: RepeatCheck) -> Self {
        let on = check == RepeatCheck::Watch;
        RepeatWatch {
            seen: Default::default(),
            maybe: !on,
            on,
        }
    }

    fn see(&mut self, row_id: &[u8; 32]) {
        if self.maybe || !self.on {
            return;
        }
        let prefix: [u8; 16] = row_id[..16].try_into().expect("16 of 32 bytes");
        if self.seen.len() >= Self::LIMIT || !self.seen.insert(prefix) {
            self.maybe = true;
            self.seen = Default::default();
        }
    }

    fn maybe_repeated(&self) -> bool {
        self.maybe
    }

    /// Joins the watch of the next rows of the body.
    fn then(&mut self, next: RepeatWatch) {
        if next.maybe {
            self.maybe = true;
            self.seen = Default::default();
        }
        for prefix in next.seen {
            if self.maybe {
                return;
            }
            if self.seen.len() >= Self::LIMIT || !self.seen.insert(prefix) {
                self.maybe = true;
                self.seen = Default::default();
            }
        }
    }
}

/// The decoder's record sink: encodes the good rows into COPY chunks,
/// counts and lists the bad ones. Once a row is bad nothing more is sent
/// (the load will be refused), but reading goes on so the answer can list
/// every bad row; under a quarantine a bad row is set aside instead
/// (`rejects`) and the good rows go on.
pub struct Encoding<'d> {
    encoder: RowEncoder<'d>,
    def: &'d TableDef,
    out: Vec<u8>,
    errors: ErrorLog,
    header_refusal: Option<BadRow>,
    input_hash: ContentHash,
    periods: BTreeSet<Period>,
    additions: BTreeMap<Period, ContentDelta>,
    rows_received: u64,
    tombstones: u64,
    tombstones_allowed: bool,
    repeats: RepeatWatch,
    /// Where full chunks go; `None` keeps everything in `out` (a small
    /// body, decoded whole).
    chunks: Option<mpsc::Sender<io::Result<Bytes>>>,
    receiver_gone: bool,
    /// Under `bad_rows: quarantine`, where bad rows go instead of refusing
    /// the body.
    rejects: Option<RejectSpool>,
    /// The first bad rows set aside, up to `errors`' listing bound.
    set_aside: Vec<BadRow>,
    spool_error: Option<io::Error>,
    /// A CSV body's header as sent (each reject keeps it).
    csv_header: Option<Vec<u8>>,
}

impl RecordSink for Encoding<'_> {
    /// Checks every header name, so that one answer names each unknown or
    /// repeated column; the whole list waits in `header_refusal`, since the
    /// reader takes one error only.
    fn header(&mut self, raw: &[u8], names: &[&str]) -> Result<(), RowError> {
        if self.rejects.is_some() {
            self.csv_header = Some(raw.to_vec());
        }
        let mut refusal: Option<BadRow> = None;
        // Unknown names are dropped (`discard_unknown`) or wanted as columns
        // (`evolve`, while wants are collected) field by field.
        let unknown_taken =
            self.def.schema == SchemaPolicy::DiscardUnknown || self.encoder.wants().is_some();
        // A set, not a scan of the names before: a header may hold
        // hundreds of thousands of them.
        let mut seen = HashSet::with_capacity(names.len());
        for name in names {
            if refusal.as_ref().is_some_and(BadRow::is_full) {
                break; // the answer lists no more; a long header costs no more
            }
            let tombstone = self.tombstones_allowed && *name == DELETED_FIELD;
            let message = if self.def.column(name).is_none() && !tombstone && !unknown_taken {
                not_a_column(self.def, name)
            } else if !seen.insert(*name) {
                "the header names this column twice".into()
            } else {
                continue;
            };
            let problem = RowError {
                line: 1,
                record: 0,
                column: Some(name.to_string()),
                message,
            };
            match &mut refusal {
                Some(row) => row.add(problem),
                None => refusal = Some(BadRow::from(problem)),
            }
        }
        let Some(row) = refusal else { return Ok(()) };
        let first = RowError {
            line: row.line,
            record: row.record,
            column: row.column.clone(),
            message: row.message.clone(),
        };
        self.header_refusal = Some(row);
        Err(first)
    }

    fn field_types(&mut self, names: &[&str], types: &[Option<ColumnType>]) {
        self.encoder.set_field_types(names, types);
    }

    /// Only a quarantine keeps a bad row's raw form.
    fn wants_raw(&self) -> bool {
        self.rejects.is_some()
    }

    fn record(
        &mut self,
        raw: Option<&[u8]>,
        record: Result<RawRecord<'_>, RowError>,
    ) -> ControlFlow<()> {
        self.rows_received += 1;
        if self.rejects.is_some() {
            self.encode_or_keep(raw, record);
        } else {
            let mut errors = std::mem::take(&mut self.errors);
            match record {
                Err(e) => errors.push(e),
                Ok(record) => self.encode(&record, &mut errors),
            }
            self.errors = errors;
        }
        self.send_full_chunk()
    }
}

impl<'d> Encoding<'d> {
    /// A sink for `job`'s rows: it sends its COPY data to `chunks` a chunk
    /// at a time or, without, keeps it whole (see `close`).
    pub fn new(
        job: &'d DecodeJob,
        chunks: Option<mpsc::Sender<io::Result<Bytes>>>,
        out_capacity: usize,
    ) -> Self {
        let mut encoder = RowEncoder::new(&job.def, job.options.clone(), job.load_id);
        if job.collect_wants {
            encoder.collect_wants();
        }
        Encoding {
            encoder,
            def: &job.def,
            out: Vec::with_capacity(out_capacity),
            errors: ErrorLog::new(job.max_listed_errors),
            header_refusal: None,
            input_hash: ContentHash::default(),
            periods: BTreeSet::new(),
            additions: BTreeMap::new(),
            rows_received: 0,
            tombstones: 0,
            tombstones_allowed: job.options.tombstones,
            repeats: RepeatWatch::new(job.repeats),
            chunks,
            receiver_gone: false,
            rejects: job.quarantine.clone().map(|q| match q {
                Quarantine::Keep(source) => RejectSpool::copying(source, job.spool_dir.clone()),
                Quarantine::List => RejectSpool::listing(),
            }),
            set_aside: Vec::new(),
            spool_error: None,
            csv_header: None,
        }
    }

    /// A sink for `job` (see `new`) that has read the whole of `body` on
    /// this thread, and what stopped the reading early (a body that is
    /// not of its format, or a failed read).
    pub fn read_whole_body(
        job: &'d DecodeJob,
        chunks: Option<mpsc::Sender<io::Result<Bytes>>>,
        out_capacity: usize,
        body: impl io::BufRead,
    ) -> (Self, Option<ReadError>) {
        let mut sink = Encoding::new(job, chunks, out_capacity);
        sink.begin_copy_data();
        let limits = ReadLimits {
            max_record: job.max_record_bytes,
            max_row_group_bytes: job.max_row_group_bytes,
            spool_dir: job.spool_dir.clone(),
        };
        let read_error = read_records(job.format, body, &mut sink, &limits).err();
        (sink, read_error)
    }

    /// Starts the COPY data (with its header: a sink of a part of a body
    /// that another joins has none).
    pub fn begin_copy_data(&mut self) {
        self.out.extend_from_slice(binary_copy::HEADER);
    }

    /// Joins the sink of the next part of the body (its records counted
    /// from 1 again): its counts, its errors, and its COPY data, sent on
    /// while no row so far was bad.
    pub fn then(&mut self, next: Encoding<'_>) -> ControlFlow<()> {
        let records_before = self.rows_received;
        self.rows_received += next.rows_received;
        self.tombstones += next.tombstones;
        self.errors.append(next.errors, records_before);
        self.input_hash.add_all(&next.input_hash);
        self.periods.extend(next.periods);
        for (period, delta) in &next.additions {
            let sum = self.additions.entry(*period).or_default();
            sum.merge(delta).expect("a body's rows fit in i64");
        }
        self.repeats.then(next.repeats);
        self.encoder.then(&next.encoder);
        if self.errors.is_empty() {
            self.out.extend_from_slice(&next.out);
        }
        self.send_full_chunk()
    }

    /// Sends the COPY data on once a chunk's worth is ready; none once a
    /// row was bad (the load will be refused). Breaks when COPY is gone.
    fn send_full_chunk(&mut self) -> ControlFlow<()> {
        if !self.errors.is_empty() || self.spool_error.is_some() {
            self.out.clear();
            return ControlFlow::Continue(());
        }
        let Some(chunks) = &self.chunks else {
            return ControlFlow::Continue(());
        };
        if self.out.len() >= CHUNK_BYTES {
            let chunk = std::mem::replace(&mut self.out, Vec::with_capacity(CHUNK_BYTES + 4096));
            if chunks.blocking_send(Ok(Bytes::from(chunk))).is_err() {
                // COPY has failed; its error is the one to report.
                self.receiver_gone = true;
                return ControlFlow::Break(());
            }
        }
        ControlFlow::Continue(())
    }

    /// What the sink saw of the whole body, once read (and closed).
    pub fn into_decoded(self, read_error: Option<ReadError>, body_sha256: String) -> Decoded {
        Decoded {
            rows_received: self.rows_received,
            tombstones: self.tombstones,
            maybe_repeated: self.repeats.maybe_repeated(),
            in_key_order: self.encoder.in_key_order(),
            input_hash: self.input_hash,
            discarded_fields: self.encoder.discarded_fields(),
            wants: self.encoder.wants().cloned().unwrap_or_default(),
            periods: self.periods,
            additions: self.additions,
            body_sha256,
            errors: self.errors,
            rejects: self.rejects,
            set_aside: self.set_aside,
            spool_error: self.spool_error,
            read_error,
            header_refusal: self.header_refusal,
        }
    }
    /// Under quarantine: the record encoded, or, when it is bad, spooled as
    /// a reject with every problem it has.
    fn encode_or_keep(&mut self, raw: Option<&[u8]>, record: Result<RawRecord<'_>, RowError>) {
        let mut problems = ErrorLog::new(1);
        let (line, number, ds) = match record {
            Err(e) => {
                let at = (e.line, e.record, None);
                problems.push(e);
                at
            }
            Ok(record) => {
                self.encode(&record, &mut problems);
                (record.line, record.record, self.encoder.last_period())
            }
        };
        let (Some(problems), Some(spool)) = (problems.listed.first(), &mut self.rejects) else {
            return;
        };
        if self.set_aside.len() < self.errors.max_listed() {
            self.set_aside.push(problems.clone());
        }
        let reject = Reject {
            record: number,
            line,
            ds,
            raw,
            csv_header: self.csv_header.as_deref(),
            problems,
        };
        if let Err(e) = spool.push(&reject) {
            self.spool_error = Some(e);
        }
    }

    fn encode(&mut self, record: &RawRecord<'_>, errors: &mut ErrorLog) {
        if let Some(row) = self.encoder.encode(record, &mut self.out, errors) {
            self.input_hash.add(&row.row_hash);
            // Most bodies hold one partition: no set insert for a row of the
            // greatest one seen so far.
            if row.period.is_some() && row.period != self.periods.last().copied() {
                self.periods.extend(row.period);
            }
            self.tombstones += u64::from(row.deleted);
            if let (Some(period), false) = (row.period, row.deleted) {
                self.add(period, &row.row_hash);
            }
            self.repeats.see(&row.row_id);
        }
    }

    /// Counts a row into its partition's additions (most bodies hold one
    /// partition: no map search for a row of the last one).
    fn add(&mut self, period: Period, row_hash: &[u8; 32]) {
        match self.additions.last_entry() {
            Some(last) if *last.key() == period => last.into_mut().add(row_hash),
            _ => self.additions.entry(period).or_default().add(row_hash),
        }
    }

    /// Ends the COPY data: its trailer when the body was good, otherwise an
    /// error item, which makes the COPY abort instead of committing a
    /// partial stage. Returns the data when it was kept whole (and good).
    pub fn close(&mut self, read_error: Option<&ReadError>) -> Option<Bytes> {
        let wanting = self.encoder.wants().is_some_and(|w| !w.is_empty());
        let good = self.errors.is_empty() && self.spool_error.is_none() && !wanting;
        let end = if read_error.is_none() && good && !self.receiver_gone {
            self.out.extend_from_slice(binary_copy::TRAILER);
            Ok(Bytes::from(std::mem::take(&mut self.out)))
        } else {
            Err(io::Error::other("the body was refused"))
        };
        match &self.chunks {
            Some(chunks) => {
                let _ = chunks.blocking_send(end);
                None
            }
            None => end.ok(),
        }
    }
}
