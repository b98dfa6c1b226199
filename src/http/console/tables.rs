//! `/console/tables`: every table the session may read, with its counts;
//! `/console/tables/{table}`: one table's definition, policies, calendar,
//! chart and schema history.

use std::collections::HashMap;

use axum::extract::{Path, Query, State};
use axum::response::Response;
use chrono::{NaiveDateTime, Utc};
use maud::{html, Markup};
use serde::Deserialize;

use super::calendar::{self, Window, DEFAULT_THRESHOLD_PCT};
use super::chart;
use super::error::PageResult;
use super::layout::page;
use super::session::Signed;
use super::text::{grouped, query_string, shown_count};
use crate::access::Scope;
use crate::http::error::ApiError;
use crate::http::extract::parse_label;
use crate::http::state::AppState;
use crate::names::TableName;
use crate::period::{Grain, Period};
use crate::schema::Retention;
use crate::store::catalog::TableInfo;
use crate::store::console::{LoadMark, TableActivity, COUNT_CAP};

/// Tables a page.
const PAGE: i64 = 50;

#[derive(Deserialize)]
pub struct ListQuery {
    /// The last table of the previous page.
    after: Option<String>,
}

pub async fn list(
    State(state): State<AppState>,
    signed: Signed,
    Query(q): Query<ListQuery>,
) -> PageResult<Response> {
    let after = q.after.as_deref().map(TableName::parse).transpose()?;
    let visible = signed.caller.grants.readable_like();
    let tables = state.store.tables(after.as_ref(), &visible, PAGE).await?;
    let names: Vec<&TableName> = tables.iter().map(|info| &info.def.name).collect();
    let activities = state.store.table_activity(&names).await?;
    let rows: Vec<_> = tables.into_iter().zip(activities).collect();
    let next = (rows.len() == usize::try_from(PAGE).unwrap_or(usize::MAX))
        .then(|| rows.last().map(|(info, _)| info.def.name.to_string()))
        .flatten();
    let body = html! {
        @if rows.is_empty() {
            p { "No table this token may read has been written yet." }
        } @else {
            table.list {
                caption { "Tables this token may read, by name" }
                thead { tr {
                    th scope="col" { "Table" } th scope="col" { "Grain" }
                    th scope="col" .num { "Partitions" } th scope="col" .num { "Rows" }
                    th scope="col" { "Last published" } th scope="col" { "Last refused" }
                    th scope="col" .num { "Pending rejects" }
                    th scope="col" .num { "Duplicates logged" }
                } }
                tbody {
                    @for (info, activity) in &rows { (table_row(info, activity)) }
                }
            }
        }
        @if let Some(next) = next {
            p.pages { a rel="next" href={ "/console/tables?" (query_string(&[("after", &next)])) } { "Next tables →" } }
        }
    };
    Ok(page(
        "Tables",
        "/console/tables",
        Some(signed.viewer()),
        body,
    ))
}

fn table_row(info: &TableInfo, activity: &TableActivity) -> Markup {
    let name = info.def.name.as_str();
    html! {
        tr data-table=(name) {
            td { a href={ "/console/tables/" (name) } { (name) } }
            td { (info.def.grain.as_str()) }
            td.num { (partitions_shown(info)) }
            td.num { (grouped(info.rows)) }
            td.published { (load_mark(activity.last_published.as_ref())) }
            td.refused { (load_mark(activity.last_refused.as_ref())) }
            td.num {
                @if activity.pending_rejects > 0 {
                    a href={ "/console/rejects?" (query_string(&[("table", name)])) } {
                        (shown_count(activity.pending_rejects, COUNT_CAP))
                    }
                } @else { "0" }
            }
            td.num {
                @if activity.duplicates > 0 {
                    a href={ "/console/duplicates?" (query_string(&[("table", name)])) } {
                        (shown_count(activity.duplicates, COUNT_CAP))
                    }
                } @else { "0" }
            }
        }
    }
}

/// A table's partitions as a count, or `whole` for a table without any
/// (a count of 0 would read as a partitioned table still empty).
fn partitions_shown(info: &TableInfo) -> String {
    match info.def.grain {
        Grain::Whole => "whole".into(),
        _ => grouped(info.partitions),
    }
}

