//! Signing in to the console over plain HTTP: the limit on failed
//! sign-ins (counted in Postgres, so shared by every idem process), the
//! refusal of requests sent by another site's page (login CSRF among them),
//! and what the store keeps of a session.

use std::net::IpAddr;

use idem::config::Settings;

use crate::console_pages::sign_in;
use crate::helpers::*;
use crate::support::*;

const WRONG: &str = "idem_nobody-was-given-this-token-00000000000";

/// A client that follows no redirect, its connections made from `from`
/// (any address of 127.0.0.0/8 is this machine's).
fn client_from(from: &str) -> reqwest::Client {
    reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .local_address(from.parse::<IpAddr>().unwrap())
        .build()
        .unwrap()
}

/// `POST /console/session` with `token` from `client`: the status, the
/// `Retry-After` if any, and whether a cookie was set.
async fn sign_in_with(
    app: &TestApp,
    client: &reqwest::Client,
    token: &str,
) -> (u16, Option<u64>, bool) {
    let r = client
        .post(app.url("/console/session"))
        .form(&[("token", token)])
        .send()
        .await
        .unwrap();
    let retry_after = r
        .headers()
        .get("retry-after")
        .map(|v| v.to_str().unwrap().parse().unwrap());
    let cookie = r.headers().contains_key("set-cookie");
    (r.status().as_u16(), retry_after, cookie)
}

fn limits(per_address: u32, overall: u32, window_secs: u64) -> Settings {
    Settings {
        console_signin_failures_per_address: per_address,
        console_signin_failures_overall: overall,
        console_signin_window_secs: window_secs,
        ..Settings::default()
    }
}

/// The value of the metric line that starts with `series` in `/metrics`.
async fn metric(app: &TestApp, series: &str) -> Option<u64> {
    let text = app.get("/metrics").await.text().await.unwrap();
    text.lines()
        .find_map(|line| line.strip_prefix(series)?.trim().parse().ok())
}

#[tokio::test]
async fn wrong_tokens_past_the_limit_lock_the_address_out_even_for_the_right_token_in_every_process(
) {
    let app = spawn_app_with(limits(3, 100, 60)).await;
    let here = client_from("127.0.0.1");
    for _ in 0..3 {
        assert_eq!(sign_in_with(&app, &here, WRONG).await.0, 401);
    }
    let (status, retry_after, _) = sign_in_with(&app, &here, WRONG).await;
    assert_eq!(status, 429);
    assert!(
        retry_after.is_some_and(|s| (1..=60).contains(&s)),
        "{retry_after:?}"
    );
    let r = here
        .post(app.url("/console/session"))
        .form(&[("token", ADMIN_TOKEN)])
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 429, "the right token is refused too");
    assert!(r.headers().contains_key("retry-after"));
    assert!(!r.headers().contains_key("set-cookie"));
    let page = r.text().await.unwrap();
    assert!(
        page.contains("Too many sign-ins with a wrong token from your address"),
        "{page}"
    );
    // Another idem process serving the same database counts the same.
    let other = spawn_app_on(app.options.clone(), limits(3, 100, 60)).await;
    assert_eq!(sign_in_with(&other, &here, ADMIN_TOKEN).await.0, 429);
    // Another address is not locked out.
    let there = client_from("127.0.0.2");
    let (status, _, cookie) = sign_in_with(&app, &there, ADMIN_TOKEN).await;
    assert_eq!((status, cookie), (303, true));
    assert_eq!(
        metric(&app, "idem_console_signin_failures_total").await,
        Some(3)
    );
    assert_eq!(
        metric(
            &app,
            r#"idem_console_signin_limited_total{limit="address"}"#
        )
        .await,
        Some(2)
    );
}

#[tokio::test]
async fn guesses_sent_at_once_get_no_more_tries_than_the_limit() {
    let app = spawn_app_with(limits(5, 100, 60)).await;
    let here = client_from("127.0.0.1");
    let attempts = (0..30).map(|_| sign_in_with(&app, &here, WRONG));
    let statuses: Vec<u16> = futures::future::join_all(attempts)
        .await
        .into_iter()
        .map(|(status, _, _)| status)
        .collect();
    let tried = statuses.iter().filter(|&&s| s == 401).count();
    let limited = statuses.iter().filter(|&&s| s == 429).count();
    assert_eq!((tried, limited), (5, 25), "{statuses:?}");
}

