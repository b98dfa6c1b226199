//! Bearer tokens at the edge: every request but the open ones names a
//! token, which this layer turns into a `Caller` before any handler runs.
//! Handlers then ask the caller for the scope and table they touch.

use axum::extract::{FromRequestParts, Request, State};
use axum::http::request::Parts;
use axum::http::{header, HeaderMap};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use super::client_addr::{is_local, ClientAddr};
use super::observe::RequestSpan;
use super::state::AppState;
use crate::access::{digests_equal, secret_digest, Actor, Grants, Scope};
use crate::http::error::{ApiError, ApiResult};
use crate::ids::Principal;
use crate::names::TableName;
use crate::store::tokens::TokenLookup;

/// What anyone may call: probes and the spec.
const OPEN_PATHS: [&str; 3] = ["/healthz", "/readyz", "/openapi.yaml"];

/// The path roots whose routes check their own credentials (the console's
/// pages: a session cookie, not a bearer token), let through untouched.
/// Whoever wires the routes (`app`) passes them in, so that this layer
/// knows no page of the console's (which itself asks it for callers).
#[derive(Clone, Debug, Default)]
pub struct OwnChecks(pub Vec<&'static str>);

impl OwnChecks {
    /// Whether `path` is one of the roots or below one.
    fn cover(&self, path: &str) -> bool {
        self.0.iter().any(|root| {
            path.strip_prefix(root)
                .is_some_and(|rest| rest.is_empty() || rest.starts_with('/'))
        })
    }
}

/// The metrics' path (`ops` serves it), which a local scraper may reach
/// without a token (`IDEM_METRICS_OPEN_TO_LOCAL`).
pub const METRICS_PATH: &str = "/metrics";

/// Who is calling, and what they may do.
#[derive(Clone, Debug)]
pub struct Caller {
    /// Who the ledger says made a load, and what its Idempotency-Keys are
    /// scoped by (`actor.principal`).
    pub actor: Actor,
    pub grants: Grants,
}

impl Caller {
    /// Open mode: one anonymous principal that may do everything.
    fn anonymous() -> Caller {
        Caller {
            actor: Actor {
                principal: Principal::Anonymous,
                token_name: "anonymous".into(),
            },
            grants: Grants::all(),
        }
    }

    /// A scraper let in by `local_scrape`: it may do nothing but scrape.
    fn local_scraper() -> Caller {
        Caller {
            actor: Actor {
                principal: Principal::LocalScraper,
                token_name: "local-scraper".into(),
            },
            grants: Grants {
                scopes: Vec::new(),
                tables: Vec::new(),
            },
        }
    }

    /// Whether this is the tokenless local scraper.
    pub fn is_local_scraper(&self) -> bool {
        self.actor.principal == Principal::LocalScraper
    }

    fn bootstrap_admin() -> Caller {
        Caller {
            actor: Actor {
                principal: Principal::Admin,
                token_name: "admin".into(),
            },
            grants: Grants::all(),
        }
    }

    /// Refuses (403) unless the caller holds `scope` on `table`.
    pub fn require(&self, scope: Scope, table: &TableName) -> ApiResult<()> {
        if self.grants.allows(scope, table) {
            return Ok(());
        }
        Err(ApiError::Forbidden(format!(
            "token {:?} does not grant {scope} on table {table:?}",
            self.actor.token_name
        )))
    }

    /// Refuses (403) unless the caller is an admin.
    pub fn require_admin(&self) -> ApiResult<()> {
        if self.grants.is_admin() {
            return Ok(());
        }
        Err(ApiError::Forbidden(format!(
            "token {:?} does not grant admin",
            self.actor.token_name
        )))
    }
}

/// Authenticates the request, or answers 401 without running the handler.
pub async fn authenticate(
    State((state, own_checks)): State<(AppState, OwnChecks)>,
    mut request: Request,
    next: Next,
) -> Response {
    let path = request.uri().path();
    if OPEN_PATHS.contains(&path) || own_checks.cover(path) {
        // The console's pages check their own session (a cookie, not a
        // bearer token): see `console::session`.
        return next.run(request).await;
    }
    let caller = if local_scrape(&state, &request) {
        Ok(Caller::local_scraper())
    } else {
        caller_of(&state, request.headers()).await
    };
    match caller {
        Ok(caller) => {
            if let Some(span) = request.extensions().get::<RequestSpan>() {
                span.record("token", caller.actor.token_name.clone());
            }
            request.extensions_mut().insert(caller);
            next.run(request).await
        }
        Err(e) => e.into_response(),
    }
}

/// A tokenless `GET /metrics` from loopback or a private network, with
/// `IDEM_METRICS_OPEN_TO_LOCAL`: let in, with no grants.
fn local_scrape(state: &AppState, request: &Request) -> bool {
    // The client, not the peer: behind a local proxy every peer is local.
    let client = ClientAddr::of_request(request);
    state.settings.metrics_open_to_local
        && request.uri().path() == METRICS_PATH
        && !request.headers().contains_key(header::AUTHORIZATION)
        && client.is_some_and(|client| is_local(client.ip))
}

async fn caller_of(state: &AppState, headers: &HeaderMap) -> ApiResult<Caller> {
    if state.settings.insecure_no_auth {
        return Ok(Caller::anonymous());
    }
    caller_of_digest(state, &secret_digest(bearer_token(headers)?)).await
}

/// The caller whose token's secret hashes to `digest` (the bearer token's,
/// or the one a console session signed in with), as that token stands now.
pub async fn caller_of_digest(state: &AppState, digest: &[u8; 32]) -> ApiResult<Caller> {
    if state.settings.insecure_no_auth {
        return Ok(Caller::anonymous());
    }
    let digest = *digest;
    if let Some(admin) = &state.admin_digest {
        if digests_equal(&digest, admin) {
            return Ok(Caller::bootstrap_admin());
        }
    }
    let refused = |detail| ApiError::Unauthorized {
        detail,
        token_sent: true,
    };
    match state.tokens.lookup(&state.store, &digest).await? {
        TokenLookup::Valid { token, .. } => Ok(Caller {
            grants: token.grants(),
            actor: Actor {
                principal: Principal::Token(token.id),
                token_name: token.name,
            },
        }),
        TokenLookup::Revoked => Err(refused("the bearer token was revoked")),
        TokenLookup::Expired => Err(refused("the bearer token has expired")),
        TokenLookup::Unknown => Err(refused("the bearer token is not known")),
    }
}

/// The token of `Authorization: Bearer <token>` (the scheme in any case).
fn bearer_token(headers: &HeaderMap) -> ApiResult<&str> {
    let missing = ApiError::Unauthorized {
        detail: "this endpoint needs an Authorization: Bearer <token> header",
        token_sent: false,
    };
    let mut values = headers.get_all(header::AUTHORIZATION).iter();
    let value = values.next().ok_or(missing)?;
    if values.next().is_some() {
        return Err(ApiError::InvalidAuthorization(
            "send one Authorization header, not several",
        ));
    }
    let text = value.to_str().ok();
    let token = text
        .and_then(|t| t.split_once(' '))
        .filter(|(scheme, _)| scheme.eq_ignore_ascii_case("bearer"))
        .map(|(_, token)| token.trim())
        .filter(|token| !token.is_empty());
    token.ok_or(ApiError::Unauthorized {
        detail: "the Authorization header must be Bearer <token>",
        token_sent: false,
    })
}

impl<S: Send + Sync> FromRequestParts<S> for Caller {
    type Rejection = ApiError;

    /// The caller `authenticate` found; a route outside that layer has none.
    async fn from_request_parts(parts: &mut Parts, _state: &S) -> Result<Self, Self::Rejection> {
        parts
            .extensions
            .get::<Caller>()
            .cloned()
            .ok_or(ApiError::Unauthorized {
                detail: "this endpoint needs an Authorization: Bearer <token> header",
                token_sent: false,
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn own_checks_cover_only_the_paths_under_their_roots() {
        let console = OwnChecks(vec!["/console"]);
        assert!(console.cover("/console"));
        assert!(console.cover("/console/tables"));
        assert!(!console.cover("/consoles"));
        assert!(!console.cover("/tables"));
        assert!(!OwnChecks::default().cover("/console"));
    }
}
