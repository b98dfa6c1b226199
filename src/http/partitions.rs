//! `/partitions`: replace a partition (PUT), read it back (GET, HEAD), drop
//! it (DELETE), list a table's partitions.

use crate::period::{Grain, Period};
use axum::body::Body;
use axum::extract::{OriginalUri, State};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use serde::Deserialize;
use tokio_stream::wrappers::ReceiverStream;

use super::auth::Caller;
use super::extract::{parse_period, ApiQuery, PartitionPath, TablePath};
use super::many::{self, ManyQuery};
use super::observe::RequestSpan;
use super::paging::{page, page_limit};
use super::preconditions;
use super::receipts::{self, RECEIPTS};
use super::state::AppState;
use super::write::{
    bad_rows_override, body_limits, body_source, check_put_mode, etag, idempotency_key,
    keyed_request, keyed_response, spawn_write, table_def, BodyKind,
};
use crate::access::Scope;
use crate::http::error::{ApiError, ApiResult};
use crate::idempotency::KeyedRequest;
use crate::names::TableName;
use crate::pipeline::{DigestMode, KeyedWrite, LoadTarget, PutPartition};
use crate::schema::TableDef;
use crate::store::partitions::PartitionInfo;
use crate::store::read::RowFormat;
use crate::wire::tables::PartitionView;

/// The row count of a partition, on GET and HEAD.
pub const ROW_COUNT_HEADER: &str = "idem-row-count";

pub fn router() -> Router<AppState> {
    Router::new()
        .route("/partitions/{table}", get(list_partitions))
        .route(
            "/partitions/{table}/{ds}",
            get(get_partition)
                .head(head_partition)
                .put(put_partition)
                .delete(delete_partition),
        )
}

/// The table's definition, refused when it has no partitions (a plain
/// table's rows are at `/tables/{table}/rows`).
async fn partitioned_def(state: &AppState, table: &TableName) -> ApiResult<TableDef> {
    let def = table_def(state, table).await?;
    if def.is_plain() {
        return Err(ApiError::NotPartitioned(table.clone()));
    }
    Ok(def)
}

async fn live_partition(
    state: &AppState,
    table: &TableName,
    ds: &str,
) -> ApiResult<(TableDef, Period, PartitionInfo)> {
    let def = partitioned_def(state, table).await?;
    let ds = parse_period(ds, def.grain)?;
    let info = state
        .store
        .partition(table, ds)
        .await?
        .ok_or_else(|| no_partition(table, ds))?;
    Ok((def, ds, info))
}

fn no_partition(table: &TableName, ds: Period) -> ApiError {
    ApiError::NotFound(format!("table {table:?} has no partition {ds}"))
}

// An axum handler takes what it reads of the request as arguments.
#[allow(clippy::too_many_arguments)]
async fn put_partition(
    State(state): State<AppState>,
    span: RequestSpan,
    caller: Caller,
    OriginalUri(uri): OriginalUri,
    PartitionPath(table, ds): PartitionPath,
    ApiQuery(query): ApiQuery<PutQuery>,
    headers: HeaderMap,
    body: Body,
) -> ApiResult<Response> {
    caller.require(Scope::Write, &table)?;
    let bad_rows = bad_rows_override(query.bad_rows.as_deref())?;
    let conditions = preconditions::expected(&headers)?;
    let key = idempotency_key(&headers)?;
    let digest = match key {
        Some(_) => DigestMode::Take,
        None => DigestMode::Skip,
    };
    // An undeclared table is created daily; the pipeline checks the grain
    // again against the table it resolves.
    let stored = state.store.table(&table).await?;
    if stored.as_ref().is_some_and(TableDef::is_plain) {
        return Err(ApiError::NotPartitioned(table));
    }
    check_put_mode(query.mode.as_deref(), stored.as_ref())?;
    let grain = stored.as_ref().map_or(Grain::Day, |d| d.grain);
    let audited = stored.as_ref().is_some_and(|d| !d.audits.is_empty());
    let ds = parse_period(&ds, grain)?;
    if audited || query.audit.is_some() || query.dry_run == Some(true) {
        // Audited or tried: a load of one partition, staged then checked.
        let query = ManyQuery {
            // Checked above.
            mode: None,
            from: None,
            to: None,
            bad_rows: query.bad_rows,
            audit: query.audit,
            dry_run: query.dry_run,
        };
        let target = LoadTarget::Partitions(vec![ds]);
        return many::put_many(state, span, caller, table, target, query, headers, body).await;
    }
    let limits = body_limits(&state.settings, BodyKind::Partition);
    let body = body_source(&headers, body, limits, digest)?;
    let actor = caller.actor.clone();
    let keyed = key.map(|key| keyed_request(caller, key, "PUT", &uri, &headers));
    let request = PutPartition {
        table: table.clone(),
        ds,
        body,
        conditions,
        actor,
        bad_rows,
        create_table: query.create != Some(false),
    };
    let written = run_put(&state, &span, keyed, request).await;
    if let Err(e) = &written {
        state.saw_refusal(&table, e);
    }
    written
}

