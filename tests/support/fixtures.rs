//! The data and clients every suite starts from: the bootstrap admin token,
//! the `orders` and `events` tables, their rows, NDJSON and gzip bodies, and
//! HTTP clients that send a token.

use std::io::Write as _;
use std::time::Duration;

use serde_json::{json, Value};

/// The bootstrap admin token every test server and idem process starts with.
pub const ADMIN_TOKEN: &str = "test-admin-token-0123456789abcdef-0123456789";

/// The longest any client request of `client()` may take; a request still
/// unanswered then is a hang, and a finding.
pub const CLIENT_DEADLINE: Duration = Duration::from_secs(30);

pub const ORDERS: &str = r#"{"columns": {"order_id": "bigint", "ds": "date", "customer_id": "bigint",
  "status": "text", "amount": "numeric", "updated_at": "timestamptz", "note": "text"},
  "partition_by": "ds", "primary_key": ["order_id"], "cursor": "updated_at"}"#;

/// A table without a key: every row a write sends is a row of its own, so a
/// batch written twice would show as twice its rows.
pub const EVENTS: &str = r#"{"columns": {"batch": "text", "n": "bigint", "ds": "date",
  "payload": "text"}, "partition_by": "ds"}"#;

/// One orders row of 2026-10-12.
pub fn order(id: i64, status: &str, updated_at: &str) -> Value {
    json!({"order_id": id, "ds": "2026-10-12", "customer_id": 7, "status": status,
           "amount": "10.50", "updated_at": updated_at, "note": null})
}

/// One orders row as an NDJSON line.
pub fn order_line(id: i64, ds: &str, status: &str) -> String {
    format!(
        "{{\"order_id\":{id},\"ds\":\"{ds}\",\"customer_id\":{},\"status\":\"{status}\",\"amount\":\"{}.{:02}\",\"updated_at\":\"{ds}T01:02:03Z\",\"note\":\"row {id} of {status}\"}}\n",
        id % 97,
        id % 1000,
        id % 100
    )
}

/// One events row as an NDJSON line.
pub fn event_line(batch: &str, n: i64, ds: &str) -> String {
    format!("{{\"batch\":\"{batch}\",\"n\":{n},\"ds\":\"{ds}\",\"payload\":\"{batch}/{n}\"}}\n")
}

pub fn ndjson(rows: &[Value]) -> String {
    rows.iter().map(|r| format!("{r}\n")).collect()
}

pub fn gzip(data: &[u8]) -> Vec<u8> {
    gzip_at(data, flate2::Compression::default())
}

/// `data` gzipped at `level`.
pub fn gzip_at(data: &[u8], level: flate2::Compression) -> Vec<u8> {
    let mut enc = flate2::write::GzEncoder::new(Vec::new(), level);
    enc.write_all(data).unwrap();
    enc.finish().unwrap()
}

/// A client that sends `token` with every request.
pub fn client_with_token(token: &str) -> reqwest::Client {
    token_client_builder(token).build().expect("an HTTP client")
}

/// An admin client for 127.0.0.1 only (no proxy), with a deadline on every
/// request.
pub fn client() -> reqwest::Client {
    token_client_builder(ADMIN_TOKEN)
        .no_proxy()
        .timeout(CLIENT_DEADLINE)
        .connect_timeout(Duration::from_secs(5))
        .build()
        .expect("an HTTP client")
}

fn token_client_builder(token: &str) -> reqwest::ClientBuilder {
    let mut headers = reqwest::header::HeaderMap::new();
    let bearer = format!("Bearer {token}").parse().expect("a header value");
    headers.insert(reqwest::header::AUTHORIZATION, bearer);
    reqwest::Client::builder().default_headers(headers)
}

/// `POST /tokens` at `base` with `client` (the admin's); the new token's id
/// and secret.
pub async fn make_token(client: &reqwest::Client, base: &str, request: &Value) -> (String, String) {
    let r = client
        .post(format!("{base}/tokens"))
        .json(request)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 201, "{}", r.text().await.unwrap());
    let location = r.headers()["location"].to_str().unwrap().to_string();
    let made: Value = r.json().await.unwrap();
    let id = made["id"].as_str().unwrap().to_string();
    assert_eq!(location, format!("/tokens/{id}"));
    (id, made["token"].as_str().unwrap().to_string())
}
