//! What operators and browsers see around the API: `/metrics`, request ids,
//! JSON answers ending with a newline, CORS, the `Host` allow-list.

use idem::config::{CommaList, Settings};
use reqwest::header::{HeaderMap, HeaderValue};
use reqwest::Response;
use serde_json::json;

use crate::helpers::*;
use crate::support::*;

/// `/metrics` open to the test's own (loopback) peer, as a scraper beside
/// idem would see it once it needs a token elsewhere.
fn scraped() -> Settings {
    Settings {
        metrics_open_to_local: true,
        ..Settings::default()
    }
}

async fn metrics(app: &TestApp) -> String {
    let r = app.get("/metrics").await;
    assert_eq!(r.status(), 200);
    let content_type = r.headers()["content-type"].to_str().unwrap().to_string();
    assert!(
        content_type.starts_with("text/plain; version=0.0.4"),
        "{content_type}"
    );
    r.text().await.unwrap()
}

/// The value of the sample `name{labels}` in a scrape, if there is one.
fn sample(text: &str, series: &str) -> Option<f64> {
    text.lines()
        .find_map(|line| line.strip_prefix(series)?.strip_prefix(' '))
        .map(|value| value.parse().unwrap())
}

#[tokio::test]
async fn metrics_count_a_puts_rows_by_table_and_its_request_by_route_and_status() {
    let app = spawn_app_with(scraped()).await;
    let rows = [json!({"id": 1}), json!({"id": 2}), json!({"id": 2})];
    app.declare(
        "metered",
        r#"{"columns": {"id": "bigint", "ds": "date"}, "primary_key": ["id"]}"#,
    )
    .await;
    let r = app
        .put_ndjson("/partitions/metered/2026-10-12", &rows)
        .await;
    assert_eq!(r.status(), 200);

    let text = metrics(&app).await;
    for (series, value) in [
        (r#"idem_rows_received_total{table="metered"}"#, 3.0),
        (r#"idem_rows_written_total{table="metered"}"#, 2.0),
        (r#"idem_rows_duplicates_total{table="metered"}"#, 1.0),
        (r#"idem_partition_swaps_total{table="metered"}"#, 1.0),
        (
            r#"idem_http_requests_total{method="PUT",route="/partitions/{table}/{ds}",status="200"}"#,
            1.0,
        ),
        (
            r#"idem_http_request_duration_seconds_count{method="PUT",route="/partitions/{table}/{ds}"}"#,
            1.0,
        ),
        ("idem_partition_swap_duration_seconds_count", 1.0),
    ] {
        assert_eq!(sample(&text, series), Some(value), "{series} in\n{text}");
    }
    let body_bytes = r#"idem_http_request_body_bytes_total{route="/partitions/{table}/{ds}"}"#;
    let sent = u32::try_from(ndjson(&rows).len()).unwrap();
    assert_eq!(sample(&text, body_bytes), Some(f64::from(sent)));
    for gauge in [
        "idem_db_pool_connections",
        "idem_db_pool_idle",
        "idem_db_pool_waiting",
        "idem_db_pool_max_connections",
    ] {
        assert!(sample(&text, gauge).is_some(), "{gauge} in\n{text}");
    }
}

#[tokio::test]
async fn metrics_count_replays_refused_rows_and_problems_by_code() {
    let app = spawn_app_with(scraped()).await;
    app.declare("replayed", ORDERS).await;
    let post = |body: String| {
        app.client
            .post(app.url("/rows?table=replayed"))
            .header("content-type", "application/x-ndjson")
            .header("idempotency-key", "metrics-1")
            .body(body)
            .send()
    };
    let rows = ndjson(&[order(1, "paid", "2026-10-12T08:00:00Z")]);
    assert_eq!(post(rows.clone()).await.unwrap().status(), 200);
    let replay = post(rows).await.unwrap();
    assert_eq!(replay.headers()["idempotent-replayed"], "true");
    let bad = ndjson(&[json!({"order_id": "x"}), json!({"order_id": 2})]);
    let r = app
        .put(
            "/partitions/replayed/2026-10-12",
            "application/x-ndjson",
            bad,
        )
        .await;
    assert_eq!(r.status(), 422);
    app.get("/nowhere/at/all").await;

    let text = metrics(&app).await;
    for (series, value) in [
        (r#"idem_idempotent_replays_total{table="replayed"}"#, 1.0),
        // The first POST's row and the refused PUT's two; not the replay's.
        (r#"idem_rows_received_total{table="replayed"}"#, 3.0),
        (r#"idem_rows_written_total{table="replayed"}"#, 1.0),
        (r#"idem_rows_rejected_total{table="replayed"}"#, 1.0),
        (
            r#"idem_http_problems_total{code="bad_rows",status="422"}"#,
            1.0,
        ),
        (
            r#"idem_http_problems_total{code="not_found",status="404"}"#,
            1.0,
        ),
        (
            r#"idem_http_requests_total{method="GET",route="unmatched",status="404"}"#,
            1.0,
        ),
    ] {
        assert_eq!(sample(&text, series), Some(value), "{series} in\n{text}");
    }
    assert!(!text.contains("/nowhere"), "a raw path became a label");
}

#[tokio::test]
async fn a_sent_request_id_is_echoed_and_one_is_made_when_absent_or_insane() {
    let app = spawn_app().await;
    let sent = app
        .client
        .get(app.url("/tables"))
        .header("x-request-id", "airflow-run-42/try-1")
        .send()
        .await
        .unwrap();
    assert_eq!(sent.headers()["x-request-id"], "airflow-run-42/try-1");

    let too_long = "x".repeat(201);
    for header in [None, Some("has a space"), Some(too_long.as_str())] {
        let mut request = app.client.get(app.url("/nowhere"));
        if let Some(value) = header {
            request = request.header("x-request-id", value);
        }
        let r = request.send().await.unwrap();
        assert_eq!(r.status(), 404, "problems carry one too");
        let made = r.headers()["x-request-id"].to_str().unwrap();
        let id = uuid::Uuid::parse_str(made).expect("a made id is a UUID");
        assert_eq!(id.get_version_num(), 7);
    }
}

/// The body, checked to end with one newline and to be as long as its
/// `Content-Length` says.
async fn text_ending_with_newline(r: Response) -> String {
    let length = r.content_length();
    let text = r.text().await.unwrap();
    assert!(text.ends_with('\n'), "{text:?} does not end with a newline");
    assert!(!text.ends_with("\n\n"), "{text:?} ends with two newlines");
    if let Some(length) = length {
        assert_eq!(usize::try_from(length).unwrap(), text.len());
    }
    text
}

#[tokio::test]
async fn every_json_answer_ends_with_a_newline() {
    let app = spawn_app().await;
    app.declare_orders().await;
    let rows = [order(1, "paid", "2026-10-12T08:00:00Z")];
    let receipt = app.put_ndjson("/partitions/orders/2026-10-12", &rows).await;
    assert_eq!(receipt.headers()["content-type"], "application/json");
    text_ending_with_newline(receipt).await;
    let keyed = || {
        app.client
            .post(app.url("/rows?table=orders"))
            .header("content-type", "application/x-ndjson")
            .header("idempotency-key", "newline")
            .body(ndjson(&rows))
            .send()
    };
    text_ending_with_newline(keyed().await.unwrap()).await;
    text_ending_with_newline(keyed().await.unwrap()).await;
    for path in [
        "/tables",
        "/tables/orders",
        "/partitions/orders",
        "/loads?table=orders",
        "/healthz",
        "/nowhere",
        "/partitions/orders/2026-10-12?format=json",
        "/partitions/orders/2026-10-12",
    ] {
        text_ending_with_newline(app.get(path).await).await;
    }
    let problem = app.client.patch(app.url("/tables")).send().await.unwrap();
    assert_eq!(
        problem.headers()["content-type"],
        "application/problem+json"
    );
    let text = text_ending_with_newline(problem).await;
    serde_json::from_str::<serde_json::Value>(&text).unwrap();
}

fn with_cors(origins: &[&str]) -> Settings {
    Settings {
        cors_origins: CommaList(origins.iter().map(|o| o.to_string()).collect()),
        ..Settings::default()
    }
}

async fn from_origin(app: &TestApp, origin: &str) -> HeaderMap {
    let r = app
        .client
        .get(app.url("/tables"))
        .header("origin", origin)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    r.headers().clone()
}

#[tokio::test]
async fn cors_answers_only_the_allowed_origins_and_is_off_by_default() {
    let app = spawn_app_with(with_cors(&["https://app.example.com"])).await;
    let allowed = from_origin(&app, "https://app.example.com").await;
    assert_eq!(
        allowed["access-control-allow-origin"],
        "https://app.example.com"
    );
    let exposed = allowed["access-control-expose-headers"].to_str().unwrap();
    for header in [
        "etag",
        "idempotent-replayed",
        "x-request-id",
        "idem-row-count",
    ] {
        assert!(exposed.contains(header), "{header} not in {exposed}");
    }
    let other = from_origin(&app, "https://evil.example.com").await;
    assert!(other.get("access-control-allow-origin").is_none());

    let default = spawn_app().await;
    let headers = from_origin(&default, "https://app.example.com").await;
    assert!(headers.get("access-control-allow-origin").is_none());
}

#[tokio::test]
async fn a_cors_preflight_allows_the_apis_methods_and_headers() {
    let app = spawn_app_with(with_cors(&["https://app.example.com"])).await;
    let r = app
        .client
        .request(
            reqwest::Method::OPTIONS,
            app.url("/partitions/orders/2026-10-12"),
        )
        .header("origin", "https://app.example.com")
        .header("access-control-request-method", "PUT")
        .header(
            "access-control-request-headers",
            "authorization, content-type, idempotency-key, if-match",
        )
        .send()
        .await
        .unwrap();
    assert!(r.status().is_success(), "{}", r.status());
    let headers = r.headers();
    assert_eq!(
        headers["access-control-allow-origin"],
        "https://app.example.com"
    );
    let methods = headers["access-control-allow-methods"].to_str().unwrap();
    assert!(
        methods.contains("PUT") && methods.contains("POST"),
        "{methods}"
    );
    let allowed = headers["access-control-allow-headers"].to_str().unwrap();
    for header in [
        "authorization",
        "content-type",
        "idempotency-key",
        "if-match",
    ] {
        assert!(allowed.contains(header), "{header} not in {allowed}");
    }
}

async fn with_host(app: &TestApp, path: &str, host: &str) -> Response {
    app.client
        .get(app.url(path))
        .header("host", HeaderValue::from_str(host).unwrap())
        .send()
        .await
        .unwrap()
}

#[tokio::test]
async fn a_host_outside_the_allow_list_is_refused_and_an_allowed_one_passes() {
    let app = spawn_app_with(Settings {
        allowed_hosts: CommaList(vec!["idem.internal".into()]),
        ..Settings::default()
    })
    .await;
    let foreign = with_host(&app, "/tables", "rebound.example.com").await;
    assert_eq!(foreign.status(), 421);
    assert_eq!(
        foreign.headers()["content-type"],
        "application/problem+json"
    );
    assert_eq!(json_body(foreign).await["code"], "host_not_allowed");
    let allowed = with_host(&app, "/tables", "idem.internal:8080").await;
    assert_eq!(allowed.status(), 200);
    // Probes address the server by whatever name or address they have.
    let probe = with_host(&app, "/healthz", "10.0.0.7:8080").await;
    assert_eq!(probe.status(), 200);

    let any = spawn_app().await;
    let r = with_host(&any, "/tables", "rebound.example.com").await;
    assert_eq!(r.status(), 200);
}