#[tokio::test]
async fn failures_from_many_addresses_lock_out_every_address_but_sign_ins_that_succeed_count_none()
{
    let app = spawn_app_with(limits(2, 3, 60)).await;
    let first = client_from("127.0.0.1");
    for _ in 0..5 {
        assert_eq!(sign_in_with(&app, &first, ADMIN_TOKEN).await.0, 303);
    }
    for (from, failures) in [("127.0.0.2", 2), ("127.0.0.3", 1)] {
        let client = client_from(from);
        for _ in 0..failures {
            assert_eq!(sign_in_with(&app, &client, WRONG).await.0, 401);
        }
    }
    let (status, retry_after, cookie) = sign_in_with(&app, &first, ADMIN_TOKEN).await;
    assert_eq!((status, cookie), (429, false));
    assert!(retry_after.is_some());
    let r = first
        .post(app.url("/console/session"))
        .form(&[("token", ADMIN_TOKEN)])
        .send()
        .await
        .unwrap();
    assert!(r
        .text()
        .await
        .unwrap()
        .contains("from all addresses together"));
    assert_eq!(
        metric(
            &app,
            r#"idem_console_signin_limited_total{limit="overall"}"#
        )
        .await,
        Some(2)
    );
}

#[tokio::test]
async fn an_address_signs_in_again_once_its_window_is_over_and_its_count_is_swept() {
    let app = spawn_app_with(limits(1, 100, 1)).await;
    let here = client_from("127.0.0.1");
    assert_eq!(sign_in_with(&app, &here, WRONG).await.0, 401);
    let (status, retry_after, _) = sign_in_with(&app, &here, ADMIN_TOKEN).await;
    assert_eq!((status, retry_after), (429, Some(1)));
    tokio::time::sleep(std::time::Duration::from_millis(1100)).await;
    // The next sign-in, from anywhere, deletes the counts whose window is over.
    let there = client_from("127.0.0.2");
    assert_eq!(sign_in_with(&app, &there, ADMIN_TOKEN).await.0, 303);
    let rows: Vec<String> =
        sqlx::query_scalar("select client from idem.console_signin_failures order by client")
            .fetch_all(&app.db)
            .await
            .unwrap();
    assert_eq!(rows, ["*", "127.0.0.2"], "127.0.0.1's count is gone");
    assert_eq!(sign_in_with(&app, &here, ADMIN_TOKEN).await.0, 303);
}

#[tokio::test]
async fn a_sign_in_sent_by_another_sites_page_is_refused_and_starts_no_session() {
    let app = spawn_app().await;
    let plain = client_from("127.0.0.1");
    let own = app.base.clone();
    let tls_own = own.replace("http://", "https://");
    let sign_in_from = |headers: &'static [(&'static str, &'static str)], origin: Option<&str>| {
        let mut request = plain
            .post(app.url("/console/session"))
            .form(&[("token", ADMIN_TOKEN)]);
        for (name, value) in headers {
            request = request.header(*name, *value);
        }
        if let Some(origin) = origin {
            request = request.header("origin", origin);
        }
        request.send()
    };
    for (headers, origin) in [
        (&[][..], Some("https://evil.example")),
        (&[][..], Some("null")),
        (&[("sec-fetch-site", "cross-site")][..], None),
        (&[("x-forwarded-proto", "https")][..], Some(own.as_str())),
    ] {
        let r = sign_in_from(headers, origin).await.unwrap();
        assert_eq!(r.status(), 403, "{headers:?} {origin:?}");
        assert!(!r.headers().contains_key("set-cookie"));
        let page = r.text().await.unwrap();
        assert!(page.contains("sent by another site"), "{page}");
    }
    let sessions = || async {
        sqlx::query_scalar::<_, i64>("select count(*) from idem.console_sessions")
            .fetch_one(&app.db)
            .await
            .unwrap()
    };
    assert_eq!(sessions().await, 0);
    // The console's own page, behind a TLS proxy or not, and curl (no
    // Origin) sign in.
    for (headers, origin) in [
        (&[("sec-fetch-site", "same-origin")][..], Some(own.as_str())),
        (
            &[("x-forwarded-proto", "https")][..],
            Some(tls_own.as_str()),
        ),
        (&[][..], None),
    ] {
        let r = sign_in_from(headers, origin).await.unwrap();
        assert_eq!(r.status(), 303, "{headers:?} {origin:?}");
    }
    assert_eq!(sessions().await, 3);
}

