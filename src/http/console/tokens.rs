//! `/console/tokens` (admins only): the tokens, a form to make one (its
//! secret shown once, on the page that answers the form), and a revoke
//! button for each, through the same functions as `POST /tokens` and
//! `DELETE /tokens/{id}`.

use axum::extract::{Query, State};
use axum::response::Response;
use chrono::{DateTime, NaiveDate, Utc};
use maud::{html, Markup};
use serde::Deserialize;

use super::error::PageResult;
use super::layout::page;
use super::session::{FormBody, Signed};
use super::text::query_string;
use crate::access::{Scope, TablePattern};
use crate::http::error::ApiError;
use crate::http::extract::parse_id;
use crate::http::state::AppState;
use crate::http::tokens::{issue, revoke as revoke_token, Created, TokenRequest};
use crate::ids::TokenId;
use crate::store::tokens::TokenInfo;

/// Tokens a page.
const PAGE: i64 = 100;

#[derive(Deserialize, Default)]
pub struct TokensQuery {
    /// The last token of the previous page.
    #[serde(default)]
    after: String,
}

/// What the page says above the list after an act.
enum Done {
    Created(Box<Created>),
    Revoked(TokenId),
}

pub async fn list(
    State(state): State<AppState>,
    signed: Signed,
    Query(q): Query<TokensQuery>,
) -> PageResult<Response> {
    view(&state, &signed, &q, None).await
}

async fn view(
    state: &AppState,
    signed: &Signed,
    q: &TokensQuery,
    done: Option<Done>,
) -> PageResult<Response> {
    signed.caller.require_admin()?;
    let after = (!q.after.is_empty())
        .then(|| parse_id(&q.after, "token id"))
        .transpose()?;
    let tokens = state.store.tokens(after, PAGE).await?;
    let full = tokens.len() == usize::try_from(PAGE).unwrap_or(usize::MAX);
    let body = html! {
        @match &done {
            Some(Done::Created(created)) => section.outcome role="status" {
                h2 { "Token " (created.info.name) " made" }
                p { "Its secret, shown this once (copy it now; idem keeps only its digest):" }
                p { output #new-secret { code { (created.token) } } }
            },
            Some(Done::Revoked(id)) => section.outcome role="status" {
                p { "Token " code { (id) } " is revoked: every idem process refuses it from now on." }
            },
            None => {},
        }
        (create_form(signed))
        table.list.tokens {
            caption { "Live tokens, oldest first" }
            thead { tr {
                th scope="col" { "Name" } th scope="col" { "Scopes" } th scope="col" { "Tables" }
                th scope="col" { "Made" } th scope="col" { "Expires" } th scope="col" { "Revoke" }
            } }
            tbody { @for token in &tokens { (token_row(signed, token)) } }
        }
        @if let Some(last) = tokens.last().filter(|_| full) {
            p.pages { a rel="next" href={ "/console/tokens?" (query_string(&[("after", &last.id.to_string())])) } { "More tokens →" } }
        }
    };
    Ok(page(
        "Tokens",
        "/console/tokens",
        Some(signed.viewer()),
        body,
    ))
}

fn create_form(signed: &Signed) -> Markup {
    html! {
        form.create method="post" action="/console/tokens" {
            (signed.csrf_field())
            fieldset {
                legend { "Make a token" }
                label { "Name " input type="text" name="name" required maxlength="100"; }
                fieldset.scopes {
                    legend { "Scopes" }
                    @for scope in [Scope::Read, Scope::Write, Scope::Admin] {
                        label { input type="checkbox" name="scopes" value=(scope.as_str()) checked[scope == Scope::Read]; " " (scope.as_str()) }
                    }
                }
                label { "Tables (patterns, comma-separated) " input type="text" name="tables" value="*" size="24"; }
                label { "Expires (optional) " input type="date" name="expires"; }
                button type="submit" { "Make the token" }
            }
        }
    }
}

fn token_row(signed: &Signed, token: &TokenInfo) -> Markup {
    let scopes: Vec<&str> = token.scopes.iter().map(|s| s.as_str()).collect();
    let tables: Vec<&str> = token.tables.iter().map(TablePattern::as_str).collect();
    let day = |at: &DateTime<Utc>| at.format("%Y-%m-%d").to_string();
    html! {
        tr data-token=(token.id) {
            td { (token.name) }
            td { (scopes.join(", ")) }
            td { code { (tables.join(", ")) } }
            td { (day(&token.created_at)) }
            td { (token.expires_at.as_ref().map(day).unwrap_or_else(|| "never".into())) }
            td {
                form.inline method="post" action="/console/tokens/revoke" {
                    (signed.csrf_field())
                    input type="hidden" name="id" value=(token.id);
                    button.danger type="submit" aria-label={ "Revoke " (token.name) } { "Revoke" }
                }
            }
        }
    }
}

/// The create form's fields as a token request (`scopes` comes once per
/// box ticked).
fn token_request(form: &FormBody) -> Result<TokenRequest, ApiError> {
    let scopes = form
        .all("scopes")
        .map(|v| {
            Scope::parse(v).ok_or_else(|| ApiError::InvalidTokenRequest(format!("no scope {v:?}")))
        })
        .collect::<Result<_, _>>()?;
    let tables = form
        .get("tables")
        .unwrap_or_default()
        .split(',')
        .map(str::trim)
        .filter(|t| !t.is_empty())
        .map(|t| TablePattern::parse(t).map_err(ApiError::InvalidTokenRequest))
        .collect::<Result<_, _>>()?;
    let expires_at = form
        .get("expires")
        .filter(|d| !d.is_empty())
        .map(|d| {
            NaiveDate::parse_from_str(d, "%Y-%m-%d")
                .map(|day| day.and_time(chrono::NaiveTime::MIN).and_utc())
                .map_err(|_| ApiError::InvalidTokenRequest(format!("{d:?} is not a day")))
        })
        .transpose()?;
    TokenRequest {
        name: form.get("name").unwrap_or_default().to_string(),
        scopes,
        tables,
        expires_at,
    }
    .checked()
}

/// `POST /console/tokens`: `POST /tokens`, and the secret shown once.
pub async fn create(
    State(state): State<AppState>,
    signed: Signed,
    form: FormBody,
) -> PageResult<Response> {
    signed.check_form(&form)?;
    let created = issue(&state, &signed.caller, token_request(&form)?).await?;
    let done = Done::Created(Box::new(created));
    view(&state, &signed, &TokensQuery::default(), Some(done)).await
}

/// `POST /console/tokens/revoke`: `DELETE /tokens/{id}`.
pub async fn revoke(
    State(state): State<AppState>,
    signed: Signed,
    form: FormBody,
) -> PageResult<Response> {
    signed.check_form(&form)?;
    let id = parse_id(form.required("id")?, "token id")?;
    revoke_token(&state, &signed.caller, id).await?;
    view(
        &state,
        &signed,
        &TokensQuery::default(),
        Some(Done::Revoked(id)),
    )
    .await
}
