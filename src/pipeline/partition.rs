//! `PUT /partitions/{table}/{ds}`: decode → stage → publish.
//!
//! The rows go into COPY while the body is still being decoded. When the
//! partition exists already, the body may well be a re-send of the one it
//! was built from (a retried job), so it is first spooled to a temporary file
//! while its SHA-256 is taken: if it is the same body (same bytes, format
//! and table definition), nothing is decoded or staged. Bodies that differ
//! in bytes but hold the same rows are found out at publish time, by the
//! order-independent content hash, and change nothing either.

use std::io;

use chrono::{NaiveDate, Utc};
use serde::Serialize;
use sha2::{Digest, Sha256};
use sqlx::PgConnection;
use tokio::io::{AsyncReadExt, AsyncSeekExt, AsyncWriteExt};
use tokio_stream::wrappers::ReceiverStream;
use uuid::Uuid;

use super::decode::{self, CHUNK_BYTES};
use super::{resolve_table, BodyReader, Refusal};
use crate::app::AppState;
use crate::error::{ApiError, ApiResult};
use crate::http::body::{classify_read_error, BodySource};
use crate::ingest::{BodyFormat, EncodeOptions};
use crate::schema::TableDef;
use crate::store::ledger::{record_load, LoadEntry, LoadStatus};
use crate::store::publish::{current, publish, BodyFacts, Conditions, Current, Published};
use crate::store::stage;

/// The answer to an accepted PUT (API.md "A write's answer").
#[derive(Clone, Debug, Serialize)]
pub struct Receipt {
    pub load_id: Uuid,
    pub table: String,
    pub ds: NaiveDate,
    pub mode: &'static str,
    pub rows_received: u64,
    pub rows_written: u64,
    pub duplicates: u64,
    pub rejected: u64,
    /// Rows in the partition after this write.
    pub row_count: u64,
    pub content_sha256: String,
    pub changed: bool,
    pub replayed: bool,
}

pub struct PutPartition {
    pub table: String,
    pub ds: NaiveDate,
    pub body: BodySource,
    pub conditions: Conditions,
    pub idempotency_key: Option<String>,
}

pub const MODE: &str = "replace";

/// A PUT without an Idempotency-Key: its own connection, its refusals
/// recorded in the ledger.
pub async fn put_partition_unkeyed(state: &AppState, req: PutPartition) -> ApiResult<Receipt> {
    let refusal = Refusal::new(&req.table, Some(req.ds), MODE, None);
    let mut conn = state.store.pool().acquire().await?;
    let result = put_partition(state, req, refusal.load_id, &mut conn, None).await;
    if let Err(e) = &result {
        refusal.record(state, e).await;
    }
    result
}

/// Replaces partition `ds`, doing all its database work on `stage_conn`
/// and, for a keyed PUT, `key_tx`: the swap then happens inside that
/// transaction, so the key's record commits with it. (A keyed write holds
/// every connection it needs before it claims its key, so the requests that
/// wait for the key cannot starve it of connections.)
#[tracing::instrument(skip_all, fields(table = %req.table, ds = %req.ds, %load_id))]
pub async fn put_partition(
    state: &AppState,
    req: PutPartition,
    load_id: Uuid,
    stage_conn: &mut PgConnection,
    key_tx: Option<&mut PgConnection>,
) -> ApiResult<Receipt> {
    let PutPartition {
        table,
        ds,
        body,
        conditions,
        idempotency_key,
    } = req;
    let target = Target {
        table: &table,
        ds,
        conditions: &conditions,
        key: idempotency_key.as_deref(),
    };
    replace(state, target, body, load_id, stage_conn, key_tx).await
}

/// What a PUT names besides its body.
#[derive(Clone, Copy)]
struct Target<'a> {
    table: &'a str,
    ds: NaiveDate,
    conditions: &'a Conditions,
    key: Option<&'a str>,
}

