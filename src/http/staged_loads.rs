//! Loads that outlive a request: `POST /loads` opens one (under an
//! Idempotency-Key), `PUT /loads/{id}/parts/{n}` stages a part, `POST
//! /loads/{id}/audit` and `/publish` audit and publish it, `DELETE
//! /loads/{id}` abandons it; `GET /loads/{id}` shows it (`loads`).

use std::collections::BTreeMap;

use axum::body::Body;
use axum::extract::State;
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{post, put};
use axum::{Json, Router};
use serde::Deserialize;
use serde_json::json;
use sha2::{Digest, Sha256};

use super::auth::Caller;
use super::extract::{parse_id, parse_period, ApiPath, ApiQuery};
use super::state::AppState;
use super::write::{
    body_limits, body_source, idempotency_key, spawn_write, BodyKind, REPLAYED_HEADER,
};
use crate::access::Scope;
use crate::http::error::{ApiError, ApiResult};
use crate::names::TableName;
use crate::pipeline::{DigestMode, LoadView, OpenLoad, PartUpload, RunLoad};
use crate::wire::loads::{self as wire, OpenRequest, PublishRequest};

/// The longest a load may stay open: a year.
const MAX_TTL_SECONDS: u64 = 366 * 24 * 3600;

/// A load's request bodies are small; anything larger is a mistake.
const MAX_REQUEST_BYTES: usize = 1 << 20;

pub fn router() -> Router<AppState> {
    Router::new()
        .route("/loads", post(open_load))
        .route("/loads/{load_id}/parts/{part}", put(put_part))
        .route("/loads/{load_id}/audit", post(audit_load))
        .route("/loads/{load_id}/publish", post(publish_load))
}

/// A small JSON body; `None` when there is none (or only white space).
async fn read_json<T: serde::de::DeserializeOwned>(body: Body) -> ApiResult<Option<T>> {
    let bytes = axum::body::to_bytes(body, MAX_REQUEST_BYTES)
        .await
        .map_err(|_| {
            ApiError::InvalidRequest(format!("the body is larger than {MAX_REQUEST_BYTES} bytes"))
        })?;
    if bytes.iter().all(u8::is_ascii_whitespace) {
        return Ok(None);
    }
    serde_json::from_slice(&bytes).map(Some).map_err(|e| {
        ApiError::InvalidRequest(format!("line {}, column {}: {e}", e.line(), e.column()))
    })
}

async fn open_load(
    State(state): State<AppState>,
    caller: Caller,
    headers: HeaderMap,
    body: Body,
) -> ApiResult<Response> {
    let key = idempotency_key(&headers)?.ok_or(ApiError::IdempotencyKeyMissing)?;
    let request: OpenRequest = read_json(body).await?.ok_or_else(|| {
        ApiError::InvalidRequest("a load is opened with {\"table\", \"target\"}".into())
    })?;
    let table = TableName::parse(&request.table)?;
    caller.require(Scope::Write, &table)?;
    // The request as it means, not as it is spelled: members in any order.
    let canonical = json!({"table": table, "target": request.target, "audits": request.audits,
                           "ttl_seconds": request.ttl_seconds});
    let ttl = match request.ttl_seconds {
        None => state.settings.load_ttl(),
        Some(seconds @ 1..=MAX_TTL_SECONDS) => std::time::Duration::from_secs(seconds),
        Some(other) => {
            return Err(ApiError::InvalidRequest(format!(
                "ttl_seconds {other} is not 1 to {MAX_TTL_SECONDS}"
            )))
        }
    };
    let fingerprint = hex::encode(Sha256::digest(canonical.to_string()));
    let open = OpenLoad {
        table,
        target: request.target,
        audits: request.audits,
        actor: caller.actor.clone(),
        key,
        fingerprint,
        ttl,
    };
    let pipeline = state.pipeline();
    let (view, created) = spawn_write(async move { pipeline.open_load(open).await }).await?;
    let mut response = (StatusCode::CREATED, Json(wire_view(&view))).into_response();
    let headers = response.headers_mut();
    let location = format!("/loads/{}", view.load.load_id);
    headers.insert(
        header::LOCATION,
        HeaderValue::from_str(&location).expect("a path is a header value"),
    );
    headers.insert(
        REPLAYED_HEADER,
        HeaderValue::from_static(if created { "false" } else { "true" }),
    );
    Ok(response)
}

/// The staged load `load_id`, if the caller may `scope` its table; to a
/// caller who may not even read it, no load at all.
pub async fn visible_load(
    state: &AppState,
    caller: &Caller,
    load_id: &str,
    scope: Scope,
) -> ApiResult<Option<LoadView>> {
    let load_id = parse_id(load_id, "load id")?;
    let Some(view) = state.pipeline().load_view(load_id).await? else {
        return Ok(None);
    };
    let table = TableName::parse(&view.load.table)?;
    if !caller.grants.allows(Scope::Read, &table) {
        return Ok(None);
    }
    caller.require(scope, &table)?;
    Ok(Some(view))
}

async fn load_for(
    state: &AppState,
    caller: &Caller,
    load_id: &str,
    scope: Scope,
) -> ApiResult<LoadView> {
    visible_load(state, caller, load_id, scope)
        .await?
        .ok_or_else(|| ApiError::NotFound(format!("no load {load_id}")))
}

