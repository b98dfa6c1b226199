//! `/console/rejects`: a table's pending rejects grouped by the column of
//! their first error, each as sent (its raw bytes, line and load); a
//! replay of the table's pending rejects (`POST /rejects/replay`, under a
//! key the page made, so a form sent twice replays once), and a delete of
//! the expired ones.

use axum::extract::{Query, State};
use axum::response::Response;
use maud::{html, Markup};
use serde::Deserialize;

use super::error::PageResult;
use super::layout::page;
use super::session::{FormBody, Signed};
use super::text::{grouped, query_string, shown_count};
use crate::access::Scope;
use crate::http::extract::parse_id;
use crate::http::observe::RequestSpan;
use crate::http::rejects::{check_error_column, replay as replay_rejects};
use crate::http::state::AppState;
use crate::idempotency::{IdempotencyKey, KeyedRequest};
use crate::names::TableName;
use crate::store::console::{ErrorGroup, COUNT_CAP};
use crate::store::rejects::{RejectCursor, RejectFilter, StoredReject};
use crate::wire::rejects::DeletedRejects;
use crate::wire::status::RejectStatus;

/// Rejects a page.
const PAGE: i64 = 50;

#[derive(Deserialize, Default)]
pub struct RejectsQuery {
    #[serde(default)]
    table: String,
    /// The error column of the group shown (`-` for a row's own errors).
    column: Option<String>,
    #[serde(default)]
    load_id: String,
    /// The last reject of the previous page (`load_id.record`).
    #[serde(default)]
    after: String,
}

/// What a replay did, shown above the rejects that stay.
struct Outcome {
    receipt: serde_json::Value,
}

pub async fn list(
    State(state): State<AppState>,
    signed: Signed,
    Query(q): Query<RejectsQuery>,
) -> PageResult<Response> {
    view(&state, &signed, &q, None).await
}

async fn view(
    state: &AppState,
    signed: &Signed,
    q: &RejectsQuery,
    outcome: Option<Outcome>,
) -> PageResult<Response> {
    let table = signed.readable_table(&q.table)?;
    let groups = match &table {
        Some(table) => state.store.reject_groups(table).await?,
        None => Vec::new(),
    };
    // The group shown: the one asked for, else the first.
    let column = q
        .column
        .clone()
        .or_else(|| groups.first().map(|g| g.column.clone()))
        .map(|c| if c == "-" { String::new() } else { c });
    let rejects = page_of_rejects(state, signed, q, table.as_ref(), column.as_deref()).await?;
    let body = html! {
        (table_form(q))
        @if let Some(outcome) = &outcome { (outcome_view(outcome)) }
        @if let Some(table) = &table {
            (groups_view(table, &groups, column.as_deref()))
            @if signed.caller.grants.allows(Scope::Write, table) { (actions(signed, table)) }
        } @else {
            p { "Choose a table to group its rejects by error and replay them. Below: the pending rejects of every table this token may read, oldest first." }
        }
        (rejects_view(&rejects))
        @if let Some(last) = rejects.last().filter(|_| rejects.len() == usize::try_from(PAGE).unwrap_or(usize::MAX)) {
            @let after = RejectCursor { load_id: last.load_id, record: last.record }.text();
            @let column_param = column.as_deref().map(|c| if c.is_empty() { "-" } else { c }).unwrap_or("");
            p.pages { a rel="next" href={ "/console/rejects?" (query_string(&[
                ("table", &q.table), ("column", column_param), ("load_id", &q.load_id), ("after", &after)])) } { "More rejects →" } }
        }
    };
    Ok(page(
        "Rejects",
        "/console/rejects",
        Some(signed.viewer()),
        body,
    ))
}

async fn page_of_rejects(
    state: &AppState,
    signed: &Signed,
    q: &RejectsQuery,
    table: Option<&TableName>,
    column: Option<&str>,
) -> PageResult<Vec<StoredReject>> {
    let load_id = (!q.load_id.is_empty())
        .then(|| parse_id(&q.load_id, "load id"))
        .transpose()?;
    let after = (!q.after.is_empty())
        .then(|| {
            RejectCursor::parse(&q.after).ok_or_else(|| {
                crate::http::error::ApiError::InvalidRequest(format!(
                    "{:?} is not a position in the rejects (load_id.record)",
                    q.after
                ))
            })
        })
        .transpose()?;
    let visible = signed.caller.grants.readable_like();
    let filter = RejectFilter {
        table,
        load_id,
        status: Some(RejectStatus::Pending),
        since: None,
        // Only with a table: the groups are a table's.
        error_column: table.and(column).map(check_error_column).transpose()?,
        visible: &visible,
    };
    Ok(state.store.rejects(&filter, after, PAGE).await?)
}

fn table_form(q: &RejectsQuery) -> Markup {
    html! {
        form.filters method="get" action="/console/rejects" {
            label { "Table " input type="text" name="table" value=(q.table) size="16"; }
            button type="submit" { "Show" }
        }
    }
}

fn groups_view(table: &TableName, groups: &[ErrorGroup], shown: Option<&str>) -> Markup {
    html! {
        @if groups.is_empty() {
            p.empty { "No pending rejects in " (table) "." }
        } @else {
            table.list.groups {
                caption { "Pending rejects of " (table) " by the column of their first error" }
                thead { tr { th scope="col" { "Column" } th scope="col" { "For example" } th scope="col" .num { "Rejects" } } }
                tbody {
                    @for group in groups {
                        @let param = if group.column.is_empty() { "-" } else { group.column.as_str() };
                        tr data-column=(group.column) aria-current=[(shown == Some(group.column.as_str())).then_some("true")] {
                            td { a href={ "/console/rejects?" (query_string(&[("table", table.as_str()), ("column", param)])) } {
                                @if group.column.is_empty() { "(the row)" } @else { code { (group.column) } } } }
                            td { (group.example) }
                            td.num { (shown_count(group.count, COUNT_CAP)) }
                        }
                    }
                }
            }
        }
    }
}

