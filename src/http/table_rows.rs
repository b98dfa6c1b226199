//! `GET`/`HEAD /tables/{table}/rows`: the whole table read back, as a
//! partition GET reads a partition (same formats, headers and
//! preconditions), a partitioned table's partitions in ds order. Its ETag
//! is the table's content hash, the sum of its partitions'.

use axum::body::Body;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use tokio_stream::wrappers::ReceiverStream;

use super::auth::Caller;
use super::extract::{ApiQuery, TablePath};
use super::partitions::{read_format, rows_headers, ReadQuery};
use super::preconditions;
use super::state::AppState;
use super::write::table_def;
use crate::access::Scope;
use crate::http::error::ApiResult;

pub fn router() -> Router<AppState> {
    Router::new().route("/tables/{table}/rows", get(get_rows).head(head_rows))
}

#[tracing::instrument(skip_all, fields(table = %table))]
async fn get_rows(
    State(state): State<AppState>,
    caller: Caller,
    TablePath(table): TablePath,
    ApiQuery(query): ApiQuery<ReadQuery>,
    headers: HeaderMap,
) -> ApiResult<Response> {
    caller.require(Scope::Read, &table)?;
    let format = read_format(&headers, &query)?;
    let def = table_def(&state, &table).await?;
    let snapshot = state.store.open_table(&def).await?;
    let content = &snapshot.content.content;
    let hex = content.hex();
    let response_headers = rows_headers(&hex, content.rows(), format);
    if preconditions::if_none_match_names(&headers, &hex) {
        return Ok((StatusCode::NOT_MODIFIED, response_headers).into_response());
    }
    let rows = snapshot.stream(format);
    Ok((
        response_headers,
        Body::from_stream(ReceiverStream::new(rows)),
    )
        .into_response())
}

#[tracing::instrument(skip_all, fields(table = %table))]
async fn head_rows(
    State(state): State<AppState>,
    caller: Caller,
    TablePath(table): TablePath,
    ApiQuery(query): ApiQuery<ReadQuery>,
    headers: HeaderMap,
) -> ApiResult<Response> {
    caller.require(Scope::Read, &table)?;
    let format = read_format(&headers, &query)?;
    table_def(&state, &table).await?;
    let content = state.store.table_content(&table).await?.content;
    // As a partition's HEAD: a body of unknown size keeps axum from saying
    // `Content-Length: 0`.
    let unknown_length = futures::stream::empty::<Result<bytes::Bytes, std::io::Error>>();
    Ok((
        StatusCode::OK,
        rows_headers(&content.hex(), content.rows(), format),
        Body::from_stream(unknown_length),
    )
        .into_response())
}
