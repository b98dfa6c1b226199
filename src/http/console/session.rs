//! Console sessions: a token pasted once into the sign-in form becomes a
//! random session secret in an `HttpOnly`, `SameSite=Strict` cookie
//! (`Secure` when the request came over TLS through a proxy that says so).
//! The store keeps only digests: the session's, and the token's, from
//! which each request builds the same `Caller` a bearer token would give,
//! so a revoked token's session sees nothing more. Every form carries the
//! session's CSRF secret; a POST without it is refused. That secret is
//! derived from the session's (`CSRF_PURPOSE`), so the store keeps nothing
//! of it: a copy of the table gives no way to forge a form.

use axum::extract::{FromRequest, FromRequestParts, Request, State};
use axum::http::request::Parts;
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use cookie::{Cookie, SameSite};
use maud::{html, Markup};

use super::error::{PageError, PageResult};
use super::layout::ROOT;
use super::layout::{csrf_field, page, Viewer};
use super::same_origin::over_tls;
use super::signin_limit::{Attempt, ClientAddress, Limited};
use crate::access::{derived_secret, digests_equal, new_secret, secret_digest, Scope};
use crate::http::auth::caller_of_digest;
use crate::http::auth::Caller;
use crate::http::error::ApiError;
use crate::http::state::AppState;
use crate::names::TableName;
use crate::pipeline::BodyError;

const COOKIE: &str = "idem_console";
const CSRF_HEADER: &str = "x-csrf-token";
/// What the session's secret is hashed with to make its CSRF secret.
const CSRF_PURPOSE: &str = "idem console CSRF";
/// The longest token the sign-in form takes (a bootstrap token is at most
/// 256 characters).
const MAX_TOKEN_LEN: usize = 512;
/// The largest form a console page sends (idem reads bodies itself, with
/// no default limit: this is the console's).
const MAX_FORM_BYTES: u64 = 64 * 1024;
/// How long a form may take to arrive: a page's form is sent at once, so a
/// client that trickles one holds its connection no longer than this.
const FORM_DEADLINE: std::time::Duration = std::time::Duration::from_secs(30);

/// A form as sent (`application/x-www-form-urlencoded`), read within
/// `MAX_FORM_BYTES`: its fields in order, a name as often as it came.
pub struct FormBody(Vec<(String, String)>);

impl FormBody {
    /// The first value of `name`.
    pub fn get(&self, name: &str) -> Option<&str> {
        self.0
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }

    /// Every value of `name` (a box ticked several times).
    pub fn all<'a>(&'a self, name: &'a str) -> impl Iterator<Item = &'a str> + 'a {
        self.0
            .iter()
            .filter(move |(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }

    /// The value of a field the form must have.
    pub fn required(&self, name: &str) -> Result<&str, PageError> {
        self.get(name).ok_or_else(|| {
            ApiError::InvalidRequest(format!("the form has no field {name:?}")).into()
        })
    }
}

impl<S: Send + Sync> FromRequest<S> for FormBody {
    type Rejection = PageError;

    async fn from_request(request: Request, _state: &S) -> Result<Self, PageError> {
        let limit = usize::try_from(MAX_FORM_BYTES).unwrap_or(usize::MAX);
        let read = axum::body::to_bytes(request.into_body(), limit);
        let bytes = tokio::time::timeout(FORM_DEADLINE, read)
            .await
            .map_err(|_| BodyError::TimedOut("took longer than 30 s to arrive"))?
            .map_err(|_| BodyError::TooLarge {
                limit: MAX_FORM_BYTES,
            })?;
        let fields = serde_urlencoded::from_bytes(&bytes)
            .map_err(|e| ApiError::InvalidRequest(format!("the form cannot be read: {e}")))?;
        Ok(FormBody(fields))
    }
}

/// A signed-in request: who it acts as, and its session's CSRF secret.
pub struct Signed {
    pub caller: Caller,
    csrf: String,
    session_sha256: [u8; 32],
}

impl Signed {
    /// The hidden field every form of the session posts back.
    pub fn csrf_field(&self) -> Markup {
        csrf_field(&self.csrf)
    }

