//! The console's page shell: the document, its navigation and sign-out,
//! the stylesheet (vendored in `assets/`, embedded in the binary), and the
//! headers every console answer carries.

use std::time::Instant;

use axum::extract::Request;
use axum::http::{header, HeaderValue};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use maud::{html, Markup, DOCTYPE};

/// The path every console page is under.
pub const ROOT: &str = "/console";

/// Nothing runs but what idem serves itself: no script at all, styles only
/// from the stylesheet, forms only to idem, no framing.
const CONTENT_SECURITY_POLICY: &str = "default-src 'none'; style-src 'self'; img-src 'self'; \
     form-action 'self'; frame-ancestors 'none'; base-uri 'none'";

const STYLESHEET: &str = include_str!("../../../assets/console.css");

/// The sections of the navigation: path, name, and whether only an admin
/// sees it.
const SECTIONS: [(&str, &str, bool); 5] = [
    ("/console/tables", "Tables", false),
    ("/console/loads", "Loads", false),
    ("/console/rejects", "Rejects", false),
    ("/console/duplicates", "Duplicates", false),
    ("/console/tokens", "Tokens", true),
];

/// Who a page is for, as its navigation shows it.
pub struct Viewer<'a> {
    /// The token's name.
    pub name: &'a str,
    pub admin: bool,
    /// The session's CSRF secret, for the sign-out form.
    pub csrf: &'a str,
}

/// The hidden field every form of a session posts back.
pub fn csrf_field(csrf: &str) -> Markup {
    html! { input type="hidden" name="csrf" value=(csrf); }
}

/// A whole page: `title`, the navigation for `viewer` (none on the
/// sign-in page) with the section at `section` (a path in `SECTIONS`)
/// marked current, and `body`.
pub fn page(title: &str, section: &str, viewer: Option<Viewer<'_>>, body: Markup) -> Response {
    let html = html! {
        (DOCTYPE)
        html lang="en" {
            head {
                meta charset="utf-8";
                meta name="viewport" content="width=device-width, initial-scale=1";
                title { (title) " · idem" }
                link rel="stylesheet" href="/console/assets/console.css";
            }
            body {
                a.skip href="#main" { "Skip to content" }
                @if let Some(viewer) = &viewer { (navigation(viewer, section)) }
                main #main {
                    h1 { (title) }
                    (body)
                }
            }
        }
    };
    html.into_response()
}

fn navigation(viewer: &Viewer<'_>, section: &str) -> Markup {
    let admin = viewer.admin;
    html! {
        header.top {
            nav aria-label="Sections" {
                span.brand { "idem" }
                ul {
                    @for (path, name, admin_only) in SECTIONS {
                        @if admin || !admin_only {
                            li {
                                @if path == section {
                                    a href=(path) aria-current="page" { (name) }
                                } @else {
                                    a href=(path) { (name) }
                                }
                            }
                        }
                    }
                }
            }
            form.signout method="post" action="/console/session/end" {
                span.who { "Signed in as " strong { (viewer.name) } }
                (csrf_field(viewer.csrf))
                button type="submit" { "Sign out" }
            }
        }
    }
}

/// A failure as a page.
pub fn error_page(status: u16, title: &str, detail: &str) -> Markup {
    html! {
        (DOCTYPE)
        html lang="en" {
            head {
                meta charset="utf-8";
                title { (status) " " (title) " · idem" }
                link rel="stylesheet" href="/console/assets/console.css";
            }
            body {
                main #main {
                    h1 { (status) " " (title) }
                    p.problem role="alert" { (detail) }
                    p { a href="/console" { "Back to the console" } }
                }
            }
        }
    }
}

pub async fn stylesheet() -> Response {
    (
        [
            (header::CONTENT_TYPE, "text/css; charset=utf-8"),
            (header::CACHE_CONTROL, "public, max-age=3600"),
        ],
        STYLESHEET,
    )
        .into_response()
}

/// The headers of every console answer: its policy, no sniffing, no
/// referrer, no framing, pages (which show data) never cached, and the
/// server's time on it (`Server-Timing: app;dur=MS`, which a browser's
/// tools and `bench/console.sh` read).
pub async fn secure_headers(request: Request, next: Next) -> Response {
    let started = Instant::now();
    let mut response = next.run(request).await;
    let millis = started.elapsed().as_secs_f64() * 1000.0;
    let headers = response.headers_mut();
    if let Ok(timing) = HeaderValue::from_str(&format!("app;dur={millis:.1}")) {
        headers.insert("server-timing", timing);
    }
    let fixed = [
        (header::CONTENT_SECURITY_POLICY, CONTENT_SECURITY_POLICY),
        (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
        (header::REFERRER_POLICY, "no-referrer"),
        (header::X_FRAME_OPTIONS, "DENY"),
    ];
    for (name, value) in fixed {
        headers.insert(name, HeaderValue::from_static(value));
    }
    if !headers.contains_key(header::CACHE_CONTROL) {
        headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    }
    response
}
