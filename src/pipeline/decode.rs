//! The blocking half of every write: a body read record by record, each good
//! row encoded as binary COPY data and handed to the async side in chunks
//! through a small channel (so memory stays bounded), each bad row counted
//! and, up to a limit, listed.

use std::collections::{BTreeMap, BTreeSet};
use std::io::{self, BufReader};
use std::ops::ControlFlow;

use bytes::Bytes;
use sha2::{Digest, Sha256};
use tokio::io::AsyncReadExt;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio_util::io::SyncIoBridge;
use uuid::Uuid;

use super::body::{classify_read_error, CHUNK_BYTES};
use super::{BodyReader, WriteError, WriteResult};
use crate::binary_copy;
use crate::ingest::formats::ReadError;
use crate::ingest::DELETED_FIELD;
use crate::ingest::{
    not_a_column, read_records, BadRow, BodyFormat, ContentDelta, ContentHash, EncodeOptions,
    ErrorLog, RawRecord, RecordSink, RowEncoder, RowError,
};
use crate::period::Period;
use crate::schema::{SchemaPolicy, SchemaWants, TableDef};
use crate::store::rejects::{Reject, RejectSource, RejectSpool};
use crate::store::{StoreError, StoreResult};

/// Chunks in flight between the decoder and COPY (bounds memory).
const CHUNKS_IN_FLIGHT: usize = 8;

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

pub struct Decoding {
    pub decoder: JoinHandle<Decoded>,
    /// Binary COPY data; ends with an error item when the body is refused,
    /// so that a COPY reading it aborts instead of committing half a body.
    pub chunks: mpsc::Receiver<io::Result<Bytes>>,
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
    pub load_id: Uuid,
    pub format: BodyFormat,
    /// The body's SHA-256 starts from this (see `Decoded::body_sha256`).
    pub hash_prefix: Sha256,
    /// Most bad rows a refusal lists.
    pub max_listed_errors: usize,
    /// The largest record (see `read_records`).
    pub max_record_bytes: usize,
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

/// Bad rows set aside while the good ones are written.
#[derive(Clone, Debug)]
pub enum Quarantine {
    /// Kept in the rejects store as coming from this load.
    Keep(RejectSource),
    /// Only listed with their problems (a replay's: the rejects it tried
    /// are updated instead).
    List,
}

/// Starts decoding `body` on a blocking thread.
pub fn spawn_decoder(job: DecodeJob, body: BodyReader) -> Decoding {
    let (tx, chunks) = mpsc::channel(CHUNKS_IN_FLIGHT);
    let reader = HashingReader {
        inner: SyncIoBridge::new(body),
        hash: job.hash_prefix.clone(),
    };
    let decoder = tokio::task::spawn_blocking(move || {
        let reader = BufReader::with_capacity(CHUNK_BYTES, reader);
        decode(&job, reader, Some(tx), CHUNK_BYTES + 4096).0
    });
    Decoding { decoder, chunks }
}

/// A body decoded whole on the calling task, or being decoded on a
/// blocking thread.
pub enum Decode {
    /// The whole body's verdict, and its COPY data if it was good.
    Whole(Box<Decoded>, Option<Bytes>),
    Streaming(Decoding),
}

/// Decodes a body of at most `whole_up_to` bytes (after gunzip) on this
/// task, all at once: a few hundred rows take less than handing them to
/// another thread would. A larger body goes to `spawn_decoder`, the bytes
/// read so far first.
pub async fn decode_small_or_spawn(
    job: DecodeJob,
    body: BodyReader,
    whole_up_to: usize,
) -> WriteResult<Decode> {
    Ok(match read_small(body, whole_up_to).await? {
        BodyRead::Whole(body) => {
            let (decoded, copy) = decode_whole(&job, &body);
            Decode::Whole(Box::new(decoded), copy)
        }
        BodyRead::Large(body) => Decode::Streaming(spawn_decoder(job, body)),
    })
}

/// A body read whole, or too large for that.
pub enum BodyRead {
    Whole(Vec<u8>),
    /// The body still to read (the bytes read so far first).
    Large(BodyReader),
}

/// Reads `body` whole when it is at most `whole_up_to` bytes.
pub async fn read_small(mut body: BodyReader, whole_up_to: usize) -> WriteResult<BodyRead> {
    let mut head = Vec::new();
    let limit = u64::try_from(whole_up_to)
        .unwrap_or(u64::MAX)
        .saturating_add(1);
    (&mut body)
        .take(limit)
        .read_to_end(&mut head)
        .await
        .map_err(|e| classify_read_error(&e))?;
    if head.len() > whole_up_to {
        return Ok(BodyRead::Large(Box::new(
            std::io::Cursor::new(head).chain(body),
        )));
    }
    Ok(BodyRead::Whole(head))
}

/// Decodes a whole (small) body on this task: its verdict, and its COPY
/// data if it was good.
pub fn decode_whole(job: &DecodeJob, body: &[u8]) -> (Decoded, Option<Bytes>) {
    let reader = HashingReader {
        inner: body,
        hash: job.hash_prefix.clone(),
    };
    // The rows' binary form is about the size of their text, plus the
    // system columns (about a hundred bytes a row).
    let out_capacity = body.len() + body.len() / 2 + 4096;
    decode(job, BufReader::new(reader), None, out_capacity)
}

/// Waits for the decoder and turns what it refused into the answer.
pub async fn finish(decoder: JoinHandle<Decoded>) -> WriteResult<Decoded> {
    verdict(decoder.await?)
}

/// The decoder's verdict: the body's refusal, if it was refused.
pub fn verdict(mut decoded: Decoded) -> WriteResult<Decoded> {
    let rows_received = decoded.rows_received;
    match &decoded.read_error {
        Some(ReadError::Io(e)) => return Err(classify_read_error(e).into()),
        Some(ReadError::Malformed(e)) => {
            let error = decoded
                .header_refusal
                .clone()
                .unwrap_or_else(|| BadRow::from(e.clone()));
            return Err(WriteError::Malformed {
                error: Box::new(error),
                rows_received,
            });
        }
        Some(ReadError::RecordTooLarge { line, max }) => {
            return Err(WriteError::RecordTooLarge {
                line: *line,
                max: *max,
                rows_received,
            })
        }
        None => {}
    }
    if !decoded.wants.is_empty() {
        return Err(WriteError::Internal(anyhow::anyhow!(
            "a body that needs the table changed was taken as decoded"
        )));
    }
    if let Some(e) = decoded.spool_error.take() {
        return Err(super::spool::spool_failed(e));
    }
    if !decoded.errors.is_empty() {
        return Err(WriteError::BadRows {
            count: decoded.errors.count,
            rows_received,
            errors: decoded.errors.listed.clone(),
        });
    }
    Ok(decoded)
}

/// A COPY's failure, once the decoder's verdict is known: a source failure
/// was the decoder's doing and `finish` has reported it; anything else is the
/// database's.
pub fn copy_result<T>(copied: StoreResult<T>) -> WriteResult<T> {
    match copied {
        Err(StoreError::RowSource(e)) => Err(WriteError::Internal(
            anyhow::Error::new(e).context("the row source failed, yet the decoder did not say why"),
        )),
        other => Ok(other?),
    }
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
}

/// Takes the SHA-256 of everything read through it.
struct HashingReader<R> {
    inner: R,
    hash: Sha256,
}

impl<R: io::Read> io::Read for HashingReader<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.hash.update(&buf[..n]);
        Ok(n)
    }
}