/// The PUT itself, under its Idempotency-Key or not; its answer counted,
/// its load id logged.
async fn run_put(
    state: &AppState,
    span: &RequestSpan,
    keyed: Option<KeyedRequest>,
    request: PutPartition,
) -> ApiResult<Response> {
    let pipeline = state.pipeline();
    let table = request.table.clone();
    if let Some(keyed) = keyed {
        let write = KeyedWrite::Partition(request);
        let answer =
            spawn_write(async move { pipeline.run_keyed(keyed, write, RECEIPTS).await }).await?;
        return Ok(keyed_response(state, span, &table, answer));
    }
    let receipt = spawn_write(async move { pipeline.put_partition_unkeyed(request).await }).await?;
    span.record("load_id", tracing::field::display(receipt.load_id));
    state.metrics.rows(table.as_str(), receipt.counts());
    let etag = etag(receipt.etag());
    let mut response = (StatusCode::OK, Json(receipts::put(&receipt))).into_response();
    response.headers_mut().insert(header::ETAG, etag);
    Ok(response)
}

#[derive(Deserialize)]
struct PutQuery {
    mode: Option<String>,
    bad_rows: Option<String>,
    audit: Option<String>,
    dry_run: Option<bool>,
    /// `false`: an undeclared table is 404 `table_not_found`, not made from
    /// the body (an audited or dry-run PUT never makes one).
    create: Option<bool>,
}

#[derive(Deserialize)]
pub(super) struct ReadQuery {
    format: Option<String>,
}

pub(super) fn read_format(headers: &HeaderMap, query: &ReadQuery) -> ApiResult<RowFormat> {
    if let Some(f) = &query.format {
        return match f.as_str() {
            "csv" => Ok(RowFormat::Csv),
            "ndjson" | "jsonl" => Ok(RowFormat::Ndjson),
            "json" => Ok(RowFormat::Json),
            "parquet" => Ok(RowFormat::Parquet),
            "arrow" => Ok(RowFormat::ArrowStream),
            other => Err(ApiError::InvalidRequest(format!(
                "format {other:?} is not csv, ndjson, json, parquet or arrow"
            ))),
        };
    }
    let accept = headers
        .get(header::ACCEPT)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    Ok(if accept.contains("parquet") {
        RowFormat::Parquet
    } else if accept.contains(RowFormat::ArrowStream.media_type()) {
        RowFormat::ArrowStream
    } else if accept.contains("text/csv") {
        RowFormat::Csv
    } else if accept.contains("application/json") {
        RowFormat::Json
    } else {
        RowFormat::Ndjson
    })
}

fn partition_headers(info: &PartitionInfo, format: RowFormat) -> HeaderMap {
    rows_headers(&info.content_sha256, info.rows, format)
}

/// The headers of a read of rows (a partition's or a whole table's): its
/// ETag, row count and format.
pub(super) fn rows_headers(content_sha256: &str, rows: u64, format: RowFormat) -> HeaderMap {
    let mut headers = HeaderMap::new();
    headers.insert(header::ETAG, etag(content_sha256));
    headers.insert(ROW_COUNT_HEADER, HeaderValue::from(rows));
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static(format.media_type()),
    );
    headers
}

