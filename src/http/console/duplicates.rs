//! `/console/duplicates`: the versions of repeated keys a `duplicates`
//! policy held or dropped, a key at a time, side by side, with the values
//! that differ between versions marked.

use std::collections::BTreeSet;

use axum::extract::{Query, State};
use axum::response::Response;
use maud::{html, Markup};
use serde::Deserialize;

use super::error::PageResult;
use super::layout::page;
use super::session::Signed;
use super::text::query_string;
use crate::http::error::ApiError;
use crate::http::extract::parse_id;
use crate::http::state::AppState;
use crate::store::duplicates_log::{LogCursor, LoggedVersion};

/// Versions a page.
const PAGE: i64 = 100;

#[derive(Deserialize, Default)]
pub struct DuplicatesQuery {
    #[serde(default)]
    table: String,
    #[serde(default)]
    load_id: String,
    /// The last version of the previous page.
    #[serde(default)]
    after: String,
}

pub async fn list(
    State(state): State<AppState>,
    signed: Signed,
    Query(q): Query<DuplicatesQuery>,
) -> PageResult<Response> {
    let table = signed.readable_table(&q.table)?;
    let load_id = (!q.load_id.is_empty())
        .then(|| parse_id(&q.load_id, "load id"))
        .transpose()?;
    let after = (!q.after.is_empty())
        .then(|| {
            LogCursor::parse(&q.after).ok_or_else(|| {
                ApiError::InvalidRequest(format!("{:?} is not a position in the log", q.after))
            })
        })
        .transpose()?;
    let visible = signed.caller.grants.readable_like();
    let versions = state
        .store
        .duplicates(table.as_ref(), load_id, &visible, after.as_ref(), PAGE)
        .await?;
    let full = versions.len() == usize::try_from(PAGE).unwrap_or(usize::MAX);
    let next = versions
        .last()
        .filter(|_| full)
        .map(|v| LogCursor::of(v).text());
    let body = html! {
        form.filters method="get" action="/console/duplicates" {
            label { "Table " input type="text" name="table" value=(q.table) size="16"; }
            button type="submit" { "Show" }
        }
        @if versions.is_empty() {
            p { "No duplicate versions are logged here." }
        }
        @for group in by_key(&versions) { (key_view(group)) }
        @if let Some(next) = next {
            p.pages { a rel="next" href={ "/console/duplicates?" (query_string(&[
                ("table", &q.table), ("load_id", &q.load_id), ("after", &next)])) } { "More keys →" } }
        }
    };
    Ok(page(
        "Duplicates",
        "/console/duplicates",
        Some(signed.viewer()),
        body,
    ))
}

/// The page's versions cut into runs of one key of one load (the log is
/// ordered by load, key, version).
fn by_key(versions: &[LoggedVersion]) -> Vec<&[LoggedVersion]> {
    versions
        .chunk_by(|a, b| a.load_id == b.load_id && a.row_id == b.row_id)
        .collect()
}

/// The fields of a key's versions, and whether their values differ.
fn fields(versions: &[LoggedVersion]) -> Vec<(String, bool)> {
    let names: BTreeSet<&String> = versions
        .iter()
        .filter_map(|v| v.row.0.as_object())
        .flat_map(|row| row.keys())
        .collect();
    names
        .into_iter()
        .map(|name| {
            let mut values = versions.iter().map(|v| v.row.0.get(name));
            let first = values.next().flatten();
            let differs = values.any(|value| value != first);
            (name.clone(), differs)
        })
        .collect()
}

fn key_view(versions: &[LoggedVersion]) -> Markup {
    let Some(first) = versions.first() else {
        return html! {};
    };
    let fields = fields(versions);
    html! {
        section.key data-row-id=(first.row_id) {
            h2 { code { (first.key.0.to_string()) } " in " (first.table)
                 @if let Some(ds) = &first.ds { " · " (ds) } }
            p.meta { "Policy " strong { (first.policy) } " · load "
                a href={ "/console/loads?" (query_string(&[("load_id", &first.load_id.to_string())])) } { code { (first.load_id) } } }
            table.list.versions {
                caption { (versions.len()) " versions of this key; values that differ are marked" }
                thead { tr {
                    th scope="col" { "Field" }
                    @for version in versions {
                        th scope="col" { "Version " (version.version)
                            @if version.kept_row_hash.is_none() && version.version == 1 && version.policy == "keep_one" { " (kept)" } }
                    }
                } }
                tbody {
                    @for (name, differs) in &fields {
                        tr class=[differs.then_some("differs")] {
                            th scope="row" { code { (name) } @if *differs { span.visually-hidden { " (differs)" } } }
                            @for version in versions {
                                td { code { (version.row.0.get(name).map(|v| v.to_string()).unwrap_or_default()) } }
                            }
                        }
                    }
                }
            }
        }
    }
}
