//! Changes only from the console's own pages: a request that changes
//! something (a POST, the sign-out's DELETE) sent by another site's page
//! is refused with a 403 page before any handler runs. The session cookie
//! is `SameSite=Strict`, so such a request carries no session; but the
//! sign-in needs none, and another site could sign a browser in to a
//! session of the attacker's token (login CSRF), whose pages the person
//! would then take for their own.
//!
//! A browser says where a request comes from, in headers no page can set:
//! `Sec-Fetch-Site` (Chromium, Firefox, Safari 16.4 and later), which
//! decides when sent; else `Origin`, which must be the console's own. The
//! console's pages say `Referrer-Policy: no-referrer`, under which a
//! browser sends their form's `Origin` as `null`: `Sec-Fetch-Site` is then
//! what tells it from another site's (an older browser, sending only
//! `null`, is refused). A request with neither comes from no page (curl, a
//! script) and is let through: the CSRF secret of the session's forms
//! still guards what a session may do. (Go's `CrossOriginProtection`
//! decides the same way.)

use axum::extract::Request;
use axum::http::{header, HeaderMap, Method, Uri};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use super::error::PageError;
use crate::http::error::ApiError;

/// Refuses (403) a change sent by a page that is not the console's own.
pub async fn refuse_other_sites(request: Request, next: Next) -> Response {
    let safe = matches!(*request.method(), Method::GET | Method::HEAD);
    if safe || sent_by_own_page(request.uri(), request.headers()) {
        return next.run(request).await;
    }
    PageError::from(ApiError::Forbidden(
        "this request was sent by another site's page, not by the console's own; nothing was changed"
            .into(),
    ))
    .into_response()
}

/// Whether nothing says the request came from another site's page.
fn sent_by_own_page(uri: &Uri, headers: &HeaderMap) -> bool {
    let text = |name| headers.get(name).map(|v| v.to_str().unwrap_or(""));
    // `same-site` is another origin too (a sibling host); `none` is a
    // person's own doing (a bookmark, the address bar).
    if let Some(site) = text("sec-fetch-site") {
        return matches!(site, "same-origin" | "none");
    }
    match text(header::ORIGIN.as_str()) {
        None => true,
        Some(origin) => own_origin(uri, headers).is_some_and(|own| same_origin(origin, &own)),
    }
}

/// Whether the request reached a proxy over TLS (which then tells idem):
/// the cookie is then `Secure`, and the console's origin `https`.
pub fn over_tls(headers: &HeaderMap) -> bool {
    let forwarded_proto = headers
        .get("x-forwarded-proto")
        .and_then(|v| v.to_str().ok())
        .is_some_and(|proto| proto.eq_ignore_ascii_case("https"));
    let forwarded = headers
        .get(header::FORWARDED)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|value| value.to_ascii_lowercase().contains("proto=https"));
    forwarded_proto || forwarded
}

/// The console's origin as the browser saw it: the scheme it was reached
/// over, and the host a proxy says it was asked for (`X-Forwarded-Host`,
/// `Forwarded: host=`), else the request's own (its authority, or `Host`).
/// A page cannot set these headers on a request to another site, so
/// trusting them lets nothing through.
fn own_origin(uri: &Uri, headers: &HeaderMap) -> Option<String> {
    let text = |name| headers.get(name).and_then(|v| v.to_str().ok());
    let forwarded_host = text("x-forwarded-host")
        .and_then(|hosts| hosts.split(',').next())
        .or_else(|| text(header::FORWARDED.as_str()).and_then(forwarded_host));
    let host = forwarded_host
        .or_else(|| uri.authority().map(|a| a.as_str()))
        .or_else(|| text(header::HOST.as_str()))?;
    let scheme = if over_tls(headers) { "https" } else { "http" };
    Some(format!("{scheme}://{}", host.trim()))
}

/// The `host=` of a `Forwarded` header's first element.
fn forwarded_host(value: &str) -> Option<&str> {
    let first = value.split(',').next()?;
    first.split(';').find_map(|pair| {
        let (name, host) = pair.trim().split_once('=')?;
        name.eq_ignore_ascii_case("host")
            .then(|| host.trim_matches('"'))
    })
}

/// Whether two origins are one: names compared without case, a default
/// port (80 for http, 443 for https) the same as none.
fn same_origin(a: &str, b: &str) -> bool {
    let plain = |origin: &str| {
        let origin = origin.trim().to_ascii_lowercase();
        let bare = origin
            .strip_suffix(":80")
            .filter(|_| origin.starts_with("http://"))
            .or_else(|| {
                origin
                    .strip_suffix(":443")
                    .filter(|_| origin.starts_with("https://"))
            })
            .map(str::to_string);
        bare.unwrap_or(origin)
    };
    plain(a) == plain(b)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (name, value) in pairs {
            map.insert(*name, value.parse().unwrap());
        }
        map
    }

    fn from_own_page(pairs: &[(&'static str, &str)]) -> bool {
        sent_by_own_page(&Uri::from_static("/console/session"), &headers(pairs))
    }

    #[test]
    fn only_the_consoles_own_origin_or_none_at_all_is_let_through() {
        let host = ("host", "idem.example.com");
        assert!(from_own_page(&[host]));
        assert!(from_own_page(&[
            host,
            ("origin", "http://idem.example.com")
        ]));
        assert!(from_own_page(&[
            host,
            ("origin", "http://IDEM.example.com:80")
        ]));
        assert!(!from_own_page(&[host, ("origin", "https://evil.example")]));
        assert!(!from_own_page(&[host, ("origin", "null")]));
        assert!(!from_own_page(&[
            host,
            ("origin", "https://idem.example.com")
        ]));
        assert!(!from_own_page(&[host, ("sec-fetch-site", "cross-site")]));
        assert!(!from_own_page(&[host, ("sec-fetch-site", "same-site")]));
        assert!(from_own_page(&[host, ("sec-fetch-site", "same-origin")]));
        // The console's own form, under its `Referrer-Policy: no-referrer`.
        let own_form = [host, ("sec-fetch-site", "same-origin"), ("origin", "null")];
        assert!(from_own_page(&own_form));
        let sandboxed = [host, ("sec-fetch-site", "cross-site"), ("origin", "null")];
        assert!(!from_own_page(&sandboxed));
    }

    #[test]
    fn behind_a_tls_proxy_the_origin_is_the_one_the_proxy_was_asked_for() {
        let tls = ("x-forwarded-proto", "https");
        let origin = ("origin", "https://idem.example.com");
        assert!(from_own_page(&[("host", "idem.example.com"), tls, origin]));
        assert!(from_own_page(&[
            ("host", "127.0.0.1:8080"),
            ("x-forwarded-host", "idem.example.com"),
            tls,
            origin
        ]));
        assert!(from_own_page(&[
            ("host", "127.0.0.1:8080"),
            (
                "forwarded",
                "for=192.0.2.1;host=\"idem.example.com\";proto=https"
            ),
            origin
        ]));
        assert!(!from_own_page(&[
            ("host", "idem.example.com"),
            ("origin", "http://idem.example.com"),
            tls
        ]));
    }
}