    /// The table a page's filter names (none when the field is empty),
    /// once the session may read it.
    pub fn readable_table(&self, text: &str) -> Result<Option<TableName>, PageError> {
        if text.is_empty() {
            return Ok(None);
        }
        let table = TableName::parse(text).map_err(ApiError::from)?;
        self.caller.require(Scope::Read, &table)?;
        Ok(Some(table))
    }

    /// The session as a page's navigation shows it.
    pub fn viewer(&self) -> Viewer<'_> {
        Viewer {
            name: &self.caller.actor.token_name,
            admin: self.caller.grants.is_admin(),
            csrf: &self.csrf,
        }
    }

    /// Refuses (403) a change whose form did not carry this session's CSRF
    /// secret (before any other field is looked at).
    pub fn check_form(&self, form: &FormBody) -> Result<(), PageError> {
        self.check_csrf(form.get("csrf"))
    }

    fn check_csrf(&self, sent: Option<&str>) -> Result<(), PageError> {
        let sent = sent.unwrap_or_default();
        if digests_equal(&secret_digest(sent), &secret_digest(&self.csrf)) {
            return Ok(());
        }
        Err(ApiError::Forbidden(
            "this form was not sent by a console page of your session (its CSRF token is missing or wrong); reload the page and try again"
                .into(),
        )
        .into())
    }
}

impl FromRequestParts<AppState> for Signed {
    type Rejection = PageError;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> PageResult<Self> {
        let secret = session_cookie(&parts.headers).ok_or(PageError::SignIn)?;
        let session_sha256 = secret_digest(&secret);
        let row = state.store.session(&session_sha256).await?;
        let row = row.ok_or(PageError::SignIn)?;
        // The token as it stands now: revoked or expired, the session is
        // over with it.
        let caller = match caller_of_digest(state, &row.token_sha256).await {
            Ok(caller) => caller,
            Err(ApiError::Unauthorized { .. }) => {
                state.store.end_session(&session_sha256).await?;
                return Err(PageError::SignIn);
            }
            Err(e) => return Err(e.into()),
        };
        Ok(Signed {
            caller,
            csrf: derived_secret(&secret, CSRF_PURPOSE),
            session_sha256,
        })
    }
}

/// The session secret of the request's cookie, if it sent one.
fn session_cookie(headers: &HeaderMap) -> Option<String> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|value| value.to_str().ok())
        .flat_map(Cookie::split_parse)
        .filter_map(Result::ok)
        .find(|cookie| cookie.name() == COOKIE)
        .map(|cookie| cookie.value().to_string())
}

fn session_cookie_header(value: String, max_age_secs: i64, secure: bool) -> HeaderValue {
    let cookie = Cookie::build((COOKIE, value))
        .path(ROOT)
        .http_only(true)
        .same_site(SameSite::Strict)
        .secure(secure)
        .max_age(cookie::time::Duration::seconds(max_age_secs))
        .build();
    HeaderValue::from_str(&cookie.to_string()).expect("a session cookie is a valid header value")
}

/// `GET /console`: the tables when signed in, else the sign-in form.
pub async fn start_page(state: State<AppState>, mut parts: Parts) -> Response {
    match Signed::from_request_parts(&mut parts, &state).await {
        Ok(_) => (
            StatusCode::SEE_OTHER,
            [(header::LOCATION, "/console/tables")],
        )
            .into_response(),
        Err(PageError::SignIn) => sign_in_page(StatusCode::OK, None),
        Err(e) => e.into_response(),
    }
}

fn sign_in_page(status: StatusCode, problem: Option<&str>) -> Response {
    let body = html! {
        p { "Paste an idem token to see what it may see. The token stays on the server; your browser keeps only a session cookie." }
        p.hint {
            "Started with " code { "scripts/serve" } " on your own machine? It keeps the admin token in "
            code { ".idem/admin-token" } " in the project's folder (and printed it when it started)."
        }
        @if let Some(problem) = problem {
            p.problem role="alert" { (problem) }
        }
        form.signin method="post" action="/console/session" {
            label for="token" { "Token" }
            input #token type="password" name="token" autocomplete="off" required autofocus;
            button type="submit" { "Sign in" }
        }
    };
    let mut response = page("Sign in", "", None, body);
    *response.status_mut() = status;
    response
}

