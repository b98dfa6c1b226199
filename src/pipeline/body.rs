//! A request body as a stream of bytes in a known format: the content type
//! checked, gzip undone, the size limit enforced while reading, never buffered.

use std::io;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use async_compression::tokio::bufread::GzipDecoder;
use bytes::Bytes;
use futures::{Stream, TryStreamExt};
use sha2::{Digest, Sha256};
use tokio::io::{AsyncRead, ReadBuf};
use tokio_util::io::StreamReader;

use super::BodyReader;
use crate::ingest::BodyFormat;

pub struct BodySource {
    pub format: BodyFormat,
    pub reader: BodyReader,
    /// The SHA-256 of the body as read (after gunzip), when asked for.
    pub digest: Option<BodyDigest>,
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

/// Why a body cannot be read.
#[derive(Debug, thiserror::Error)]
pub enum BodyError {
    #[error("unsupported content type {0:?}; send application/x-ndjson, application/jsonl, application/json or text/csv")]
    UnsupportedMediaType(String),
    #[error("unsupported content encoding {0:?}; send identity or gzip")]
    UnsupportedEncoding(String),
    #[error("the body is larger than the limit of {limit} bytes")]
    TooLarge { limit: u64 },
    #[error("the body could not be read: {0}")]
    Unreadable(String),
}

impl BodyError {
    pub fn code(&self) -> &'static str {
        match self {
            BodyError::UnsupportedMediaType(_) => "unsupported_media_type",
            BodyError::UnsupportedEncoding(_) => "unsupported_content_encoding",
            BodyError::TooLarge { .. } => "payload_too_large",
            BodyError::Unreadable(_) => "body_unreadable",
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

/// The error a body past its limit reads as; found again by `classify_read_error`.
#[derive(Debug, thiserror::Error)]
#[error("the body is larger than the limit of {0} bytes")]
struct BodyTooLarge(u64);

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
        limit: u64,
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
        if headers.content_length.is_some_and(|n| n > limit) {
            return Err(BodyError::TooLarge { limit });
        }
        let digest = (digest == DigestMode::Take).then(BodyDigest::default);
        let wire = StreamReader::new(stream.map_err(io::Error::other));
        let reader: BodyReader = if gzip {
            let mut decoder =
                GzipDecoder::new(tokio::io::BufReader::new(Watched::new(wire, limit, None)));
            decoder.multiple_members(true);
            // The limit holds for what the body unpacks to as well, and the
            // digest is of the unpacked body: gzipped or not, the same request.
            Box::new(Watched::new(decoder, limit, digest.clone()))
        } else {
            Box::new(Watched::new(wire, limit, digest.clone()))
        };
        Ok(BodySource {
            format,
            reader,
            digest,
        })
    }
}

/// Maps a failure to read the body to what it means.
pub fn classify_read_error(e: &io::Error) -> BodyError {
    if let Some(too_large) = e.get_ref().and_then(|i| i.downcast_ref::<BodyTooLarge>()) {
        return BodyError::TooLarge { limit: too_large.0 };
    }
    BodyError::Unreadable(e.to_string())
}

/// Watches what is read through it: fails the read once more than `limit`
/// bytes came through, and feeds every byte to `digest` when there is one.
struct Watched<R> {
    inner: R,
    left: u64,
    limit: u64,
    digest: Option<BodyDigest>,
}

impl<R> Watched<R> {
    fn new(inner: R, limit: u64, digest: Option<BodyDigest>) -> Self {
        Watched {
            inner,
            left: limit,
            limit,
            digest,
        }
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
            Poll::Ready(Ok(())) => {
                let read = &buf.filled()[before..];
                let n = u64::try_from(read.len()).expect("a read's length fits u64");
                if n > this.left {
                    return Poll::Ready(Err(io::Error::other(BodyTooLarge(this.limit))));
                }
                this.left -= n;
                if let Some(digest) = &this.digest {
                    digest.0.lock().expect("digest lock").update(read);
                }
                Poll::Ready(Ok(()))
            }
            other => other,
        }
    }
}
