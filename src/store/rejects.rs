//! The rejects store (`idem.rejects`): rows a write refused under the
//! `quarantine` policy, each kept as it was sent, with why, to be listed
//! (`GET /rejects`) and replayed once the table fits them.
//!
//! A load's rejects are encoded as binary COPY tuples while its body is
//! decoded (`ingest::reject_spool`), and COPYed here in the load's own
//! transaction: they commit with its good rows, or not at all.

use std::io::{self, Read};

use chrono::{DateTime, Utc};
use sqlx::PgConnection;

use super::{count, StoreError, StoreResult};
use crate::binary_copy;
use crate::ids::LoadId;
use crate::ingest::reject_spool::{Problem, RejectSpool, COPY_COLUMNS};
use crate::names::TableName;
use crate::period::Period;
use crate::wire::status::RejectStatus;

/// A spilled spool is sent to Postgres in chunks of this size.
const SEND_CHUNK: usize = 1 << 20;

/// COPYs the spooled rejects into `idem.rejects`, in the caller's
/// transaction; returns how many.
pub async fn keep(conn: &mut PgConnection, spool: RejectSpool) -> StoreResult<u64> {
    let Some(mut tuples) = spool.into_tuples() else {
        return Ok(0);
    };
    if tuples.count == 0 {
        return Ok(0);
    }
    let spool_failed = |e: io::Error| StoreError::RowSource(e);
    let mut copy = conn
        .copy_in_raw(&format!(
            "copy idem.rejects ({COPY_COLUMNS}) from stdin with (format binary)"
        ))
        .await?;
    copy.send(binary_copy::HEADER).await?;
    if let Some(file) = tuples.file().map_err(spool_failed)? {
        let mut chunk = vec![0u8; SEND_CHUNK];
        loop {
            let n = file.read(&mut chunk).map_err(spool_failed)?;
            if n == 0 {
                break;
            }
            copy.send(&chunk[..n]).await?;
        }
    }
    copy.send(tuples.memory()).await?;
    copy.send(binary_copy::TRAILER).await?;
    let kept = copy.finish().await?;
    if kept != tuples.count {
        return Err(StoreError::Corrupt("COPY kept another number of rejects"));
    }
    Ok(kept)
}

/// A new PUT of a partition makes the pending rejects of earlier PUTs of it
/// `superseded`: they belonged to a version of the day that is gone, and a
/// replay must not bring them into the new one.
pub async fn supersede(
    conn: &mut PgConnection,
    table: &TableName,
    ds: Period,
    load_id: LoadId,
) -> StoreResult<()> {
    // language=PostgreSQL
    // Rows a replay holds are skipped, not waited for: the replay holds the
    // partition's lock next, which this write's caller holds already.
    sqlx::query(
        "update idem.rejects set status = 'superseded'
          where (table_name, load_id, record) in (
                select table_name, load_id, record from idem.rejects
                 where table_name = $1 and ds = $2 and origin = 'put' and status = 'pending'
                   and load_id <> $3
                   for update skip locked)",
    )
    .bind(table.as_str())
    .bind(ds.label())
    .bind(load_id)
    .execute(conn)
    .await?;
    Ok(())
}

/// A stored reject, as listed.
#[derive(Clone, Debug)]
pub struct StoredReject {
    pub table: String,
    pub load_id: LoadId,
    pub record: u64,
    pub line: u64,
    pub ds: Option<String>,
    pub origin: String,
    /// A POST's mode, which a replay writes it by.
    pub mode: Option<String>,
    pub format: String,
    /// The record as sent, when it is UTF-8 (see `raw_base64`); `null` when
    /// it was too large to keep.
    pub raw: Option<String>,
    /// The record as sent, base64, when it is not UTF-8.
    pub raw_base64: Option<String>,
    /// The CSV header the record was read under.
    pub csv_header: Option<String>,
    pub errors: Vec<Problem>,
    pub idempotency_key: Option<String>,
    pub received_at: DateTime<Utc>,
    pub tries: u32,
    pub status: RejectStatus,
    pub replayed_by: Option<LoadId>,
    pub last_tried_at: DateTime<Utc>,
}

/// Which rejects a list shows.
pub struct RejectFilter<'a> {
    pub table: Option<&'a TableName>,
    pub load_id: Option<LoadId>,
    pub status: Option<RejectStatus>,
    pub since: Option<DateTime<Utc>>,
    /// The column of the first error (`""` for a row's own error).
    pub error_column: Option<&'a str>,
    /// `LIKE` patterns of the tables the caller may read.
    pub visible: &'a [String],
}

/// Where a page of rejects starts: after this load's record.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RejectCursor {
    pub load_id: LoadId,
    pub record: u64,
}

impl RejectCursor {
    pub fn text(&self) -> String {
        format!("{}.{}", self.load_id, self.record)
    }