/// The decoder's record sink: encodes the good rows into COPY chunks,
/// counts and lists the bad ones. Once a row is bad nothing more is sent
/// (the load will be refused), but reading goes on so the answer can list
/// every bad row; under a quarantine a bad row is set aside instead
/// (`rejects`) and the good rows go on.
struct Encoding<'d> {
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
        for (i, name) in names.iter().enumerate() {
            let tombstone = self.tombstones_allowed && *name == DELETED_FIELD;
            let message = if self.def.column(name).is_none() && !tombstone && !unknown_taken {
                not_a_column(self.def, name)
            } else if names[..i].contains(name) {
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
}

impl Encoding<'_> {
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
    fn close(&mut self, read_error: Option<&ReadError>) -> Option<Bytes> {
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

/// The blocking half: reads every record through an `Encoding` sink, which
/// sends the COPY data to `chunks` or, without, keeps it whole (returned
/// when the body was good).
fn decode<R: io::Read>(
    job: &DecodeJob,
    mut reader: BufReader<HashingReader<R>>,
    chunks: Option<mpsc::Sender<io::Result<Bytes>>>,
    out_capacity: usize,
) -> (Decoded, Option<Bytes>) {
    let mut encoder = RowEncoder::new(&job.def, job.options.clone(), job.load_id);
    if job.collect_wants {
        encoder.collect_wants();
    }
    let mut sink = Encoding {
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
    };
    sink.out.extend_from_slice(binary_copy::HEADER);
    let read_error = read_records(job.format, &mut reader, &mut sink, job.max_record_bytes).err();
    let whole = sink.close(read_error.as_ref());
    let decoded = Decoded {
        rows_received: sink.rows_received,
        tombstones: sink.tombstones,
        maybe_repeated: sink.repeats.maybe_repeated(),
        in_key_order: sink.encoder.in_key_order(),
        input_hash: sink.input_hash,
        discarded_fields: sink.encoder.discarded_fields(),
        wants: sink.encoder.wants().cloned().unwrap_or_default(),
        periods: sink.periods,
        additions: sink.additions,
        body_sha256: hex::encode(reader.into_inner().hash.finalize()),
        errors: sink.errors,
        rejects: sink.rejects,
        set_aside: sink.set_aside,
        spool_error: sink.spool_error,
        read_error,
        header_refusal: sink.header_refusal,
    };
    (decoded, whole)
}
