//! `schema: evolve`: a body's new fields become columns, and its values too
//! wide for their columns widen them, before its rows are written.
//!
//! The body is first read so that it can be read again (in memory when
//! small, else spooled to a temporary file) and scanned for what its rows
//! need of the table. If they need anything, the table is changed under the
//! table's lock, which reads the definition again (`catalog::evolve_to_fit`):
//! concurrent writers bringing fields merge into one change (or a few),
//! the later ones finding theirs made already, and a writer that needs a
//! column waits on the lock until it exists. Then the body is read again,
//! against the table as it is now, and written as any other.
//!
//! A POST changes the table in its own transaction: the change commits with
//! its rows, or not at all, and holds the table until then. A PUT, whose
//! rows are staged before its swap's transaction, changes it on its stage's
//! connection first: the change stays even if the PUT is then refused.

use std::io::{Seek, SeekFrom};

use bytes::Bytes;
use sha2::{Digest, Sha256};

use crate::ingest::{BodyFormat, EncodeOptions};
use crate::pipeline::error::{WriteError, WriteResult};
use crate::pipeline::intake::body::BodyReader;
use crate::pipeline::intake::decode::{
    decode_whole, read_small, spawn_decoder, BodyRead, DecodeJob, Quarantine, RepeatCheck,
};
use crate::pipeline::intake::spool::{hash_rest, spool_body, spool_failed, Spooled};
use crate::pipeline::intake::target::Target;
use crate::pipeline::intake::ticket::LoadTicket;
use crate::pipeline::Pipeline;
use crate::schema::{check_width, SchemaPolicy, SchemaWants};
use crate::store::catalog::evolve_to_fit;
use sqlx::PgConnection;

/// A body read so that it can be read again.
pub struct Rereadable(Kept);

/// Where: in memory when small, else in a temporary file.
enum Kept {
    Memory(Bytes),
    File(std::fs::File),
}

/// A write's body after `fit_table_to_body`: as it came (a table not under
/// `evolve`), or kept so that it can be read as often as needed.
pub enum FittedBody {
    Once(Option<BodyReader>),
    Again(Rereadable),
    /// The body of the day it is sent for, told by its hash when the spool
    /// had no room to keep it (see `DayBody`): there is nothing to write.
    DaysOwn,
}

/// The body a PUT's day was built from, to tell a re-sent one by its hash
/// alone: a full spool then does not refuse a write that has nothing to do.
pub struct DayBody<'a> {
    /// The hash begun with what the bytes mean (see `body_hash_prefix`).
    pub hash: Sha256,
    /// The day's body's hash, hex.
    pub body_sha256: &'a str,
}

impl FittedBody {
    /// The body from its start; `None` when it came once and was taken.
    pub fn reader(&mut self) -> WriteResult<Option<BodyReader>> {
        match self {
            FittedBody::Once(body) => Ok(body.take()),
            FittedBody::Again(body) => body.reader().map(Some),
            FittedBody::DaysOwn => Ok(None),
        }
    }

    /// The body kept to be read again, if it was.
    pub fn kept(&self) -> Option<&Rereadable> {
        match self {
            FittedBody::Once(_) | FittedBody::DaysOwn => None,
            FittedBody::Again(body) => Some(body),
        }
    }
}

/// What a body is read as: its format and encoding options, for a load;
/// and how long a change to its table may wait for locks (`None`: as long
/// as the caller's transaction lets it).
#[derive(Clone, Copy)]
pub struct BodyReading<'a> {
    pub format: BodyFormat,
    pub options: &'a EncodeOptions,
    pub ticket: &'a LoadTicket,
    pub lock_wait: Option<std::time::Duration>,
    /// Bad rows are set aside rather than refuse the body (a replay's): the
    /// others' needs are met even when some rows are bad.
    pub set_aside_bad_rows: bool,
}

/// What a scan found.
enum Scan {
    /// The rows fit the table as it is (or are bad whatever it becomes).
    Fits,
    Wants(SchemaWants),
}

impl Pipeline {
    /// Under `schema: evolve`, the table changed to fit the body (see the
    /// module's doc), and the body to read again; any other table and its
    /// body as they came. `day`: a PUT's day that exists, whose own body
    /// is answered `DaysOwn` when the spool is full.
    pub(crate) async fn fit_table_to_body(
        &self,
        conn: &mut PgConnection,
        target: Target,
        reading: BodyReading<'_>,
        body: BodyReader,
        day: Option<DayBody<'_>>,
    ) -> WriteResult<(Target, FittedBody)> {
        if target.def().schema != SchemaPolicy::Evolve {
            return Ok((target, FittedBody::Once(Some(body))));
        }
        let Some(body) = Rereadable::read(body, self, day).await? else {
            return Ok((target, FittedBody::DaysOwn));
        };
        let target = self.fit_again(conn, target, reading, Some(&body)).await?;
        Ok((target, FittedBody::Again(body)))
    }