    /// A cursor this server gave: a record number within bigint's range.
    pub fn parse(text: &str) -> Option<Self> {
        let (load_id, record) = text.split_once('.')?;
        let record: u64 = record.parse().ok()?;
        i64::try_from(record).ok()?;
        Some(RejectCursor {
            load_id: load_id.parse().ok()?,
            record,
        })
    }
}

const REJECT_COLUMNS: &str = "table_name, load_id, record, line, ds, origin, mode, format, raw, \
    csv_header, errors, idempotency_key, received_at, tries, status, replayed_by, last_tried_at";

/// A page of rejects, oldest load first (load ids are time-ordered), then
/// by record.
pub async fn list(
    conn: &mut PgConnection,
    filter: &RejectFilter<'_>,
    after: Option<RejectCursor>,
    limit: i64,
) -> StoreResult<Vec<StoredReject>> {
    let after_record = after.map(|c| count(c.record)).transpose()?;
    // language=PostgreSQL
    let rows: Vec<RejectRow> = sqlx::query_as(&format!(
        "select {REJECT_COLUMNS} from idem.rejects
          where ($1::text is null or table_name = $1) and ($2::uuid is null or load_id = $2)
            and ($3::text is null or status = $3) and ($4::timestamptz is null or received_at >= $4)
            and ($5::uuid is null or (load_id, record) > ($5, $6))
            and table_name like any($8)
            and ($9::text is null or coalesce(errors -> 0 ->> 'column', '') = $9)
          order by load_id, record
          limit $7"
    ))
    .bind(filter.table.map(TableName::as_str))
    .bind(filter.load_id)
    .bind(filter.status.map(RejectStatus::as_str))
    .bind(filter.since)
    .bind(after.map(|c| c.load_id))
    .bind(after_record)
    .bind(limit)
    .bind(filter.visible)
    .bind(filter.error_column)
    .fetch_all(conn)
    .await?;
    rows.into_iter().map(RejectRow::into_stored).collect()
}

/// A row of `idem.rejects` as read.
#[derive(sqlx::FromRow)]
struct RejectRow {
    table_name: String,
    load_id: LoadId,
    record: i64,
    line: i64,
    ds: Option<String>,
    origin: String,
    mode: Option<String>,
    format: String,
    raw: Option<Vec<u8>>,
    csv_header: Option<Vec<u8>>,
    errors: sqlx::types::Json<Vec<Problem>>,
    idempotency_key: Option<String>,
    received_at: DateTime<Utc>,
    tries: i32,
    status: RejectStatus,
    replayed_by: Option<LoadId>,
    last_tried_at: DateTime<Utc>,
}

impl RejectRow {
    fn into_stored(self) -> StoreResult<StoredReject> {
        use base64::Engine;
        let (raw, raw_base64) = match self.raw.map(String::from_utf8) {
            None => (None, None),
            Some(Ok(text)) => (Some(text), None),
            Some(Err(e)) => (
                None,
                Some(base64::engine::general_purpose::STANDARD.encode(e.into_bytes())),
            ),
        };
        let csv_header = self
            .csv_header
            .map(|h| String::from_utf8_lossy(&h).into_owned());
        Ok(StoredReject {
            table: self.table_name,
            load_id: self.load_id,
            record: super::stored_count(self.record)?,
            line: super::stored_count(self.line)?,
            // A plain table's one partition (`Period::whole()`, stored as
            // `''`) is no ds.
            ds: self.ds.filter(|ds| !ds.is_empty()),
            origin: self.origin,
            mode: self.mode,
            format: self.format,
            raw,
            raw_base64,
            csv_header,
            errors: self.errors.0,
            idempotency_key: self.idempotency_key,
            received_at: self.received_at,
            tries: u32::try_from(self.tries)
                .map_err(|_| StoreError::Corrupt("a negative count of tries"))?,
            status: self.status,
            replayed_by: self.replayed_by,
            last_tried_at: self.last_tried_at,
        })
    }
}

impl super::Store {
    /// A page of rejects (see `list`).
    pub async fn rejects(
        &self,
        filter: &RejectFilter<'_>,
        after: Option<RejectCursor>,
        limit: i64,
    ) -> StoreResult<Vec<StoredReject>> {
        list(&mut *self.acquire().await?, filter, after, limit).await
    }

    /// Deletes the table's rejects in `status`; returns how many.
    pub async fn delete_rejects(
        &self,
        table: &TableName,
        status: RejectStatus,
    ) -> StoreResult<u64> {
        // language=PostgreSQL
        let done = sqlx::query("delete from idem.rejects where table_name = $1 and status = $2")
            .bind(table.as_str())
            .bind(status.as_str())
            .execute(&mut *self.acquire().await?)
            .await?;
        Ok(done.rows_affected())
    }
}

