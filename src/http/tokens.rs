//! `POST /tokens`, `GET /tokens`, `GET|DELETE /tokens/{id}`: bearer tokens,
//! managed by admins. A secret is answered once, when its token is made.

use axum::extract::{OriginalUri, State};
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use super::auth::Caller;
use super::extract::{parse_id, ApiPath, ApiQuery};
use super::paging::{page, page_limit};
use super::state::AppState;
use crate::access::{new_secret, secret_digest, Grants, Scope, TablePattern};
use crate::http::error::{ApiError, ApiResult};
use crate::ids::TokenId;
use crate::store::tokens::{NewToken, TokenInfo};

pub fn router() -> Router<AppState> {
    Router::new()
        .route("/tokens", get(list_tokens).post(create_token))
        .route("/tokens/{id}", get(get_token).delete(revoke_token))
}

const MAX_TOKEN_NAME: usize = 100;
pub const NAME_RULE: &str = "name must be 1 to 100 characters, none of them control characters";

/// Whether `name` can be a token's name (`NAME_RULE`).
pub fn valid_name(name: &str) -> bool {
    let len = name.chars().count();
    (1..=MAX_TOKEN_NAME).contains(&len) && !name.chars().any(char::is_control)
}
const MAX_PATTERNS: usize = 100;

/// The body of `POST /tokens`, also what the console's form makes.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TokenRequest {
    pub name: String,
    pub scopes: Vec<Scope>,
    #[serde(default = "every_table")]
    pub tables: Vec<TablePattern>,
    #[serde(default)]
    pub expires_at: Option<DateTime<Utc>>,
}

fn every_table() -> Vec<TablePattern> {
    vec![TablePattern::parse("*").expect("* is a pattern")]
}

impl TokenRequest {
    /// The request as JSON of the right shape, then its rules.
    fn parse(body: &[u8]) -> ApiResult<TokenRequest> {
        let request: TokenRequest = serde_json::from_slice(body)
            .map_err(|e| ApiError::InvalidTokenRequest(e.to_string()))?;
        request.checked()
    }

    /// The request, if it keeps the rules: a name of 1 to 100 characters,
    /// each scope once, 1 to 100 patterns, an expiry in the future.
    pub fn checked(mut self) -> ApiResult<TokenRequest> {
        let invalid = |detail: &str| Err(ApiError::InvalidTokenRequest(detail.into()));
        if !valid_name(&self.name) {
            return invalid(NAME_RULE);
        }
        let sent = self.scopes.len();
        self.scopes.sort();
        self.scopes.dedup();
        if self.scopes.is_empty() || self.scopes.len() != sent {
            return invalid("scopes must name read, write or admin, each at most once");
        }
        if self.tables.is_empty() || self.tables.len() > MAX_PATTERNS {
            return invalid("tables must hold 1 to 100 patterns");
        }
        if self.expires_at.is_some_and(|at| at <= Utc::now()) {
            return invalid("expires_at is in the past");
        }
        Ok(self)
    }
}

/// A token as made: its listing and, this once, its secret.
#[derive(Serialize)]
pub struct Created {
    #[serde(flatten)]
    pub info: TokenInfo,
    pub token: String,
}

async fn create_token(
    State(state): State<AppState>,
    caller: Caller,
    body: axum::body::Bytes,
) -> ApiResult<Response> {
    let created = issue(&state, &caller, TokenRequest::parse(&body)?).await?;
    let location = HeaderValue::from_str(&format!("/tokens/{}", created.info.id))
        .expect("a uuid is a valid header value");
    Ok((
        StatusCode::CREATED,
        [(header::LOCATION, location)],
        Json(created),
    )
        .into_response())
}

/// Makes a token (an admin's act) with a new secret, answered this once.
pub async fn issue(state: &AppState, caller: &Caller, request: TokenRequest) -> ApiResult<Created> {
    caller.require_admin()?;
    let secret = new_secret().map_err(|e| anyhow::anyhow!("no randomness for a secret: {e}"))?;
    let grants = Grants {
        scopes: request.scopes,
        tables: request.tables,
    };
    let info = state
        .store
        .create_token(NewToken {
            name: &request.name,
            secret_sha256: &secret_digest(&secret),
            grants: &grants,
            expires_at: request.expires_at,
        })
        .await?;
    tracing::info!(token_id = %info.id, name = %info.name, "token created");
    Ok(Created {
        info,
        token: secret,
    })
}

#[derive(Deserialize)]
struct ListQuery {
    limit: Option<i64>,
    /// The last token id of the previous page.
    cursor: Option<String>,
}

async fn list_tokens(
    State(state): State<AppState>,
    caller: Caller,
    OriginalUri(uri): OriginalUri,
    ApiQuery(query): ApiQuery<ListQuery>,
) -> ApiResult<Response> {
    caller.require_admin()?;
    let after = query
        .cursor
        .as_deref()
        .map(|t| parse_id(t, "token id"))
        .transpose()?;
    let limit = page_limit(query.limit)?;
    let tokens = state.store.tokens(after, limit).await?;
    Ok(page(&uri, tokens, limit, |t: &TokenInfo| t.id.to_string()))
}

async fn get_token(
    State(state): State<AppState>,
    caller: Caller,
    ApiPath(id): ApiPath<String>,
) -> ApiResult<Json<TokenInfo>> {
    caller.require_admin()?;
    let id = parse_id(&id, "token id")?;
    state
        .store
        .token(id)
        .await?
        .map(Json)
        .ok_or_else(|| ApiError::NotFound(format!("no token {id}")))
}

async fn revoke_token(
    State(state): State<AppState>,
    caller: Caller,
    ApiPath(id): ApiPath<String>,
) -> ApiResult<StatusCode> {
    revoke(&state, &caller, parse_id(&id, "token id")?).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// Revokes at once (an admin's act): every idem process reads the token on
/// every request.
pub async fn revoke(state: &AppState, caller: &Caller, id: TokenId) -> ApiResult<()> {
    caller.require_admin()?;
    if !state.store.revoke_token(id).await? {
        return Err(ApiError::NotFound(format!("no token {id}")));
    }
    // This process forgets it now; the others when the notice reaches them.
    state.tokens.forget(id);
    tracing::info!(token_id = %id, "token revoked");
    Ok(())
}
