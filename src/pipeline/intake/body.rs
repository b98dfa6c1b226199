//! A request body as a stream of bytes in a known format: the content type
//! checked, gzip undone, the size limit enforced while reading, never buffered;
//! and the chunk size bodies are read and handed on in.

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use async_compression::tokio::bufread::GzipDecoder;
use bytes::Bytes;
use futures::{Stream, TryStreamExt};
use sha2::{Digest, Sha256};
use tokio::io::{AsyncRead, ReadBuf};
use tokio::time::{Instant, Sleep};
use tokio_util::io::StreamReader;

use crate::ingest::BodyFormat;
use crate::problem::ProblemCode;

/// A body as the pipeline reads it.
pub type BodyReader = Box<dyn AsyncRead + Send + Unpin>;

/// A body is read, and its COPY data handed over, in chunks of about this
/// size: the spool's and the decoder's buffers, and each chunk sent to COPY.
pub const CHUNK_BYTES: usize = 256 * 1024;

pub struct BodySource {
    pub format: BodyFormat,
    pub reader: BodyReader,
    /// The SHA-256 of the body as read (after gunzip), when asked for.
    pub digest: Option<BodyDigest>,
}

impl BodySource {
    /// No body (a request whose path says it all), digested as empty.
    pub fn empty() -> Self {
        BodySource {
            format: BodyFormat::Ndjson,
            reader: Box::new(tokio::io::empty()),
            digest: Some(BodyDigest::default()),
        }
    }
}

/// What the request's headers say about its body.
#[derive(Clone, Copy, Debug, Default)]
pub struct BodyHeaders<'a> {
    pub content_type: Option<&'a str>,
    pub content_encoding: Option<&'a str>,
    pub content_length: Option<u64>,
}

/// Whether to take the body's SHA-256 while it is read (an Idempotency-Key's
/// fingerprint needs it).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DigestMode {
    Take,
    Skip,
}

/// The bounds a body is read within.
#[derive(Clone, Copy, Debug)]
pub struct BodyLimits {
    /// Most bytes, as sent and as unpacked.
    pub max_bytes: u64,
    /// Most unpacked bytes per byte sent, for a compressed body.
    pub max_gzip_ratio: u64,
    /// Longest wait for the client's next bytes.
    pub idle_timeout: Duration,
    /// Longest the whole body may take.
    pub deadline: Duration,
    /// The slowest a body may arrive, once past its grace period.
    pub min_rate: Option<MinRate>,
}

/// A body must average at least `bytes_per_sec` over the time idem waited
/// for it, once that time passes `grace` (as Apache's `mod_reqtimeout`
/// MinRate): a client that trickles bytes to keep a write alive is let go.
#[derive(Clone, Copy, Debug)]
pub struct MinRate {
    pub bytes_per_sec: u64,
    pub grace: Duration,
}

impl MinRate {
    /// How long idem may have waited for `received` bytes before the body
    /// is too slow.
    fn allowance(&self, received: u64) -> Duration {
        let earned =
            Duration::from_millis(received.saturating_mul(1000) / self.bytes_per_sec.max(1));
        earned.max(self.grace)
    }
}

/// A compressed body may always unpack to this much, whatever its ratio.
const GZIP_RATIO_FLOOR: u64 = 1024 * 1024;