/// A load as a link to it in the ledger, with its end and status.
fn load_mark(mark: Option<&LoadMark>) -> Markup {
    html! {
        @match mark {
            Some(LoadMark { id, status, at }) => {
                a href={ "/console/loads?" (query_string(&[("load_id", &id.to_string())])) } {
                    time datetime=(at.to_rfc3339()) { (at.format("%Y-%m-%d %H:%M:%S UTC")) }
                }
                " " span class={ "status " (status.as_str()) } { (status.as_str()) }
            }
            None => "none",
        }
    }
}

/// Why a refusal newer than the last publish is no harm to the table.
fn refusal_note(activity: &TableActivity) -> Option<&'static str> {
    let refused = activity.last_refused.as_ref()?;
    let newer = activity
        .last_published
        .as_ref()
        .is_none_or(|published| refused.id > published.id);
    newer
        .then_some("Refused loads change nothing: the table is as its last published load left it.")
}

#[derive(Deserialize)]
pub struct ShowQuery {
    /// A partition label: the calendar shows the window holding it.
    at: Option<String>,
    /// How far a count may move against its comparable, in percent.
    threshold: Option<u64>,
}

pub async fn show(
    State(state): State<AppState>,
    signed: Signed,
    Path(table): Path<String>,
    Query(q): Query<ShowQuery>,
) -> PageResult<Response> {
    let table = TableName::parse(&table)?;
    signed.caller.require(Scope::Read, &table)?;
    let info = state
        .store
        .table_info(&table)
        .await?
        .ok_or_else(|| ApiError::NotFound(format!("no table {table}")))?;
    let activity = state.store.table_activity(&[&table]).await?.pop();
    let activity = activity.unwrap_or_default();
    let history = state.store.history(&table).await?;
    let partitions = match info.def.grain {
        Grain::Whole => html! { p { "A plain table: one set of rows, no partitions." } },
        grain => partitions_view(&state, &table, grain, info.def.retention, &q).await?,
    };
    let body = html! {
        (summary(&info, &activity))
        section aria-labelledby="partitions" {
            h2 #partitions { "Partitions" }
            (partitions)
        }
        (definition(&info))
        (history_view(&history))
    };
    Ok(page(
        table.as_str(),
        "/console/tables",
        Some(signed.viewer()),
        body,
    ))
}

fn summary(info: &TableInfo, activity: &TableActivity) -> Markup {
    let name = info.def.name.as_str();
    html! {
        dl.summary {
            dt { "Rows" } dd { (grouped(info.rows)) }
            dt { "Partitions" } dd { (partitions_shown(info)) }
            dt { "Last published" } dd.published { (load_mark(activity.last_published.as_ref())) }
            dt { "Last refused" }
            dd.refused {
                (load_mark(activity.last_refused.as_ref()))
                @if let Some(note) = refusal_note(activity) { br; span.note { (note) } }
            }
            dt { "Pending rejects" }
            dd { a href={ "/console/rejects?" (query_string(&[("table", name)])) } {
                (shown_count(activity.pending_rejects, COUNT_CAP)) } }
            dt { "Duplicates logged" }
            dd { a href={ "/console/duplicates?" (query_string(&[("table", name)])) } {
                (shown_count(activity.duplicates, COUNT_CAP)) } }
            dt { "Loads" }
            dd { a href={ "/console/loads?" (query_string(&[("table", name)])) } { "the ledger of " (name) } }
        }
    }
}

/// The calendar of the window asked for (or the one holding the last
/// partition), its chart and its links.
async fn partitions_view(
    state: &AppState,
    table: &TableName,
    grain: Grain,
    retention: Option<Retention>,
    q: &ShowQuery,
) -> PageResult<Markup> {
    let span = state.store.partition_span(table).await?;
    let at = match (&q.at, &span) {
        (Some(at), _) => parse_label(at)?.start(),
        (None, Some((_, last))) => parse_label(last)?.start(),
        (None, None) => Utc::now().naive_utc(),
    };
    let window = Window::holding(at, grain);
    let counts = window_counts(state, table, &window).await?;
    let threshold = q.threshold.unwrap_or(DEFAULT_THRESHOLD_PCT);
    let kept_after = retention.map(|r| r.limit(state.settings.now()));
    let cells = calendar::cells(&window, &counts, span.as_ref(), kept_after, threshold);
    let first = cells.first().map(|c| c.label.clone()).unwrap_or_default();
    let last = cells.last().map(|c| c.label.clone()).unwrap_or_default();
    Ok(html! {
        p {
            "From " (first) " to " (last) "; a cell links to the loads of its partition. "
            "Outlined: the count moved more than " (threshold) "% against the "
            (if grain == Grain::Month { "same month a year before" } else { "same weekday a week before" }) "."
        }
        (calendar::window_links(&window, table.as_str()))
        (calendar::calendar(&window, &cells, table.as_str()))
        (chart::chart(&cells))
    })
}

