//! `/console/loads`: the ledger, newest first, filtered by table,
//! partition, status and token, or one load by id.

use axum::extract::{Query, State};
use axum::response::Response;
use maud::{html, Markup};
use serde::Deserialize;

use super::error::PageResult;
use super::layout::page;
use super::session::Signed;
use super::text::{grouped, query_string};
use crate::access::Scope;
use crate::http::extract::{parse_id, parse_label};
use crate::http::loads::{check_token_filter, parse_load_status};
use crate::http::state::AppState;
use crate::names::TableName;
use crate::store::ledger::{Load, LoadFilter};
use crate::wire::status::LoadStatus;

/// Loads a page.
const PAGE: i64 = 50;

#[derive(Deserialize, Default)]
pub struct LoadsQuery {
    #[serde(default)]
    table: String,
    #[serde(default)]
    ds: String,
    #[serde(default)]
    status: String,
    #[serde(default)]
    token: String,
    /// One load.
    #[serde(default)]
    load_id: String,
    /// The last load of the previous page.
    #[serde(default)]
    before: String,
}

pub async fn list(
    State(state): State<AppState>,
    signed: Signed,
    Query(q): Query<LoadsQuery>,
) -> PageResult<Response> {
    let loads = if q.load_id.is_empty() {
        filtered(&state, &signed, &q).await?
    } else {
        one(&state, &signed, &q.load_id).await?
    };
    let next = (loads.len() == usize::try_from(PAGE).unwrap_or(usize::MAX))
        .then(|| loads.last().map(|l| l.load_id.to_string()))
        .flatten();
    let body = html! {
        (filters(&q))
        @if loads.is_empty() {
            p { "No load matches." }
        } @else {
            table.list.loads {
                caption { "Loads, newest first" }
                thead { tr {
                    th scope="col" { "Started" } th scope="col" { "Table" } th scope="col" { "Partition" }
                    th scope="col" { "Mode" } th scope="col" { "Status" }
                    th scope="col" .num { "Received" } th scope="col" .num { "Written" }
                    th scope="col" .num { "Dropped as duplicates" } th scope="col" .num { "Rejected" }
                    th scope="col" .num { "Duration" } th scope="col" { "Token" } th scope="col" { "Key" }
                } }
                tbody { @for load in &loads { (load_row(load)) } }
            }
        }
        @if let Some(next) = next {
            p.pages { a rel="next" href={ "/console/loads?" (next_query(&q, &next)) } { "Older loads →" } }
        }
    };
    Ok(page("Loads", "/console/loads", Some(signed.viewer()), body))
}

async fn filtered(state: &AppState, signed: &Signed, q: &LoadsQuery) -> PageResult<Vec<Load>> {
    let some = |text: &str| (!text.is_empty()).then(|| text.to_string());
    let table = signed.readable_table(&q.table)?;
    let ds = some(&q.ds).map(|ds| parse_label(&ds)).transpose()?;
    let status = some(&q.status)
        .map(|status| parse_load_status(&status))
        .transpose()?;
    if !q.token.is_empty() {
        check_token_filter(&q.token)?;
    }
    let before = some(&q.before)
        .map(|id| parse_id(&id, "load id"))
        .transpose()?;
    let visible = signed.caller.grants.readable_like();
    let filter = LoadFilter {
        table: table.as_ref(),
        ds,
        status,
        token: (!q.token.is_empty()).then_some(q.token.as_str()),
        visible: &visible,
    };
    Ok(state.store.loads(filter, before, PAGE).await?)
}

/// The one load asked for, if the session may read its table.
async fn one(state: &AppState, signed: &Signed, id: &str) -> PageResult<Vec<Load>> {
    let id = parse_id(id, "load id")?;
    let load = state.store.load(id).await?.filter(|load| {
        TableName::parse(&load.table_name)
            .is_ok_and(|table| signed.caller.grants.allows(Scope::Read, &table))
    });
    Ok(load.into_iter().collect())
}

fn filters(q: &LoadsQuery) -> Markup {
    html! {
        form.filters method="get" action="/console/loads" {
            label { "Table " input type="text" name="table" value=(q.table) size="16"; }
            label { "Partition " input type="text" name="ds" value=(q.ds) size="12" placeholder="2026-10-12"; }
            label { "Status "
                select name="status" {
                    option value="" { "any" }
                    @for status in LoadStatus::ALL.iter().map(|s| s.as_str()) {
                        option value=(status) selected[q.status == status] { (status) }
                    }
                }
            }
            label { "Token " input type="text" name="token" value=(q.token) size="12"; }
            button type="submit" { "Filter" }
        }
    }
}

fn next_query(q: &LoadsQuery, before: &str) -> String {
    query_string(&[
        ("table", &q.table),
        ("ds", &q.ds),
        ("status", &q.status),
        ("token", &q.token),
        ("before", before),
    ])
}

fn load_row(load: &Load) -> Markup {
    html! {
        tr data-load=(load.load_id) {
            td { time datetime=(load.started_at.to_rfc3339()) { (load.started_at.format("%Y-%m-%d %H:%M:%S")) } }
            td { a href={ "/console/tables/" (load.table_name) } { (load.table_name) } }
            td { (load.ds.as_deref().unwrap_or("")) }
            td { (load.mode) }
            td { span class={ "status " (load.status.as_str()) } { (load.status.as_str()) } }
            td.num { (grouped(load.rows_received)) }
            td.num { (grouped(load.rows_written)) }
            td.num { (grouped(load.duplicates)) }
            td.num {
                @if load.rejected > 0 {
                    a href={ "/console/rejects?" (query_string(&[("table", &load.table_name), ("load_id", &load.load_id.to_string())])) } {
                        (grouped(load.rejected))
                    }
                } @else { "0" }
            }
            td.num { (grouped(load.duration_ms)) " ms" }
            td { (load.token_name.as_deref().unwrap_or("admin")) }
            td { @if let Some(key) = &load.idempotency_key { code { (key) } } }
        }
        @if let Some(error) = &load.error {
            tr.detail { td colspan="12" {
                details { summary { "What it reported" } pre { (serde_json::to_string_pretty(error).unwrap_or_default()) } }
            } }
        }
    }
}