#[tokio::test]
async fn a_change_or_a_sign_out_sent_by_another_sites_page_is_refused_and_changes_nothing() {
    let app = spawn_app().await;
    let (id, secret) = make_token(
        &app.client,
        &app.base,
        &serde_json::json!({"name": "loader", "scopes": ["write"], "tables": ["*"]}),
    )
    .await;
    let console = sign_in(&app, ADMIN_TOKEN).await;
    let csrf = console.csrf(&app).await;
    let r = console
        .client
        .post(app.url("/console/tokens/revoke"))
        .header("origin", "https://evil.example")
        .form(&[("id", id.as_str()), ("csrf", csrf.as_str())])
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 403);
    let r = console
        .client
        .delete(app.url("/console/session/end"))
        .header("sec-fetch-site", "cross-site")
        .header("x-csrf-token", &csrf)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 403);
    let loader = client_with_token(&secret);
    let r = loader.get(app.url("/tables")).send().await.unwrap();
    assert_eq!(r.status(), 200, "the token is not revoked");
    assert_eq!(
        console.page(&app, "/console/tables").await.0,
        200,
        "still signed in"
    );
    // From the console's own page, the same revoke works.
    let r = console
        .client
        .post(app.url("/console/tokens/revoke"))
        .header("origin", &app.base)
        .form(&[("id", id.as_str()), ("csrf", csrf.as_str())])
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let r = loader.get(app.url("/tables")).send().await.unwrap();
    assert_eq!(r.status(), 401);
}

#[tokio::test]
async fn the_store_keeps_nothing_of_a_sessions_csrf_secret_and_each_session_has_its_own() {
    let app = spawn_app().await;
    let one = sign_in(&app, ADMIN_TOKEN).await;
    let other = sign_in(&app, ADMIN_TOKEN).await;
    let csrf = one.csrf(&app).await;
    assert_eq!(
        csrf,
        one.csrf(&app).await,
        "one secret for all of a session's pages"
    );
    assert_ne!(csrf, other.csrf(&app).await);
    let columns: Vec<String> = sqlx::query_scalar(
        "select column_name::text from information_schema.columns
          where table_schema = 'idem' and table_name = 'console_sessions'
          order by ordinal_position",
    )
    .fetch_all(&app.db)
    .await
    .unwrap();
    assert_eq!(
        columns,
        ["session_sha256", "token_sha256", "created_at", "expires_at"]
    );
    let kept: i64 = sqlx::query_scalar(
        "select count(*) from idem.console_sessions s
          where position($1 in s::text) > 0
             or position(convert_to($1, 'utf8') in s.session_sha256) > 0",
    )
    .bind(&csrf)
    .fetch_one(&app.db)
    .await
    .unwrap();
    assert_eq!(kept, 0);
}

#[tokio::test]
async fn behind_a_trusted_proxy_the_limit_counts_each_forwarded_client_apart() {
    let app = spawn_app_with(Settings {
        trusted_proxies: idem::config::TrustedProxies::parse("127.0.0.1").unwrap(),
        ..limits(2, 100, 60)
    })
    .await;
    let proxy = client_from("127.0.0.1");
    let forwarded = |client: &str, token: &str| {
        proxy
            .post(app.url("/console/session"))
            .header("x-forwarded-for", client)
            .form(&[("token", token.to_string())])
            .send()
    };
    for _ in 0..2 {
        assert_eq!(forwarded("203.0.113.7", WRONG).await.unwrap().status(), 401);
    }
    let locked = forwarded("203.0.113.7", ADMIN_TOKEN).await.unwrap();
    assert_eq!(locked.status(), 429, "the guessing client is locked out");
    let other = forwarded("198.51.100.9", ADMIN_TOKEN).await.unwrap();
    assert_eq!(
        other.status(),
        303,
        "another client behind the proxy signs in"
    );
    let rows: Vec<String> = sqlx::query_scalar(
        "select client from idem.console_signin_failures where failures > 0 order by client",
    )
    .fetch_all(&app.db)
    .await
    .unwrap();
    assert_eq!(
        rows,
        ["*", "203.0.113.7"],
        "counted by the forwarded address"
    );
}
