//! A write under an `Idempotency-Key` (IETF httpapi draft "The
//! Idempotency-Key HTTP Header Field"):
//!
//! - first use: the write runs in the transaction that claimed the key, and
//!   the key, the request's fingerprint and the response are stored in it;
//! - the same key and request again: the stored response, replayed;
//! - the same key, another request: 422;
//! - the same key while the first is running: wait for it (bounded), then
//!   replay; past the bound, 409 with `Retry-After`.
//!
//! Only completed writes are stored. A refusal (4xx) or a failure (5xx)
//! rolls the key back with the write, so the client can fix the request and
//! retry under the same key.

use axum::http::StatusCode;
use sha2::{Digest, Sha256};

use super::partition::{put_partition, PutPartition, MODE as PUT_MODE};
use super::rows::{post_rows, PostRows};
use super::Refusal;
use crate::app::AppState;
use crate::error::{ApiError, ApiResult};
use crate::http::body::{classify_read_error, BodyDigest};
use crate::store::idempotency::{complete_key, Claim, StoredKey};

/// What the fingerprint of a keyed request is made of.
pub struct KeyedRequest {
    pub principal: String,
    pub key: String,
    pub method: &'static str,
    pub path_and_query: String,
    pub content_type: String,
}

pub enum Write {
    Rows(PostRows),
    Partition(PutPartition),
}

/// A keyed write's answer: status and body, and whether it was replayed.
pub struct KeyedAnswer {
    pub status: StatusCode,
    pub body: serde_json::Value,
    pub replayed: bool,
}

impl Write {
    fn body_parts(&mut self) -> (&mut crate::pipeline::BodyReader, Option<BodyDigest>) {
        let body = match self {
            Write::Rows(r) => &mut r.body,
            Write::Partition(p) => &mut p.body,
        };
        (&mut body.reader, body.digest.clone())
    }
}

/// SHA-256 of method, path and query, content type and the body's SHA-256.
fn fingerprint(req: &KeyedRequest, body_sha256: &str) -> String {
    let mut h = Sha256::new();
    for part in [
        req.method,
        &req.path_and_query,
        &req.content_type,
        body_sha256,
    ] {
        h.update(part.as_bytes());
        h.update(b"\0");
    }
    hex::encode(h.finalize())
}

pub async fn run(state: &AppState, req: KeyedRequest, mut write: Write) -> ApiResult<KeyedAnswer> {
    let settings = &state.settings;
    let (_, digest) = write.body_parts();
    let digest = digest.expect("a keyed body is digested");
    // Most repeats find their key completed: answer them without a transaction.
    if let Some(stored) = state.store.completed_key(&req.principal, &req.key).await? {
        return replay(&req, &mut write, &digest, stored).await;
    }
    // Every connection the write needs is taken before the key is claimed:
    // requests waiting for the key hold connections while they wait, and
    // must not starve the one they wait for.
    let mut stage_conn = match &write {
        Write::Partition(_) => Some(state.store.pool().acquire().await?),
        Write::Rows(_) => None,
    };
    let mut tx = match state
        .store
        .claim_key(&req.principal, &req.key, settings.idempotency_wait())
        .await?
    {
        Claim::Fresh(tx) => tx,
        Claim::Completed(stored) => {
            drop(stage_conn);
            // The body must be read to know whether it is the same request.
            let (reader, _) = write.body_parts();
            tokio::io::copy(reader, &mut tokio::io::sink())
                .await
                .map_err(|e| classify_read_error(&e))?;
            if fingerprint(&req, &digest.hex()) != stored.fingerprint {
                return Err(ApiError::IdempotencyKeyReused);
            }
            let mut body = stored.response_body;
            body["replayed"] = serde_json::Value::Bool(true);
            let status =
                StatusCode::from_u16(stored.response_status as u16).unwrap_or(StatusCode::OK);
            return Ok(KeyedAnswer {
                status,
                body,
                replayed: true,
            });
        }
    };

    let (refusal, written) = match write {
        Write::Rows(rows) => {
            let refusal = Refusal::new(&rows.table, None, rows.mode_name(), Some(&req.key));
            let written = post_rows(state, rows, refusal.load_id, &mut tx)
                .await
                .map(|r| json(&r));
            (refusal, written)
        }
        Write::Partition(put) => {
            let refusal = Refusal::new(&put.table, Some(put.ds), PUT_MODE, Some(&req.key));
            let conn = stage_conn.as_deref_mut().expect("taken above");
            let written = put_partition(state, put, refusal.load_id, conn, Some(&mut tx))
                .await
                .map(|r| json(&r));
            (refusal, written)
        }
    };
    let body = match written {
        Ok(body) => body,
        Err(e) => {
            // The key goes with the write, so that the fixed request can use it.
            let _ = tx.rollback().await;
            drop(stage_conn);
            refusal.record(state, &e).await;
            return Err(e);
        }
    };
    let status = StatusCode::OK;
    let fingerprint = fingerprint(&req, &digest.hex());
    complete_key(
        &mut tx,
        &req.principal,
        &req.key,
        &fingerprint,
        Some(refusal.load_id),
        status.as_u16(),
        &body,
        settings.idempotency_retention(),
    )
    .await?;
    tx.commit().await?;
    Ok(KeyedAnswer {
        status,
        body,
        replayed: false,
    })
}

/// The stored answer of a completed key, if this is the same request.
async fn replay(
    req: &KeyedRequest,
    write: &mut Write,
    digest: &BodyDigest,
    stored: StoredKey,
) -> ApiResult<KeyedAnswer> {
    // The body must be read to know whether it is the same request.
    let (reader, _) = write.body_parts();
    tokio::io::copy(reader, &mut tokio::io::sink())
        .await
        .map_err(|e| classify_read_error(&e))?;
    if fingerprint(req, &digest.hex()) != stored.fingerprint {
        return Err(ApiError::IdempotencyKeyReused);
    }
    let mut body = stored.response_body;
    body["replayed"] = serde_json::Value::Bool(true);
    let status = StatusCode::from_u16(stored.response_status as u16).unwrap_or(StatusCode::OK);
    Ok(KeyedAnswer {
        status,
        body,
        replayed: true,
    })
}

fn json(value: &impl serde::Serialize) -> serde_json::Value {
    serde_json::to_value(value).expect("a receipt serializes")
}
