//! A request body as a stream of bytes in a known format: the content type
//! checked, gzip undone, the size limit enforced while reading, never buffered.

use std::io;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use async_compression::tokio::bufread::GzipDecoder;
use axum::body::Body;
use axum::http::{header, HeaderMap};
use futures::TryStreamExt;
use sha2::{Digest, Sha256};
use tokio::io::{AsyncRead, ReadBuf};
use tokio_util::io::StreamReader;

use crate::error::{ApiError, ApiResult};
use crate::ingest::BodyFormat;

pub struct BodySource {
    pub format: BodyFormat,
    pub reader: Box<dyn AsyncRead + Send + Unpin>,
    /// The SHA-256 of the body as read (after gunzip), when asked for.
    pub digest: Option<BodyDigest>,
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
pub struct BodyTooLarge(pub u64);

/// The body of a write. With `digest`, its SHA-256 is taken as it is read
/// (for an Idempotency-Key's request fingerprint).
pub fn body_source(
    headers: &HeaderMap,
    body: Body,
    limit: u64,
    digest: bool,
) -> ApiResult<BodySource> {
    let content_type = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    let format = BodyFormat::from_content_type(content_type)
        .ok_or_else(|| ApiError::UnsupportedMediaType(content_type.to_string()))?;
    let gzip = match headers
        .get(header::CONTENT_ENCODING)
        .and_then(|v| v.to_str().ok())
    {
        None => false,
        Some(e) if e.trim().eq_ignore_ascii_case("identity") => false,
        Some(e)
            if e.trim().eq_ignore_ascii_case("gzip") || e.trim().eq_ignore_ascii_case("x-gzip") =>
        {
            true
        }
        Some(other) => return Err(ApiError::UnsupportedEncoding(other.to_string())),
    };
    let declared = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|n| n > limit) {
        return Err(ApiError::PayloadTooLarge { limit });
    }
    let digest = digest.then(BodyDigest::default);
    let wire = StreamReader::new(body.into_data_stream().map_err(io::Error::other));
    let reader: Box<dyn AsyncRead + Send + Unpin> = if gzip {
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

/// Maps a failure to read the body to its answer.
pub fn classify_read_error(e: &io::Error) -> ApiError {
    if let Some(too_large) = e.get_ref().and_then(|i| i.downcast_ref::<BodyTooLarge>()) {
        return ApiError::PayloadTooLarge { limit: too_large.0 };
    }
    ApiError::BodyUnreadable(e.to_string())
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
                if read.len() as u64 > this.left {
                    return Poll::Ready(Err(io::Error::other(BodyTooLarge(this.limit))));
                }
                this.left -= read.len() as u64;
                if let Some(digest) = &this.digest {
                    digest.0.lock().expect("digest lock").update(read);
                }
                Poll::Ready(Ok(()))
            }
            other => other,
        }
    }
}