fn not_modified(headers: &HeaderMap, info: &PartitionInfo) -> bool {
    preconditions::if_none_match_names(headers, &info.content_sha256)
}

async fn get_partition(
    State(state): State<AppState>,
    caller: Caller,
    PartitionPath(table, ds): PartitionPath,
    ApiQuery(query): ApiQuery<ReadQuery>,
    headers: HeaderMap,
) -> ApiResult<Response> {
    caller.require(Scope::Read, &table)?;
    let format = read_format(&headers, &query)?;
    let def = partitioned_def(&state, &table).await?;
    let ds = parse_period(&ds, def.grain)?;
    let snapshot = state
        .store
        .open_partition(&def, ds)
        .await?
        .ok_or_else(|| no_partition(&table, ds))?;
    let response_headers = partition_headers(&snapshot.info, format);
    if not_modified(&headers, &snapshot.info) {
        return Ok((StatusCode::NOT_MODIFIED, response_headers).into_response());
    }
    let rows = snapshot.stream(format);
    Ok((
        response_headers,
        Body::from_stream(ReceiverStream::new(rows)),
    )
        .into_response())
}

async fn head_partition(
    State(state): State<AppState>,
    caller: Caller,
    PartitionPath(table, ds): PartitionPath,
    ApiQuery(query): ApiQuery<ReadQuery>,
    headers: HeaderMap,
) -> ApiResult<Response> {
    caller.require(Scope::Read, &table)?;
    let format = read_format(&headers, &query)?;
    let (_, _, info) = live_partition(&state, &table, &ds).await?;
    // The GET streams the rows chunked, their length unknown until read:
    // a body of unknown size keeps axum from saying `Content-Length: 0`.
    let unknown_length = futures::stream::empty::<Result<bytes::Bytes, std::io::Error>>();
    Ok((
        StatusCode::OK,
        partition_headers(&info, format),
        Body::from_stream(unknown_length),
    )
        .into_response())
}

async fn delete_partition(
    State(state): State<AppState>,
    caller: Caller,
    PartitionPath(table, ds): PartitionPath,
) -> ApiResult<StatusCode> {
    caller.require(Scope::Write, &table)?;
    let def = partitioned_def(&state, &table).await?;
    let ds = parse_period(&ds, def.grain)?;
    state.store.delete_partition(&def, ds).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// A partition as listed: the registry's entry and the bounds of its period.
fn listed(info: PartitionInfo, grain: Grain) -> PartitionView {
    let period = Period::parse(&info.ds, grain);
    let instant = |t: chrono::NaiveDateTime| t.format("%Y-%m-%dT%H:%M:%SZ").to_string();
    PartitionView {
        from: period.map(|p| instant(p.start())),
        to: period.map(|p| instant(p.end())),
        ds: info.ds,
        rows: info.rows,
        content_sha256: info.content_sha256,
        load_id: info.load_id,
        published_at: info.published_at,
    }
}

#[derive(Deserialize)]
struct ListQuery {
    limit: Option<i64>,
    /// The last partition value of the previous page.
    cursor: Option<String>,
}

async fn list_partitions(
    State(state): State<AppState>,
    caller: Caller,
    OriginalUri(uri): OriginalUri,
    TablePath(table): TablePath,
    ApiQuery(q): ApiQuery<ListQuery>,
) -> ApiResult<Response> {
    caller.require(Scope::Read, &table)?;
    let def = table_def(&state, &table).await?;
    let after = q
        .cursor
        .as_deref()
        .map(|c| parse_period(c, def.grain))
        .transpose()?;
    let limit = page_limit(q.limit)?;
    // A plain table's one pseudo-partition is no partition to list.
    let partitions = match def.is_plain() {
        true => Vec::new(),
        false => state.store.partitions(&table, after, limit).await?,
    };
    let listed: Vec<PartitionView> = partitions
        .into_iter()
        .map(|info| listed(info, def.grain))
        .collect();
    Ok(page(&uri, listed, limit, |p: &PartitionView| p.ds.clone()))
}