/// Makes the table's pending rejects received longer than `window` ago
/// `expired`; returns how many.
pub async fn expire(
    conn: &mut PgConnection,
    table: &TableName,
    window: std::time::Duration,
) -> StoreResult<u64> {
    let secs = i64::try_from(window.as_secs())
        .map_err(|_| StoreError::Corrupt("a retry window past the range of bigint"))?;
    // language=PostgreSQL
    let done = sqlx::query(
        "update idem.rejects set status = 'expired'
          where table_name = $1 and status = 'pending'
            and received_at < now() - $2::bigint * interval '1 second'",
    )
    .bind(table.as_str())
    .bind(secs)
    .execute(conn)
    .await?;
    Ok(done.rows_affected())
}

/// A pending reject taken for a replay.
#[derive(Clone, Debug, sqlx::FromRow)]
pub struct PendingReject {
    pub load_id: LoadId,
    pub record: i64,
    pub origin: String,
    pub mode: Option<String>,
    pub ds: Option<String>,
    pub format: String,
    pub raw: Option<Vec<u8>>,
    pub csv_header: Option<Vec<u8>>,
}

/// What a replay takes at once.
#[derive(Clone, Copy, Debug)]
pub struct ReplayBounds {
    pub max_rows: i64,
    /// Most bytes of records (at least one record is taken, whatever its size).
    pub max_bytes: i64,
}

/// Locks and returns the table's pending rejects tried least recently (so
/// that rejects that stay bad do not hold the newer ones back), as many as
/// the bounds allow, and whether more are pending. A reject whose record
/// was too large to keep is never taken: it cannot fit, and waits for its
/// window to end. A replay running meanwhile holds the ones it took: this
/// one waits for them, then takes only those still pending.
pub async fn take_pending(
    conn: &mut PgConnection,
    table: &TableName,
    bounds: ReplayBounds,
) -> StoreResult<(Vec<PendingReject>, bool)> {
    // language=PostgreSQL
    let sizes: Vec<(LoadId, i64, i64)> = sqlx::query_as(
        "select load_id, record,
                (length(raw) + coalesce(length(csv_header), 0))::bigint from idem.rejects
          where table_name = $1 and status = 'pending' and raw is not null
          order by last_tried_at, load_id, record
          limit $2
          for update",
    )
    .bind(table.as_str())
    .bind(bounds.max_rows.saturating_add(1))
    .fetch_all(&mut *conn)
    .await?;
    let mut taken = 0usize;
    let mut bytes = 0i64;
    for (_, _, size) in &sizes {
        bytes = bytes.saturating_add(*size);
        let over = bytes > bounds.max_bytes
            || i64::try_from(taken + 1).map_or(true, |n| n > bounds.max_rows);
        if taken > 0 && over {
            break;
        }
        taken += 1;
    }
    let more = taken < sizes.len();
    let (load_ids, records): (Vec<LoadId>, Vec<i64>) =
        sizes[..taken].iter().map(|(l, r, _)| (*l, *r)).unzip();
    // language=PostgreSQL
    let pending = sqlx::query_as(
        "select r.load_id, r.record, r.origin, r.mode, r.ds, r.format, r.raw, r.csv_header
           from idem.rejects r
           join unnest($2::uuid[], $3::bigint[]) as t(load_id, record)
             on r.load_id = t.load_id and r.record = t.record
          where r.table_name = $1
          order by r.load_id, r.record",
    )
    .bind(table.as_str())
    .bind(&load_ids)
    .bind(&records)
    .fetch_all(conn)
    .await?;
    Ok((pending, more))
}

/// What a replay made of one reject: written (by `load_id`), or still bad
/// for these problems.
pub struct Tried<'a> {
    pub load_id: LoadId,
    pub record: i64,
    pub problems: Option<&'a [Problem]>,
}

/// Records a replay's tries: one more each; the rows written `replayed` by
/// `replay_load`, the others left pending with their new problems.
pub async fn mark_tried(
    conn: &mut PgConnection,
    table: &TableName,
    replay_load: LoadId,
    tried: &[Tried<'_>],
) -> StoreResult<()> {
    let load_ids: Vec<LoadId> = tried.iter().map(|t| t.load_id).collect();
    let records: Vec<i64> = tried.iter().map(|t| t.record).collect();
    let problems: Vec<Option<String>> = tried
        .iter()
        .map(|t| t.problems.map(serde_json::to_string).transpose())
        .collect::<Result<_, _>>()
        .map_err(|_| StoreError::Corrupt("a reject's problems do not serialize"))?;
    // language=PostgreSQL
    sqlx::query(
        "update idem.rejects r
            set tries = r.tries + 1, last_tried_at = now(),
                status = case when t.problems is null then 'replayed' else 'pending' end,
                replayed_by = case when t.problems is null then $2::uuid end,
                errors = coalesce(t.problems::jsonb, r.errors)
           from unnest($3::uuid[], $4::bigint[], $5::text[]) as t(load_id, record, problems)
          where r.table_name = $1 and r.load_id = t.load_id and r.record = t.record",
    )
    .bind(table.as_str())
    .bind(replay_load)
    .bind(&load_ids)
    .bind(&records)
    .bind(&problems)
    .execute(conn)
    .await?;
    Ok(())
}