/// Why a body cannot be read.
#[derive(Debug, thiserror::Error)]
pub enum BodyError {
    #[error("unsupported content type {0:?}; send application/x-ndjson, application/jsonl, application/json, text/csv, application/vnd.apache.parquet or application/vnd.apache.arrow.stream")]
    UnsupportedMediaType(String),
    #[error("unsupported content encoding {0:?}; send identity or gzip")]
    UnsupportedEncoding(String),
    #[error("the body is larger than the limit of {limit} bytes")]
    TooLarge { limit: u64 },
    #[error("the gzip body unpacks to more than {ratio} times its size")]
    CompressionRatio { ratio: u64 },
    #[error("the body {0}; nothing was written")]
    TimedOut(&'static str),
    #[error("the body arrived slower than {0} bytes per second; nothing was written")]
    TooSlow(u64),
    #[error("the body could not be read: {0}")]
    Unreadable(String),
}

impl BodyError {
    pub fn code(&self) -> ProblemCode {
        match self {
            BodyError::UnsupportedMediaType(_) => ProblemCode::UnsupportedMediaType,
            BodyError::UnsupportedEncoding(_) => ProblemCode::UnsupportedContentEncoding,
            BodyError::TooLarge { .. } | BodyError::CompressionRatio { .. } => {
                ProblemCode::PayloadTooLarge
            }
            BodyError::TimedOut(_) => ProblemCode::BodyTimeout,
            BodyError::TooSlow(_) => ProblemCode::BodyTooSlow,
            BodyError::Unreadable(_) => ProblemCode::BodyUnreadable,
        }
    }
}

/// The SHA-256 of everything read from a body so far; complete once the
/// body has been read to its end (every successful write does).
#[derive(Clone, Default)]
pub struct BodyDigest(Arc<Mutex<Sha256>>);

impl BodyDigest {
    pub fn hex(&self) -> String {
        let hash = self.0.lock().expect("digest lock").clone();
        hex::encode(hash.finalize())
    }
}

/// The errors the readers below fail a read with; found again by
/// `classify_read_error`.
#[derive(Debug, thiserror::Error)]
enum Refused {
    #[error("the body is larger than the limit of {0} bytes")]
    TooLarge(u64),
    #[error("the gzip body unpacks to more than {0} times its size")]
    Ratio(u64),
    #[error("the body {0}")]
    TimedOut(&'static str),
    #[error("the body arrived slower than {0} bytes per second")]
    TooSlow(u64),
}

/// Does the body say gzip? (`identity` or nothing: no.)
fn is_gzip(content_encoding: Option<&str>) -> Result<bool, BodyError> {
    match content_encoding.map(str::trim) {
        None => Ok(false),
        Some(e) if e.eq_ignore_ascii_case("identity") => Ok(false),
        Some(e) if e.eq_ignore_ascii_case("gzip") || e.eq_ignore_ascii_case("x-gzip") => Ok(true),
        Some(other) => Err(BodyError::UnsupportedEncoding(other.to_string())),
    }
}

impl BodySource {
    /// The body of a write, read from `stream` as its headers describe it,
    /// never more than `limit` bytes (as sent and as unpacked).
    pub fn open<S, E>(
        headers: BodyHeaders<'_>,
        stream: S,
        limits: BodyLimits,
        digest: DigestMode,
    ) -> Result<BodySource, BodyError>
    where
        S: Stream<Item = Result<Bytes, E>> + Send + Unpin + 'static,
        E: Into<Box<dyn std::error::Error + Send + Sync>> + 'static,
    {
        let content_type = headers.content_type.unwrap_or("");
        let format = BodyFormat::from_content_type(content_type)
            .ok_or_else(|| BodyError::UnsupportedMediaType(content_type.to_string()))?;
        let gzip = is_gzip(headers.content_encoding)?;
        let limit = limits.max_bytes;
        if headers.content_length.is_some_and(|n| n > limit) {
            return Err(BodyError::TooLarge { limit });
        }
        let digest = (digest == DigestMode::Take).then(BodyDigest::default);
        let timed = Timed::new(stream.map_err(io::Error::other), limits);
        let wire = Watched::new(StreamReader::new(timed), limit, None);
        let reader: BodyReader = if gzip {
            let sent = wire.seen.clone();
            let mut decoder = GzipDecoder::new(tokio::io::BufReader::new(wire));
            decoder.multiple_members(true);
            // The limit holds for what the body unpacks to as well, and the
            // digest is of the unpacked body: gzipped or not, the same request.
            let mut unpacked = Watched::new(decoder, limit, digest.clone());
            unpacked.ratio = Some((sent, limits.max_gzip_ratio));
            Box::new(unpacked)
        } else {
            Box::new(Watched {
                digest: digest.clone(),
                ..wire
            })
        };
        Ok(BodySource {
            format,
            reader,
            digest,
        })
    }
}

/// Reads the rest of a body that will not be written (a replay's, a
/// skipped channel offset's), within its limits: its digest then covers the
/// whole body, and the client is answered after it sent it all.
pub async fn drain(reader: &mut BodyReader) -> Result<(), BodyError> {
    tokio::io::copy(reader, &mut tokio::io::sink())
        .await
        .map_err(|e| classify_read_error(&e))?;
    Ok(())
}

/// Maps a failure to read the body to what it means.
pub fn classify_read_error(e: &io::Error) -> BodyError {
    match e.get_ref().and_then(|i| i.downcast_ref::<Refused>()) {
        Some(Refused::TooLarge(limit)) => BodyError::TooLarge { limit: *limit },
        Some(Refused::Ratio(ratio)) => BodyError::CompressionRatio { ratio: *ratio },
        Some(Refused::TimedOut(what)) => BodyError::TimedOut(what),
        Some(Refused::TooSlow(rate)) => BodyError::TooSlow(*rate),
        None => BodyError::Unreadable(e.to_string()),
    }
}

/// Watches what is read through it: fails the read once more than `limit`
/// bytes came through (or, unpacking, more than `ratio` times what was
/// sent), and feeds every byte to `digest` when there is one.
struct Watched<R> {
    inner: R,
    limit: u64,
    /// Bytes read so far, shared so that the unpacking side can compare.
    seen: Arc<AtomicU64>,
    digest: Option<BodyDigest>,
    /// The bytes sent so far, and how many unpacked bytes each may become.
    ratio: Option<(Arc<AtomicU64>, u64)>,
}

impl<R> Watched<R> {
    fn new(inner: R, limit: u64, digest: Option<BodyDigest>) -> Self {
        Watched {
            inner,
            limit,
            seen: Arc::default(),
            digest,
            ratio: None,
        }
    }