/// `POST /console/session`: a token that idem accepts starts a session,
/// unless the sign-ins that failed from this address (or from all) are
/// too many (429, see `signin_limit`).
pub async fn sign_in(
    State(state): State<AppState>,
    address: ClientAddress,
    headers: HeaderMap,
    form: FormBody,
) -> PageResult {
    let attempt = match Attempt::start(&state, address).await? {
        Ok(attempt) => attempt,
        Err(limited) => return Ok(limited_page(&limited)),
    };
    let token_sha256 = match accepted_token(&state, form.get("token")).await {
        Ok(digest) => digest,
        Err(PageError::Api(ApiError::Unauthorized { detail, .. })) => {
            attempt.failed(&state);
            return Ok(sign_in_page(StatusCode::UNAUTHORIZED, Some(detail)));
        }
        Err(e) => {
            attempt.give_back(&state).await?;
            return Err(e);
        }
    };
    attempt.give_back(&state).await?;
    start_session(&state, &token_sha256, &headers).await
}

/// The digest of the token sent, once idem accepts it (`Unauthorized`
/// when it does not).
async fn accepted_token(state: &AppState, sent: Option<&str>) -> PageResult<[u8; 32]> {
    let token = sent.unwrap_or_default().trim();
    if token.is_empty() || token.len() > MAX_TOKEN_LEN {
        return Err(ApiError::Unauthorized {
            detail: "that is not an idem token",
            token_sent: true,
        }
        .into());
    }
    let token_sha256 = secret_digest(token);
    caller_of_digest(state, &token_sha256).await?;
    Ok(token_sha256)
}

/// The sign-in page refusing an attempt past the limit, with how long to
/// wait (also in `Retry-After`).
fn limited_page(limited: &Limited) -> Response {
    let whose = if limited.overall {
        "from all addresses together"
    } else {
        "from your address"
    };
    let wait = limited.retry_after.as_secs();
    let problem = format!(
        "Too many sign-ins with a wrong token {whose}: no token is tried for {wait} s. Try again after that."
    );
    let mut response = sign_in_page(StatusCode::TOO_MANY_REQUESTS, Some(&problem));
    response
        .headers_mut()
        .insert(header::RETRY_AFTER, HeaderValue::from(wait));
    response
}

/// A new session for the token: its cookie, and the way to the tables.
async fn start_session(
    state: &AppState,
    token_sha256: &[u8; 32],
    headers: &HeaderMap,
) -> PageResult {
    let secret = new_secret().map_err(|e| anyhow::anyhow!("no randomness for a session: {e}"))?;
    let ttl = i64::try_from(state.settings.console_session_secs)
        .map_err(|_| anyhow::anyhow!("the console session lifetime is out of range"))?;
    state
        .store
        .create_session(&secret_digest(&secret), token_sha256, ttl)
        .await?;
    let cookie = session_cookie_header(secret, ttl, over_tls(headers));
    Ok((
        StatusCode::SEE_OTHER,
        [
            (header::SET_COOKIE, cookie),
            (
                header::LOCATION,
                HeaderValue::from_static("/console/tables"),
            ),
        ],
    )
        .into_response())
}

/// `POST /console/session/end` (the sign-out button).
pub async fn sign_out_form(
    State(state): State<AppState>,
    signed: Signed,
    headers: HeaderMap,
    form: FormBody,
) -> PageResult {
    signed.check_form(&form)?;
    end(&state, &signed, &headers).await
}

/// `DELETE /console/session/end`, with the CSRF secret in `X-CSRF-Token`.
pub async fn sign_out(
    State(state): State<AppState>,
    signed: Signed,
    headers: HeaderMap,
) -> PageResult {
    let sent = headers.get(CSRF_HEADER).and_then(|v| v.to_str().ok());
    signed.check_csrf(sent)?;
    end(&state, &signed, &headers).await
}

/// Ends the session in the store (so its cookie opens nothing, whoever
/// holds it) and clears the cookie.
async fn end(state: &AppState, signed: &Signed, headers: &HeaderMap) -> PageResult {
    state.store.end_session(&signed.session_sha256).await?;
    let cleared = session_cookie_header(String::new(), 0, over_tls(headers));
    Ok((
        StatusCode::SEE_OTHER,
        [
            (header::SET_COOKIE, cleared),
            (header::LOCATION, HeaderValue::from_static(ROOT)),
        ],
    )
        .into_response())
}