    /// The table changed to fit `body` (once more: after another writer
    /// changed it, say); a body read once is taken as fitting.
    pub(crate) async fn fit_again(
        &self,
        conn: &mut PgConnection,
        target: Target,
        reading: BodyReading<'_>,
        body: Option<&Rereadable>,
    ) -> WriteResult<Target> {
        let Some(body) = body else {
            return Ok(target);
        };
        let job = DecodeJob {
            collect_wants: true,
            repeats: RepeatCheck::LeaveToIndex,
            quarantine: reading.set_aside_bad_rows.then_some(Quarantine::List),
            ..DecodeJob::new(
                &self.settings,
                target.def().clone(),
                reading.options.clone(),
                reading.ticket,
                reading.format,
            )
        };
        match body.scan(job).await? {
            Scan::Fits => Ok(target),
            Scan::Wants(wants) => self.fit(conn, target, &wants, reading).await,
        }
    }

    /// The table given what `wants` asks: a stored one changed (see
    /// `Store::evolve_to_fit`), a new one's definition grown before it is
    /// created.
    async fn fit(
        &self,
        conn: &mut PgConnection,
        target: Target,
        wants: &SchemaWants,
        reading: BodyReading<'_>,
    ) -> WriteResult<Target> {
        Ok(match target {
            Target::Stored(def) => {
                let load_id = reading.ticket.load_id;
                let def = evolve_to_fit(conn, &def.name, wants, load_id, reading.lock_wait)
                    .await?
                    .ok_or_else(|| WriteError::TableNotFound(def.name.clone()))?;
                self.definitions.remember(&def);
                Target::Stored(def)
            }
            Target::Inferred(def) => {
                let grown = def.apply(&wants.changes_for(&def));
                check_width(&grown.columns)?;
                Target::Inferred(grown)
            }
        })
    }
}

impl Rereadable {
    /// A body already in memory.
    pub fn in_memory(body: Bytes) -> Self {
        Rereadable(Kept::Memory(body))
    }

    /// Reads `body` whole when small, else spools it to a temporary file.
    /// When the spool is full the body is read to its end and hashed: it is
    /// `day`'s own (`None`: nothing to keep), or the write is refused
    /// (503 `spool_full`).
    async fn read(
        body: BodyReader,
        pipeline: &Pipeline,
        day: Option<DayBody<'_>>,
    ) -> WriteResult<Option<Self>> {
        let body = match read_small(body, pipeline.settings.small_body_bytes()).await? {
            BodyRead::Whole(bytes) => return Ok(Some(Rereadable(Kept::Memory(bytes.into())))),
            BodyRead::Large(body) => body,
        };
        let dir = pipeline.settings.spool_dir.as_deref();
        let mut hash = day
            .as_ref()
            .map_or_else(Sha256::default, |d| d.hash.clone());
        let (error, rest) = match spool_body(body, &mut hash, dir).await? {
            Spooled::Kept(file) => return Ok(Some(Rereadable(Kept::File(file.into_std().await)))),
            Spooled::Full { error, rest } => (error, rest),
        };
        let Some(day) = day else {
            return Err(spool_failed(error));
        };
        hash_rest(rest, &mut hash).await?;
        if hex::encode(hash.finalize()) == day.body_sha256 {
            return Ok(None);
        }
        Err(spool_failed(error))
    }

    /// What the body's rows need of the table `job` is for. A body that
    /// cannot be read whole, or has bad rows other than those, changes
    /// nothing: the pass that writes it reports what is wrong with it.
    async fn scan(&self, job: DecodeJob) -> WriteResult<Scan> {
        let decoded = match &self.0 {
            Kept::Memory(body) => decode_whole(&job, body).0,
            Kept::File(file) => {
                let mut decoding = spawn_decoder(job, Box::new(rewound(file)?));
                // The scan writes nothing: its rows are read and let go.
                while decoding.chunks.recv().await.is_some() {}
                decoding.decoder.await?
            }
        };
        if let Some(name) = decoded.wants.refused {
            return Err(WriteError::Inferred(name.into()));
        }
        let refused = decoded.read_error.is_some() || !decoded.errors.is_empty();
        Ok(if refused || decoded.wants.is_empty() {
            Scan::Fits
        } else {
            Scan::Wants(decoded.wants)
        })
    }

    /// The body, from its start.
    fn reader(&self) -> WriteResult<BodyReader> {
        Ok(match &self.0 {
            Kept::Memory(body) => Box::new(std::io::Cursor::new(body.clone())),
            Kept::File(file) => Box::new(rewound(file)?),
        })
    }
}

/// `file` (a handle of its own on it) from its start.
fn rewound(file: &std::fs::File) -> WriteResult<tokio::fs::File> {
    let mut file = file.try_clone().map_err(spool_failed)?;
    file.seek(SeekFrom::Start(0)).map_err(spool_failed)?;
    Ok(tokio::fs::File::from_std(file))
}