    /// Counts `read` in, or says why the body is refused.
    fn count(&self, read: &[u8]) -> Result<(), Refused> {
        let n = u64::try_from(read.len()).expect("a read's length fits u64");
        let seen = self.seen.fetch_add(n, Ordering::Relaxed).saturating_add(n);
        if seen > self.limit {
            return Err(Refused::TooLarge(self.limit));
        }
        if let Some((sent, ratio)) = &self.ratio {
            let allowed = sent
                .load(Ordering::Relaxed)
                .saturating_mul(*ratio)
                .max(GZIP_RATIO_FLOOR);
            if seen > allowed {
                return Err(Refused::Ratio(*ratio));
            }
        }
        if let Some(digest) = &self.digest {
            digest.0.lock().expect("digest lock").update(read);
        }
        Ok(())
    }
}

impl<R: AsyncRead + Unpin> AsyncRead for Watched<R> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        let this = &mut *self;
        match Pin::new(&mut this.inner).poll_read(cx, buf) {
            Poll::Ready(Ok(())) => Poll::Ready(
                this.count(&buf.filled()[before..])
                    .map_err(io::Error::other),
            ),
            other => other,
        }
    }
}

/// A body stream that gives up when the client sends nothing for
/// `idle_timeout`, sends too slowly for `min_rate`, or has not finished by
/// `deadline`. The idle and rate clocks run only while idem waits for the
/// client, not while idem itself is busy (a COPY applying back-pressure, a
/// write waiting for its turn).
struct Timed<S> {
    inner: S,
    idle_timeout: Duration,
    min_rate: Option<MinRate>,
    /// Fires at the end of the current wait's allowance (see `wait_until`).
    idle: Pin<Box<Sleep>>,
    deadline: Pin<Box<Sleep>>,
    /// When the current wait for the client started, if one is running.
    waiting: Option<Instant>,
    /// Whether `idle` fires for the rate rather than for idleness.
    for_rate: bool,
    /// Time spent waiting for the client, past waits only.
    waited: Duration,
    received: u64,
}

impl<S> Timed<S> {
    fn new(inner: S, limits: BodyLimits) -> Self {
        Timed {
            inner,
            idle_timeout: limits.idle_timeout,
            min_rate: limits.min_rate,
            idle: Box::pin(tokio::time::sleep(limits.idle_timeout)),
            deadline: Box::pin(tokio::time::sleep(limits.deadline)),
            waiting: None,
            for_rate: false,
            waited: Duration::ZERO,
            received: 0,
        }
    }

    /// Starts a wait for the client at `now`: the timer is set to the idle
    /// timeout, or sooner when the body would fall under its minimum rate.
    fn wait_until(&mut self, now: Instant) {
        let rate_left = self
            .min_rate
            .map(|rate| rate.allowance(self.received).saturating_sub(self.waited));
        self.for_rate = rate_left.is_some_and(|left| left < self.idle_timeout);
        let left = rate_left.map_or(self.idle_timeout, |r| r.min(self.idle_timeout));
        self.idle.as_mut().reset(now + left);
        self.waiting = Some(now);
    }

    fn refusal(&self) -> Refused {
        match self.min_rate {
            Some(rate) if self.for_rate => Refused::TooSlow(rate.bytes_per_sec),
            _ => Refused::TimedOut("stopped arriving (no bytes within the idle timeout)"),
        }
    }
}

impl<S: Stream<Item = io::Result<Bytes>> + Unpin> Stream for Timed<S> {
    type Item = io::Result<Bytes>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = &mut *self;
        if this.deadline.as_mut().poll(cx).is_ready() {
            let late = Refused::TimedOut("took longer than the request deadline");
            return Poll::Ready(Some(Err(io::Error::other(late))));
        }
        if this.waiting.is_none() {
            this.wait_until(Instant::now());
        }
        match Pin::new(&mut this.inner).poll_next(cx) {
            Poll::Ready(item) => {
                if let Some(started) = this.waiting.take() {
                    this.waited += started.elapsed();
                }
                if let Some(Ok(bytes)) = &item {
                    let n = u64::try_from(bytes.len()).unwrap_or(u64::MAX);
                    this.received = this.received.saturating_add(n);
                }
                Poll::Ready(item)
            }
            Poll::Pending if this.idle.as_mut().poll(cx).is_ready() => {
                Poll::Ready(Some(Err(io::Error::other(this.refusal()))))
            }
            Poll::Pending => Poll::Pending,
        }
    }
}
