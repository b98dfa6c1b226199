//! Who a request comes from: the connection's peer, or, when the peer is
//! one of `IDEM_TRUSTED_PROXIES`, the client that proxy names in
//! `Forwarded` (RFC 7239) or `X-Forwarded-For`. Behind a proxy every client
//! shares its address, so what is counted per client (requests in flight,
//! failed console sign-ins) and the access log use this one, and a request
//! in flight holds its client's share of `IDEM_MAX_CONNECTIONS_PER_CLIENT`
//! here, as a direct client's connection does when it is accepted.

use std::net::IpAddr;
use std::pin::Pin;
use std::task::{Context, Poll};

use axum::body::{Body, Bytes, HttpBody};
use axum::extract::{Request, State};
use axum::http::{header, HeaderMap};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use hyper::body::{Frame, SizeHint};

use super::client_requests::Held;
use super::error::ApiError;
use super::state::AppState;
use crate::config::TrustedProxies;

/// The request's client, in its extensions (set for every request served).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ClientAddr {
    pub ip: IpAddr,
    /// Named by a trusted proxy: the connection is the proxy's, shared by
    /// many clients, so the client's share is counted per request.
    pub forwarded: bool,
}

impl ClientAddr {
    /// The client of a request from `peer` with `headers`.
    pub fn of(peer: IpAddr, headers: &HeaderMap, proxies: &TrustedProxies) -> ClientAddr {
        let direct = ClientAddr {
            ip: peer,
            forwarded: false,
        };
        if !proxies.trusts(peer) {
            return direct;
        }
        match forwarded_client(headers, proxies) {
            Some(ip) => ClientAddr {
                ip,
                forwarded: true,
            },
            None => direct,
        }
    }

    /// The request's client; a request served without one (a router used
    /// alone, in a unit test) is taken as from an unknown address.
    pub fn of_request(request: &Request) -> Option<ClientAddr> {
        request.extensions().get::<ClientAddr>().copied()
    }
}

/// The hops a proxy chain reports, nearest last: the `for=` of each
/// `Forwarded` element, or else each `X-Forwarded-For` entry. The client is
/// the nearest hop that is not itself a trusted proxy; a hop that is no
/// address (`unknown`, an obfuscated name) ends the walk there, since what
/// stands before it was not vouched for by a trusted proxy.
fn forwarded_client(headers: &HeaderMap, proxies: &TrustedProxies) -> Option<IpAddr> {
    let hops = forwarded_hops(headers);
    let mut client = None;
    for hop in hops.iter().rev() {
        let Some(ip) = parse_hop(hop) else { break };
        client = Some(ip);
        if !proxies.trusts(ip) {
            break;
        }
    }
    client
}

/// Every hop named, in the order the headers give them.
fn forwarded_hops(headers: &HeaderMap) -> Vec<String> {
    let values = |name| {
        headers
            .get_all(name)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .flat_map(|v| v.split(','))
            .map(|hop| hop.trim().to_string())
            .collect::<Vec<_>>()
    };
    let standard: Vec<String> = values(header::FORWARDED)
        .into_iter()
        .filter_map(|element| {
            element.split(';').find_map(|pair| {
                let (name, value) = pair.split_once('=')?;
                name.trim()
                    .eq_ignore_ascii_case("for")
                    .then(|| value.trim().trim_matches('"').to_string())
            })
        })
        .collect();
    if !standard.is_empty() {
        return standard;
    }
    values(header::HeaderName::from_static("x-forwarded-for"))
}

/// An address as a hop names it: `192.0.2.1`, `192.0.2.1:4711`, `2001:db8::1`
/// or `[2001:db8::1]:4711`.
fn parse_hop(hop: &str) -> Option<IpAddr> {
    if let Ok(ip) = hop.parse::<IpAddr>() {
        return Some(ip.to_canonical());
    }
    if let Ok(socket) = hop.parse::<std::net::SocketAddr>() {
        return Some(socket.ip().to_canonical());
    }
    hop.strip_prefix('[')
        .and_then(|rest| rest.split_once(']'))
        .and_then(|(ip, _)| ip.parse::<IpAddr>().ok())
        .map(|ip| ip.to_canonical())
}

/// The middleware: a forwarded client past its share of requests in
/// flight gets 429 `too_many_connections`, as a direct client past its
/// share of connections does; the place is held until the answer's body
/// has gone out (a partition streamed to a slow client holds it).
pub async fn limit_forwarded(
    State(state): State<AppState>,
    request: Request,
    next: Next,
) -> Response {
    let Some(client) = ClientAddr::of_request(&request).filter(|c| c.forwarded) else {
        return next.run(request).await;
    };
    let Some(held) = state.client_requests.admit(client.ip) else {
        return ApiError::TooManyRequestsFromClient.into_response();
    };
    let response = next.run(request).await;
    response.map(|inner| Body::new(Holding { inner, _held: held }))
}

