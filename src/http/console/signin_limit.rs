//! The limit on failed sign-ins, so that tokens cannot be guessed at the
//! console's speed: `IDEM_CONSOLE_SIGNIN_FAILURES_PER_ADDRESS` a client
//! address and `IDEM_CONSOLE_SIGNIN_FAILURES_OVERALL` in all, within
//! `IDEM_CONSOLE_SIGNIN_WINDOW_SECS` of a window's first failure. Past
//! either, every sign-in (the right token's too: otherwise guessing would
//! go on, only slower to find out) is refused until the window ends. The
//! counts live in Postgres (`store::console_signin`), shared by every idem
//! process serving the database.

use std::convert::Infallible;
use std::net::IpAddr;
use std::time::Duration;

use axum::extract::FromRequestParts;
use axum::http::request::Parts;

use crate::http::client_addr::ClientAddr;
use crate::http::state::AppState;
use crate::store::console_signin::{SigninLimits, SigninTurn};
use crate::store::StoreResult;

/// The address a sign-in came from, as the per-address connection cap
/// counts it; `None` when the request came over no TCP connection.
pub struct ClientAddress(Option<IpAddr>);

impl<S: Send + Sync> FromRequestParts<S> for ClientAddress {
    type Rejection = Infallible;

    async fn from_request_parts(parts: &mut Parts, _state: &S) -> Result<Self, Infallible> {
        Ok(ClientAddress(client_address(parts)))
    }
}

/// The client's address: the connection's peer, or the client a trusted
/// proxy forwarded (see `http::client_addr`).
fn client_address(parts: &Parts) -> Option<IpAddr> {
    parts.extensions.get::<ClientAddr>().map(|client| client.ip)
}

/// The name an address is counted under: an IPv4 address as it is, an
/// IPv6 address by its /64 (one host or site is usually handed a whole
/// /64, and would otherwise have countless addresses to guess from).
fn limit_key(address: Option<IpAddr>) -> String {
    match address.map(|a| a.to_canonical()) {
        Some(IpAddr::V4(v4)) => v4.to_string(),
        Some(IpAddr::V6(v6)) => {
            let [a, b, c, d, ..] = v6.segments();
            format!("{a:x}:{b:x}:{c:x}:{d:x}::/64")
        }
        None => "unknown".into(),
    }
}

/// A sign-in attempt let through: counted as a failure until it gives its
/// turn back.
pub struct Attempt {
    key: String,
}

/// A sign-in refused by the limit.
pub struct Limited {
    pub retry_after: Duration,
    /// All addresses together failed too often, not this one alone.
    pub overall: bool,
}

impl Attempt {
    /// Takes a turn for `address`, or says why there is none (counted in
    /// `/metrics`).
    pub async fn start(
        state: &AppState,
        ClientAddress(address): ClientAddress,
    ) -> StoreResult<Result<Attempt, Limited>> {
        let key = limit_key(address);
        let settings = &state.settings;
        let limits = SigninLimits {
            per_address: settings.console_signin_failures_per_address,
            overall: settings.console_signin_failures_overall,
            window: Duration::from_secs(settings.console_signin_window_secs),
        };
        let (retry_after, overall) = match state.store.take_signin_turn(&key, limits).await? {
            SigninTurn::Taken => return Ok(Ok(Attempt { key })),
            SigninTurn::AddressLimited { retry_after } => (retry_after, false),
            SigninTurn::OverallLimited { retry_after } => (retry_after, true),
        };
        let limit = if overall { "overall" } else { "address" };
        state.metrics.signin_limited(limit);
        Ok(Err(Limited {
            retry_after,
            overall,
        }))
    }

    /// The token was refused: the turn stays counted as a failure.
    pub fn failed(self, state: &AppState) {
        state.metrics.signin_failed();
    }

    /// The attempt was no failure (it signed in, or idem itself failed).
    pub async fn give_back(self, state: &AppState) -> StoreResult<()> {
        state.store.give_back_signin_turn(&self.key).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_ipv6_client_is_counted_by_its_64_and_a_mapped_ipv4_one_as_ipv4() {
        let key = |text: &str| limit_key(Some(text.parse().unwrap()));
        assert_eq!(key("192.0.2.7"), "192.0.2.7");
        assert_eq!(key("::ffff:192.0.2.7"), "192.0.2.7");
        assert_eq!(key("2001:db8:1:2:aaaa::1"), "2001:db8:1:2::/64");
        assert_eq!(key("2001:db8:1:2:bbbb::9"), "2001:db8:1:2::/64");
        assert_eq!(limit_key(None), "unknown");
    }
}
