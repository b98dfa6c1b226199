//! `GET /tables/{table}/history/rows`: the versions a table declared with
//! `"history": "scd2"` keeps, each with its validity range, as NDJSON: every
//! key's or one key's (`key=`, `key.<column>=`), every partition's or one's
//! (`ds=`), all of them or those valid at an instant (`as_of=`).

use axum::body::Body;
use axum::extract::State;
use axum::http::header;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use tokio_stream::wrappers::ReceiverStream;

use super::auth::Caller;
use super::extract::{parse_period, ApiQuery, TablePath};
use super::state::AppState;
use super::write::table_def;
use crate::access::Scope;
use crate::http::error::{ApiError, ApiResult};
use crate::schema::TableDef;
use crate::store::history::{HistoryQuery, KeyValue};

pub fn router() -> Router<AppState> {
    Router::new().route("/tables/{table}/history/rows", get(get_history_rows))
}

#[tracing::instrument(skip_all, fields(table = %table))]
async fn get_history_rows(
    State(state): State<AppState>,
    caller: Caller,
    TablePath(table): TablePath,
    ApiQuery(params): ApiQuery<Vec<(String, String)>>,
) -> ApiResult<Response> {
    caller.require(Scope::Read, &table)?;
    let def = table_def(&state, &table).await?;
    if def.history.is_none() {
        return Err(ApiError::NoHistory(table));
    }
    let query = history_query(&def, &params)?;
    let snapshot = state.store.open_history(&def, &query).await?;
    Ok((
        [(header::CONTENT_TYPE, "application/x-ndjson")],
        Body::from_stream(ReceiverStream::new(snapshot.stream())),
    )
        .into_response())
}

/// The read the parameters ask for. A key is given whole or not at all:
/// `key=` for a one-column primary key, else `key.<column>=` for each of its
/// columns.
fn history_query(def: &TableDef, params: &[(String, String)]) -> ApiResult<HistoryQuery> {
    let mut query = HistoryQuery::default();
    let mut whole_key = None;
    let invalid = |message: String| Err(ApiError::InvalidRequest(message));
    for (name, value) in params {
        if params.iter().filter(|(n, _)| n == name).count() > 1 {
            return invalid(format!("{name} is given more than once"));
        }
        match name.as_str() {
            "key" => whole_key = Some(value.clone()),
            "ds" if def.is_plain() => {
                return invalid(format!(
                    "ds: table {:?} has no partitions (\"partition_by\": null)",
                    def.name.as_str()
                ))
            }
            "ds" => query.ds = Some(parse_period(value, def.grain)?),
            "as_of" => query.as_of = Some(value.clone()),
            "format" if matches!(value.as_str(), "ndjson" | "jsonl") => {}
            "format" => return invalid(format!("format {value:?}: history is read as ndjson")),
            _ => {
                let Some(column) = name.strip_prefix("key.") else {
                    return invalid(format!(
                        "{name} is not a parameter of this read (key, key.<column>, ds, as_of, format)"
                    ));
                };
                let Some(column) = def.primary_key.iter().find(|c| c.as_str() == column) else {
                    return invalid(format!("{name}: {column:?} is not a primary key column"));
                };
                query.key.push(KeyValue {
                    column: column.clone(),
                    value: value.clone(),
                    parameter: name.clone(),
                });
            }
        }
    }
    if let Some(value) = whole_key {
        let [column] = def.primary_key.as_slice() else {
            return invalid(format!(
                "key: the primary key has {} columns; give each as key.<column>=",
                def.primary_key.len()
            ));
        };
        if !query.key.is_empty() {
            return invalid("key: give key= or key.<column>=, not both".into());
        }
        query.key.push(KeyValue {
            column: column.clone(),
            value,
            parameter: "key".into(),
        });
    }
    if !query.key.is_empty() && query.key.len() != def.primary_key.len() {
        let missing: Vec<String> = def
            .primary_key
            .iter()
            .filter(|c| !query.key.iter().any(|k| &k.column == *c))
            .map(|c| format!("key.{}", c.as_str()))
            .collect();
        return invalid(format!(
            "the key is given in part: {} missing",
            missing.join(", ")
        ));
    }
    Ok(query)
}