/// An answer's body that holds its request's place until it is dropped.
struct Holding {
    inner: Body,
    _held: Held,
}

impl HttpBody for Holding {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        Pin::new(&mut self.inner).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

/// Loopback, private (RFC 1918), IPv6 unique local (fc00::/7) or
/// link-local: addresses no client on the internet can have.
pub fn is_local(ip: IpAddr) -> bool {
    match ip.to_canonical() {
        IpAddr::V4(v4) => v4.is_loopback() || v4.is_private() || v4.is_link_local(),
        IpAddr::V6(v6) => v6.is_loopback() || v6.is_unique_local() || v6.is_unicast_link_local(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;

    fn proxies(text: &str) -> TrustedProxies {
        TrustedProxies::parse(text).unwrap()
    }

    fn headers(pairs: &[(&'static str, &'static str)]) -> HeaderMap {
        let mut headers = HeaderMap::new();
        for (name, value) in pairs {
            headers.append(*name, HeaderValue::from_static(value));
        }
        headers
    }

    fn client(peer: &str, pairs: &[(&'static str, &'static str)], trusted: &str) -> String {
        let c = ClientAddr::of(peer.parse().unwrap(), &headers(pairs), &proxies(trusted));
        format!("{}{}", c.ip, if c.forwarded { " (forwarded)" } else { "" })
    }

    #[test]
    fn a_forwarded_address_counts_only_from_a_trusted_proxy() {
        let xff = [("x-forwarded-for", "203.0.113.7")];
        assert_eq!(client("127.0.0.1", &xff, ""), "127.0.0.1");
        assert_eq!(client("192.0.2.9", &xff, "127.0.0.1/32"), "192.0.2.9");
        assert_eq!(
            client("127.0.0.1", &xff, "127.0.0.0/8"),
            "203.0.113.7 (forwarded)"
        );
        assert_eq!(
            client("::ffff:127.0.0.1", &xff, "127.0.0.1"),
            "203.0.113.7 (forwarded)"
        );
        assert_eq!(client("127.0.0.1", &[], "127.0.0.1"), "127.0.0.1");
    }

    #[test]
    fn the_client_is_the_nearest_hop_no_trusted_proxy_and_a_spoofed_start_is_ignored() {
        let chain = [("x-forwarded-for", "6.6.6.6, 203.0.113.7, 10.0.0.2")];
        assert_eq!(
            client("10.0.0.1", &chain, "10.0.0.0/8"),
            "203.0.113.7 (forwarded)"
        );
        let lines = [
            ("x-forwarded-for", "6.6.6.6"),
            ("x-forwarded-for", "203.0.113.7"),
        ];
        assert_eq!(
            client("10.0.0.1", &lines, "10.0.0.0/8"),
            "203.0.113.7 (forwarded)"
        );
        let all_proxies = [("x-forwarded-for", "10.0.0.3, 10.0.0.2")];
        assert_eq!(
            client("10.0.0.1", &all_proxies, "10.0.0.0/8"),
            "10.0.0.3 (forwarded)"
        );
        let unknown = [("x-forwarded-for", "203.0.113.7, unknown")];
        assert_eq!(client("10.0.0.1", &unknown, "10.0.0.0/8"), "10.0.0.1");
    }

    #[test]
    fn forwarded_is_read_before_x_forwarded_for_with_ports_and_brackets() {
        let both = [
            (
                "forwarded",
                "for=192.0.2.60;proto=https, for=\"[2001:db8::17]:4711\"",
            ),
            ("x-forwarded-for", "6.6.6.6"),
        ];
        assert_eq!(
            client("10.0.0.1", &both, "10.0.0.0/8"),
            "2001:db8::17 (forwarded)"
        );
        let port = [("x-forwarded-for", "198.51.100.4:5000")];
        assert_eq!(
            client("10.0.0.1", &port, "10.0.0.0/8"),
            "198.51.100.4 (forwarded)"
        );
    }

    #[test]
    fn local_addresses_are_loopback_private_and_link_local_ones() {
        for local in [
            "127.0.0.1",
            "10.1.2.3",
            "172.16.0.1",
            "192.168.1.1",
            "169.254.0.1",
            "::1",
            "fd00::1",
            "fe80::1",
            "::ffff:10.0.0.1",
        ] {
            assert!(is_local(local.parse().unwrap()), "{local}");
        }
        for public in ["8.8.8.8", "172.32.0.1", "2001:db8::1", "::ffff:8.8.8.8"] {
            assert!(!is_local(public.parse().unwrap()), "{public}");
        }
    }
}