#[derive(Deserialize)]
struct PartQuery {
    ds: Option<String>,
}

async fn put_part(
    State(state): State<AppState>,
    caller: Caller,
    ApiPath((load_id, part)): ApiPath<(String, String)>,
    ApiQuery(query): ApiQuery<PartQuery>,
    headers: HeaderMap,
    body: Body,
) -> ApiResult<Response> {
    let part: u32 = part
        .parse()
        .ok()
        .filter(|n| (1..=10_000).contains(n))
        .ok_or_else(|| ApiError::InvalidRequest(format!("part {part:?} is not 1 to 10000")))?;
    let view = load_for(&state, &caller, &load_id, Scope::Write).await?;
    let grain = state
        .store
        .table(&TableName::parse(&view.load.table)?)
        .await?
        .map(|def| def.grain)
        .unwrap_or_default();
    let ds = query
        .ds
        .as_deref()
        .map(|d| parse_period(d, grain))
        .transpose()?;
    let upload = PartUpload {
        load_id: view.load.load_id,
        part,
        body: body_source(
            &headers,
            body,
            body_limits(&state.settings, BodyKind::Partition),
            DigestMode::Skip,
        )?,
        ds,
        actor: caller.actor.clone(),
    };
    let pipeline = state.pipeline();
    let receipt = spawn_write(async move { pipeline.put_part(upload).await }).await?;
    Ok(Json(receipt).into_response())
}

async fn audit_load(
    State(state): State<AppState>,
    caller: Caller,
    ApiPath(load_id): ApiPath<String>,
) -> ApiResult<Response> {
    let view = load_for(&state, &caller, &load_id, Scope::Write).await?;
    run(&state, &caller, view, None, true).await
}

async fn publish_load(
    State(state): State<AppState>,
    caller: Caller,
    ApiPath(load_id): ApiPath<String>,
    body: Body,
) -> ApiResult<Response> {
    let view = load_for(&state, &caller, &load_id, Scope::Write).await?;
    let request: PublishRequest = read_json(body).await?.unwrap_or_default();
    if request
        .reason
        .as_deref()
        .is_some_and(|r| r.trim().is_empty())
    {
        return Err(ApiError::InvalidRequest("reason is empty".into()));
    }
    let force = match (request.force, request.reason) {
        (false, _) => None,
        (true, Some(reason)) if !reason.trim().is_empty() => {
            if !caller.grants.is_admin() {
                return Err(ApiError::Forbidden(
                    "publishing despite failed audits takes an admin token".into(),
                ));
            }
            Some(reason)
        }
        (true, _) => {
            return Err(ApiError::InvalidRequest(
                "force takes a reason: {\"force\": true, \"reason\": \"…\"}".into(),
            ))
        }
    };
    run(&state, &caller, view, force, false).await
}

async fn run(
    state: &AppState,
    caller: &Caller,
    view: LoadView,
    force: Option<String>,
    audit_only: bool,
) -> ApiResult<Response> {
    let request = RunLoad {
        load_id: view.load.load_id,
        actor: caller.actor.clone(),
        force,
        audit_only,
    };
    let pipeline = state.pipeline();
    let answer = spawn_write(async move { pipeline.run_load(request).await }).await?;
    let mut body = answer.body;
    if !audit_only {
        body["replayed"] = serde_json::Value::Bool(answer.replayed);
    }
    let mut response = Json(body).into_response();
    if !audit_only {
        response.headers_mut().insert(
            REPLAYED_HEADER,
            HeaderValue::from_static(if answer.replayed { "true" } else { "false" }),
        );
    }
    Ok(response)
}

/// `DELETE /loads/{id}`: abandons it.
pub async fn abandon_load(
    State(state): State<AppState>,
    caller: Caller,
    ApiPath(load_id): ApiPath<String>,
) -> ApiResult<Json<wire::LoadView>> {
    let view = load_for(&state, &caller, &load_id, Scope::Write).await?;
    let pipeline = state.pipeline();
    let id = view.load.load_id;
    let view = spawn_write(async move { pipeline.abandon_load(id).await }).await?;
    Ok(Json(wire_view(&view)))
}

/// A staged load as `GET /loads/{id}` shows it.
pub fn wire_view(view: &LoadView) -> wire::LoadView {
    let load = &view.load;
    let mut partitions: BTreeMap<String, u64> = BTreeMap::new();
    let parts = view
        .parts
        .iter()
        .map(|part| {
            if let Some(additions) = part.additions.as_object() {
                for (ds, added) in additions {
                    let rows = added.get("rows").and_then(|r| r.as_u64()).unwrap_or(0);
                    *partitions.entry(ds.clone()).or_default() += rows;
                }
            }
            wire::PartView {
                content_sha256: part.content_sha256.clone(),
                part: part.part,
                rejected: part.rejected,
                rows: part.rows,
                rows_received: part.rows_received,
                uploaded_at: part.uploaded_at,
            }
        })
        .collect();
    wire::LoadView {
        audit_report: load.audit_report.clone(),
        audits: load.audits.clone(),
        created_at: load.created_at,
        expires_at: load.expires_at,
        forced: load.forced.clone(),
        load_id: load.load_id,
        partitions,
        parts,
        receipt: load.receipt.clone(),
        status: load.status,
        table: load.table.clone(),
        target: load.target.clone(),
    }
}