async fn replace(
    state: &AppState,
    target: Target<'_>,
    body: BodySource,
    load_id: Uuid,
    conn: &mut PgConnection,
    key_tx: Option<&mut PgConnection>,
) -> ApiResult<Receipt> {
    let started_at = Utc::now();
    let Target {
        table,
        ds,
        conditions,
        key,
    } = target;

    let live = current(&mut *conn, table, ds).await?;
    conditions.check(live.as_ref().map(|c| c.content_sha256.as_str()))?;

    let format = body.format;
    let (def, body) = resolve_table(state, &mut *conn, table, format, body.reader).await?;
    let body_hash = body_hash_prefix(format, &def);
    let body: BodyReader = match &live {
        None => body,
        Some(live) => {
            let (spooled, body_sha256) = spool_body(body, body_hash.clone(), state).await?;
            if body_sha256 == live.body_sha256 {
                let receipt = same_body(load_id, &def.name, ds, live);
                let entry = ledger_entry(&receipt, LoadStatus::Unchanged, key, started_at);
                record_load(key_tx.unwrap_or(conn), &entry).await?;
                return Ok(receipt);
            }
            Box::new(spooled)
        }
    };

    let options = EncodeOptions {
        ds: Some(ds),
        row_id_scope: None,
        tombstones: false,
    };
    // A stage resolves duplicates when its unique index says there are some.
    let decoding = decode::spawn_decoder(
        def.clone(),
        options,
        false,
        load_id,
        format,
        body,
        body_hash,
    );

    let stage_name = stage::staging_name(load_id);
    stage::claim(&mut *conn, &stage_name).await?;
    let result = async {
        let staged = stage::stage_rows(
            &mut *conn,
            &def,
            ds,
            &stage_name,
            ReceiverStream::new(decoding.chunks),
        )
        .await;
        let decoded = decode::finish(decoding.decoder).await?;
        let staged = decode::copy_result(staged)?;

        let mut content = decoded.input_hash;
        for dropped in &staged.dropped_row_hashes {
            content.remove(dropped);
        }
        let mut receipt = Receipt {
            load_id,
            table: def.name.clone(),
            ds,
            mode: MODE,
            rows_received: decoded.rows_received,
            rows_written: staged.rows,
            duplicates: staged.dropped_row_hashes.len() as u64,
            rejected: 0,
            row_count: staged.rows,
            content_sha256: content.hex(),
            changed: true,
            replayed: false,
        };
        let mut entry = ledger_entry(&receipt, LoadStatus::Published, key, started_at);
        let body = BodyFacts {
            sha256: &decoded.body_sha256,
            rows_received: decoded.rows_received,
            content: &content,
        };
        let publish_conn: &mut PgConnection = match key_tx {
            Some(tx) => tx,
            None => &mut *conn,
        };
        if let Published::Unchanged = publish(
            publish_conn,
            &def,
            ds,
            &stage_name,
            body,
            conditions,
            &mut entry,
        )
        .await?
        {
            receipt.changed = false;
            receipt.rows_written = 0;
        }
        Ok(receipt)
    }
    .await;

    // The stage is gone after a swap; otherwise it is dropped here. Either
    // way the claim ends: a stage that could not be dropped is left to the
    // janitor, which can take it once no session holds its lock.
    let published = result.as_ref().is_ok_and(|r| r.changed);
    if let Err(e) = stage::release(&mut *conn, &stage_name, published).await {
        tracing::warn!(error = %e, "could not release the stage");
        let _ = sqlx::query("select pg_advisory_unlock_all()")
            .execute(&mut *conn)
            .await;
        return Err(result.err().unwrap_or_else(|| e.into()));
    }
    result
}

fn ledger_entry<'a>(
    receipt: &'a Receipt,
    status: LoadStatus,
    idempotency_key: Option<&'a str>,
    started_at: chrono::DateTime<Utc>,
) -> LoadEntry<'a> {
    LoadEntry {
        load_id: receipt.load_id,
        table: &receipt.table,
        ds: Some(receipt.ds),
        mode: receipt.mode,
        status,
        rows_received: receipt.rows_received,
        rows_written: receipt.rows_written,
        duplicates: receipt.duplicates,
        rejected: receipt.rejected,
        content_sha256: Some(&receipt.content_sha256),
        changed: receipt.changed,
        idempotency_key,
        error: None,
        started_at,
    }
}

/// The body hash covers what the bytes mean too: their format and the
/// table definition they are read against.
fn body_hash_prefix(format: BodyFormat, def: &TableDef) -> Sha256 {
    let mut hash = Sha256::new();
    hash.update(b"idem-body-v1\0");
    hash.update(format!("{format:?}\0").as_bytes());
    hash.update(serde_json::to_vec(def).expect("a definition serializes"));
    hash.update(b"\0");
    hash
}

/// The answer when the body is the very one the live partition was built
/// from: nothing to do but say so.
fn same_body(load_id: Uuid, table: &str, ds: NaiveDate, live: &Current) -> Receipt {
    let row_count = live.row_count as u64;
    let rows_received = live.rows_received as u64;
    Receipt {
        load_id,
        table: table.to_string(),
        ds,
        mode: MODE,
        rows_received,
        rows_written: 0,
        duplicates: rows_received.saturating_sub(row_count),
        rejected: 0,
        row_count,
        content_sha256: live.content_sha256.clone(),
        changed: false,
        replayed: false,
    }
}

/// Copies the body to an unnamed temporary file (gone when closed), taking
/// its SHA-256 on the way, and returns the file rewound.
async fn spool_body(
    mut body: BodyReader,
    mut hash: Sha256,
    state: &AppState,
) -> ApiResult<(tokio::fs::File, String)> {
    let file = match &state.settings.spool_dir {
        Some(dir) => tempfile::tempfile_in(dir),
        None => tempfile::tempfile(),
    }
    .map_err(|e| ApiError::Internal(anyhow::anyhow!("cannot create a spool file: {e}")))?;
    let mut file = tokio::fs::File::from_std(file);
    let spool_error = |e: io::Error| ApiError::Internal(anyhow::anyhow!("spool file: {e}"));
    let mut buf = vec![0u8; CHUNK_BYTES];
    loop {
        let n = body
            .read(&mut buf)
            .await
            .map_err(|e| classify_read_error(&e))?;
        if n == 0 {
            break;
        }
        hash.update(&buf[..n]);
        file.write_all(&buf[..n]).await.map_err(spool_error)?;
    }
    file.flush().await.map_err(spool_error)?;
    file.rewind().await.map_err(spool_error)?;
    Ok((file, hex::encode(hash.finalize())))
}