fn actions(signed: &Signed, table: &TableName) -> Markup {
    // The key of this page's replay: sent twice, the form replays once.
    let key = format!("console-replay-{}", uuid::Uuid::now_v7());
    html! {
        div.actions {
            form method="post" action="/console/rejects/replay" {
                (signed.csrf_field())
                input type="hidden" name="table" value=(table);
                input type="hidden" name="key" value=(key);
                button type="submit" { "Replay the pending rejects of " (table) }
            }
            form method="post" action="/console/rejects/delete" {
                (signed.csrf_field())
                input type="hidden" name="table" value=(table);
                button.secondary type="submit" { "Delete the expired rejects of " (table) }
            }
        }
    }
}

fn outcome_view(outcome: &Outcome) -> Markup {
    let field = |name: &str| {
        outcome
            .receipt
            .get(name)
            .and_then(|v| v.as_i64())
            .unwrap_or(0)
    };
    html! {
        section.outcome role="status" aria-labelledby="outcome" {
            h2 #outcome { "Done" }
            @if outcome.receipt.get("deleted").is_some() {
                p { "Deleted " (grouped(field("deleted"))) " expired rejects." }
            } @else {
                p { "Replayed " (grouped(field("rows_replayed"))) " rejects: "
                    strong #written { (grouped(field("rows_written"))) } " rows written, "
                    strong #still-pending { (grouped(field("still_pending"))) } " still pending, "
                    (grouped(field("expired"))) " expired."
                    @if outcome.receipt.get("replayed").and_then(|v| v.as_bool()) == Some(true) {
                        " (This form was sent before: its first answer.)"
                    }
                }
            }
            details { summary { "Receipt" } pre { (serde_json::to_string_pretty(&outcome.receipt).unwrap_or_default()) } }
        }
    }
}

fn rejects_view(rejects: &[StoredReject]) -> Markup {
    html! {
        @if !rejects.is_empty() {
            table.list.rejects {
                caption { "Pending rejects, oldest first" }
                thead { tr {
                    th scope="col" { "Table" } th scope="col" { "Line" } th scope="col" { "Partition" }
                    th scope="col" { "Errors" } th scope="col" { "As sent" } th scope="col" { "Load" } th scope="col" .num { "Tries" }
                } }
                tbody {
                    @for reject in rejects {
                        tr data-load=(reject.load_id) data-record=(reject.record) {
                            td { (reject.table) }
                            td.num { (reject.line) }
                            td { (reject.ds.as_deref().unwrap_or("")) }
                            td { ul.errors { @for problem in &reject.errors {
                                li { @if let Some(column) = &problem.column { code { (column) } ": " } (problem.message) }
                            } } }
                            td { (raw(reject)) }
                            td { a href={ "/console/loads?" (query_string(&[("load_id", &reject.load_id.to_string())])) } {
                                code { (reject.load_id.to_string().get(..8).unwrap_or("")) "…" } } }
                            td.num { (reject.tries) }
                        }
                    }
                }
            }
        }
    }
}

fn raw(reject: &StoredReject) -> Markup {
    html! {
        @if let Some(text) = &reject.raw {
            pre.raw { (text) }
        } @else if let Some(bytes) = &reject.raw_base64 {
            pre.raw title="not UTF-8: base64" { "base64: " (bytes) }
        } @else {
            em { "too large to keep" }
        }
    }
}

/// `POST /console/rejects/replay`: the same replay `POST
/// /rejects/replay?table=` makes, under the key the page made.
pub async fn replay(
    State(state): State<AppState>,
    span: RequestSpan,
    signed: Signed,
    form: FormBody,
) -> PageResult<Response> {
    signed.check_form(&form)?;
    let table = TableName::parse(form.required("table")?)?;
    let key = IdempotencyKey::parse(form.required("key")?)
        .map_err(|e| crate::http::error::ApiError::IdempotencyKeyInvalid(e.to_string()))?;
    let request = KeyedRequest {
        principal: signed.caller.actor.principal.clone(),
        key,
        method: "POST",
        path_and_query: format!(
            "/rejects/replay?{}",
            query_string(&[("table", table.as_str())])
        ),
        content_type: String::new(),
    };
    let answer = replay_rejects(&state, &span, signed.caller.clone(), &table, request).await?;
    state.saw_answer(&span, &table, &answer);
    let receipt = answer.body.into_json();
    let q = RejectsQuery {
        table: table.to_string(),
        ..RejectsQuery::default()
    };
    view(&state, &signed, &q, Some(Outcome { receipt })).await
}

/// `POST /console/rejects/delete`: `DELETE /rejects?table=&status=expired`.
pub async fn delete_expired(
    State(state): State<AppState>,
    signed: Signed,
    form: FormBody,
) -> PageResult<Response> {
    signed.check_form(&form)?;
    let table = TableName::parse(form.required("table")?)?;
    signed.caller.require(Scope::Write, &table)?;
    let status = RejectStatus::Expired;
    let deleted = state.store.delete_rejects(&table, status).await?;
    let deleted = DeletedRejects {
        deleted,
        status,
        table: table.clone(),
    };
    let receipt = serde_json::to_value(deleted).expect("a receipt serializes");
    let q = RejectsQuery {
        table: table.to_string(),
        ..RejectsQuery::default()
    };
    view(&state, &signed, &q, Some(Outcome { receipt })).await
}