/// The row counts of the window's partitions and of their comparables, by
/// label: one indexed range read of the partition registry.
async fn window_counts(
    state: &AppState,
    table: &TableName,
    window: &Window,
) -> PageResult<HashMap<String, u64>> {
    let reach: NaiveDateTime = window.reach();
    let before_reach = Period::containing(reach - chrono::Duration::hours(1), window.grain);
    let end_label = Period::containing(window.end, window.grain).label();
    let most = i64::try_from(window.periods().len() * 2 + 2).unwrap_or(i64::MAX);
    let partitions = state
        .store
        .partitions(table, Some(before_reach), most)
        .await?;
    Ok(partitions
        .into_iter()
        .filter(|p| p.ds < end_label)
        .map(|p| (p.ds, p.rows))
        .collect())
}

fn definition(info: &TableInfo) -> Markup {
    let def = serde_json::to_value(&info.def).unwrap_or_default();
    let policies = [
        "schema",
        "bad_rows",
        "reject_retry_window",
        "duplicates",
        "duplicate_log",
        "write_mode",
        "history",
        "audits",
    ];
    let key = info
        .def
        .primary_key
        .iter()
        .map(|c| c.as_str())
        .collect::<Vec<_>>();
    html! {
        section aria-labelledby="definition" {
            h2 #definition { "Definition" }
            dl.summary {
                dt { "Key" } dd { @if key.is_empty() { "none" } @else { (key.join(", ")) } }
                dt { "Cursor" } dd { (info.def.cursor.as_ref().map_or("none", |c| c.as_str())) }
                dt { "Partitioned by" }
                dd { (info.def.partition_by.as_ref().map_or("nothing (a plain table)", |c| c.as_str()))
                     " · grain " (info.def.grain.as_str()) }
                dt { "Declared" } dd { (if info.inferred { "inferred from its first body" } else { "by a declaration" }) }
                @for policy in policies {
                    @if let Some(value) = def.get(policy).filter(|v| !v.is_null()) {
                        dt { (policy) } dd { code { (compact(value)) } }
                    }
                }
            }
            table.list {
                caption { "Columns, in order" }
                thead { tr { th scope="col" { "Column" } th scope="col" { "Type" } th scope="col" { "Null" } } }
                tbody {
                    @for column in def["columns"].as_array().into_iter().flatten() {
                        tr {
                            td { code { (compact(&column["name"])) } }
                            td { (compact(&column["type"])) }
                            td { (if column["nullable"].as_bool().unwrap_or(true) { "yes" } else { "no" }) }
                        }
                    }
                }
            }
        }
    }
}

/// A JSON value as text: a string without its quotes.
fn compact(value: &serde_json::Value) -> String {
    match value {
        serde_json::Value::String(text) => text.clone(),
        other => other.to_string(),
    }
}

fn history_view(history: &[crate::store::catalog::SchemaVersion]) -> Markup {
    html! {
        section aria-labelledby="history" {
            h2 #history { "Schema history" }
            table.list {
                thead { tr {
                    th scope="col" .num { "Version" } th scope="col" { "At" }
                    th scope="col" { "Changes" } th scope="col" { "Load" }
                } }
                tbody {
                    @for version in history.iter().rev() {
                        tr {
                            td.num { (version.version) }
                            td { (version.at.format("%Y-%m-%d %H:%M:%S UTC")) }
                            td { @if version.version == 1 { "created" } @else { code { (compact(&version.changes.0)) } } }
                            td { @if let Some(id) = version.load_id {
                                a href={ "/console/loads?" (query_string(&[("load_id", &id.to_string())])) } { code { (id) } }
                            } }
                        }
                    }
                }
            }
        }
    }
}
