//! `POST /tokens`, `GET /tokens`, `GET|DELETE /tokens/{id}`: bearer tokens,
//! managed by admins. A secret is answered once, when its token is made.

use axum::extract::{OriginalUri, State};
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use super::{page, page_limit, parse_id, ApiPath, ApiQuery, AppState, Caller};
use crate::access::{new_secret, secret_digest, Grants, Scope, TablePattern};
use crate::http::error::{ApiError, ApiResult};
use crate::store::tokens::{NewToken, TokenInfo};

pub fn router() -> Router<AppState> {
    Router::new()
        .route("/tokens", get(list_tokens).post(create_token))
        .route("/tokens/{id}", get(get_token).delete(revoke_token))
}

const MAX_TOKEN_NAME: usize = 100;
const MAX_PATTERNS: usize = 100;

/// The body of `POST /tokens`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct TokenRequest {
    name: String,
    scopes: Vec<Scope>,
    #[serde(default = "every_table")]
    tables: Vec<TablePattern>,
    #[serde(default)]
    expires_at: Option<DateTime<Utc>>,
}

fn every_table() -> Vec<TablePattern> {
    vec![TablePattern::parse("*").expect("* is a pattern")]
}

impl TokenRequest {
    /// The request as JSON of the right shape, then its rules.
    fn parse(body: &[u8]) -> ApiResult<TokenRequest> {
        let mut request: TokenRequest = serde_json::from_slice(body)
            .map_err(|e| ApiError::InvalidTokenRequest(e.to_string()))?;
        let invalid = |detail: &str| Err(ApiError::InvalidTokenRequest(detail.into()));
        let name_len = request.name.chars().count();
        if name_len == 0 || name_len > MAX_TOKEN_NAME || request.name.chars().any(char::is_control)
        {
            return invalid("name must be 1 to 100 characters, none of them control characters");
        }
        let sent = request.scopes.len();
        request.scopes.sort();
        request.scopes.dedup();
        if request.scopes.is_empty() || request.scopes.len() != sent {
            return invalid("scopes must name read, write or admin, each at most once");
        }
        if request.tables.is_empty() || request.tables.len() > MAX_PATTERNS {
            return invalid("tables must hold 1 to 100 patterns");
        }
        if request.expires_at.is_some_and(|at| at <= Utc::now()) {
            return invalid("expires_at is in the past");
        }
        Ok(request)
    }
}

/// A token as made: its listing and, this once, its secret.
#[derive(Serialize)]
struct Created {
    #[serde(flatten)]
    info: TokenInfo,
    token: String,
}

async fn create_token(
    State(state): State<AppState>,
    caller: Caller,
    body: axum::body::Bytes,
) -> ApiResult<Response> {
    caller.require_admin()?;
    let request = TokenRequest::parse(&body)?;
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
    let location = HeaderValue::from_str(&format!("/tokens/{}", info.id))
        .expect("a uuid is a valid header value");
    let created = Created {
        info,
        token: secret,
    };
    Ok((
        StatusCode::CREATED,
        [(header::LOCATION, location)],
        Json(created),
    )
        .into_response())
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

/// Revokes at once: every idem process reads the token on every request.
async fn revoke_token(
    State(state): State<AppState>,
    caller: Caller,
    ApiPath(id): ApiPath<String>,
) -> ApiResult<StatusCode> {
    caller.require_admin()?;
    let id = parse_id(&id, "token id")?;
    if !state.store.revoke_token(id).await? {
        return Err(ApiError::NotFound(format!("no token {id}")));
    }
    // This process forgets it now; the others when the notice reaches them.
    state.tokens.forget(id);
    tracing::info!(token_id = %id, "token revoked");
    Ok(StatusCode::NO_CONTENT)
}
