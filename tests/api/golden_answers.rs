//! The answers of accepted writes, byte for byte: a PUT's, a POST's and a
//! rejects replay's receipt, written and replayed, with and without a
//! rejects link, and the answer each keyed write stores in
//! `idem.idempotency_keys`. Only the load's id (random) is masked.

use reqwest::Response;
use serde_json::{json, Value};

use crate::helpers::*;
use crate::support::*;

const EVENTS: &str = QUARANTINED_EVENTS;

/// The answer's status, `ETag`, `Idempotent-Replayed` and body text, with
/// its load id masked.
async fn answer(r: Response) -> String {
    let status = r.status().as_u16();
    let header = |name: &str| {
        r.headers()
            .get(name)
            .map(|v| v.to_str().unwrap().to_string())
    };
    let (etag, replayed) = (header("etag"), header("idempotent-replayed"));
    let text = r.text().await.unwrap();
    let body: Value = serde_json::from_str(&text).unwrap();
    let masked = match body["load_id"].as_str() {
        Some(id) => text.replace(id, "LOAD"),
        None => text,
    };
    format!("{status} etag={etag:?} replayed={replayed:?}\n{masked}")
}

/// What the key's row stores, its load id masked.
async fn stored(app: &TestApp, key: &str) -> String {
    let (fingerprint, status, body, etag, load_id): (
        String,
        i32,
        String,
        Option<String>,
        Option<uuid::Uuid>,
    ) = sqlx::query_as(
        "select fingerprint, response_status, response_body::text, response_etag, load_id
               from idem.idempotency_keys where key = $1",
    )
    .bind(key)
    .fetch_one(&app.db)
    .await
    .unwrap();
    let masked = match load_id {
        Some(id) => body.replace(&id.to_string(), "LOAD"),
        None => body,
    };
    format!("{fingerprint} {status} etag={etag:?}\n{masked}")
}

async fn put_keyed(app: &TestApp, path: &str, key: &str, rows: &[Value]) -> Response {
    app.send_keyed(reqwest::Method::PUT, path, key, rows).await
}

async fn replay_rejects(app: &TestApp, key: &str) -> Response {
    app.client
        .post(app.url("/rejects/replay?table=events"))
        .header("idempotency-key", key)
        .send()
        .await
        .unwrap()
}

fn events() -> Vec<Value> {
    vec![
        json!({"id": 1, "ds": "2026-10-12", "qty": 1}),
        json!({"id": 2, "ds": "2026-10-12", "qty": 2, "colour": "red"}),
        json!({"id": 3, "ds": "2026-10-12", "qty": "many"}),
    ]
}

#[tokio::test]
async fn a_put_answers_and_stores_the_same_bytes_as_before() {
    let app = spawn_app().await;
    app.declare_orders().await;
    let rows = [order(1, "paid", "2026-10-12T01:00:00Z")];
    let path = "/partitions/orders/2026-10-12";
    let written = answer(put_keyed(&app, path, "put-1", &rows).await).await;
    assert_eq!(written, "200 etag=Some(\"\\\"1cd90c3a7371cf12ee6dfa6e24d58faf3765e383f21b3b6eb1e3403a00a5f789\\\"\") replayed=Some(\"false\")\n{\"changed\":true,\"content_sha256\":\"1cd90c3a7371cf12ee6dfa6e24d58faf3765e383f21b3b6eb1e3403a00a5f789\",\"ds\":\"2026-10-12\",\"duplicates\":0,\"load_id\":\"LOAD\",\"mode\":\"replace\",\"rejected\":0,\"replayed\":false,\"row_count\":1,\"rows_received\":1,\"rows_written\":1,\"table\":\"orders\"}\n");
    assert_eq!(stored(&app, "put-1").await, "194cbdbd1788cb5ebb0cef95d502313f27a44771ad3aae1fef357810a982649d 200 etag=Some(\"1cd90c3a7371cf12ee6dfa6e24d58faf3765e383f21b3b6eb1e3403a00a5f789\")\n{\"ds\": \"2026-10-12\", \"mode\": \"replace\", \"table\": \"orders\", \"changed\": true, \"load_id\": \"LOAD\", \"rejected\": 0, \"replayed\": false, \"row_count\": 1, \"duplicates\": 0, \"rows_written\": 1, \"rows_received\": 1, \"content_sha256\": \"1cd90c3a7371cf12ee6dfa6e24d58faf3765e383f21b3b6eb1e3403a00a5f789\"}");
    let replayed = answer(put_keyed(&app, path, "put-1", &rows).await).await;
    assert_eq!(replayed, "200 etag=Some(\"\\\"1cd90c3a7371cf12ee6dfa6e24d58faf3765e383f21b3b6eb1e3403a00a5f789\\\"\") replayed=Some(\"true\")\n{\"changed\":true,\"content_sha256\":\"1cd90c3a7371cf12ee6dfa6e24d58faf3765e383f21b3b6eb1e3403a00a5f789\",\"ds\":\"2026-10-12\",\"duplicates\":0,\"load_id\":\"LOAD\",\"mode\":\"replace\",\"rejected\":0,\"replayed\":true,\"row_count\":1,\"rows_received\":1,\"rows_written\":1,\"table\":\"orders\"}\n");
    let unkeyed = answer(app.put_ndjson(path, &rows).await).await;
    assert_eq!(unkeyed, "200 etag=Some(\"\\\"1cd90c3a7371cf12ee6dfa6e24d58faf3765e383f21b3b6eb1e3403a00a5f789\\\"\") replayed=None\n{\"load_id\":\"LOAD\",\"table\":\"orders\",\"ds\":\"2026-10-12\",\"mode\":\"replace\",\"rows_received\":1,\"rows_written\":0,\"duplicates\":0,\"rejected\":0,\"row_count\":1,\"content_sha256\":\"1cd90c3a7371cf12ee6dfa6e24d58faf3765e383f21b3b6eb1e3403a00a5f789\",\"changed\":false,\"replayed\":false}\n");
}

#[tokio::test]
async fn a_put_with_rejects_links_them() {
    let app = spawn_app().await;
    assert_eq!(app.declare("events", EVENTS).await.status(), 201);
    let path = "/partitions/events/2026-10-12";
    let written = answer(put_keyed(&app, path, "put-r", &events()).await).await;
    assert_eq!(written, "200 etag=Some(\"\\\"a9d204abf16a0918541699ec31b474fb5978cffb0fc993f3f9f6b9f0bbc32697\\\"\") replayed=Some(\"false\")\n{\"changed\":true,\"content_sha256\":\"a9d204abf16a0918541699ec31b474fb5978cffb0fc993f3f9f6b9f0bbc32697\",\"ds\":\"2026-10-12\",\"duplicates\":0,\"load_id\":\"LOAD\",\"mode\":\"replace\",\"rejected\":2,\"rejects\":\"/rejects?table=events&load_id=LOAD\",\"replayed\":false,\"row_count\":1,\"rows_received\":3,\"rows_written\":1,\"table\":\"events\"}\n");
    assert_eq!(stored(&app, "put-r").await, "03f89cba99a2c464ef4f0a6ec308fc61dc3665814e687219d61419fdd2c8bb9f 200 etag=Some(\"a9d204abf16a0918541699ec31b474fb5978cffb0fc993f3f9f6b9f0bbc32697\")\n{\"ds\": \"2026-10-12\", \"mode\": \"replace\", \"table\": \"events\", \"changed\": true, \"load_id\": \"LOAD\", \"rejects\": \"/rejects?table=events&load_id=LOAD\", \"rejected\": 2, \"replayed\": false, \"row_count\": 1, \"duplicates\": 0, \"rows_written\": 1, \"rows_received\": 3, \"content_sha256\": \"a9d204abf16a0918541699ec31b474fb5978cffb0fc993f3f9f6b9f0bbc32697\"}");
    let replayed = answer(put_keyed(&app, path, "put-r", &events()).await).await;
    assert_eq!(replayed, "200 etag=Some(\"\\\"a9d204abf16a0918541699ec31b474fb5978cffb0fc993f3f9f6b9f0bbc32697\\\"\") replayed=Some(\"true\")\n{\"changed\":true,\"content_sha256\":\"a9d204abf16a0918541699ec31b474fb5978cffb0fc993f3f9f6b9f0bbc32697\",\"ds\":\"2026-10-12\",\"duplicates\":0,\"load_id\":\"LOAD\",\"mode\":\"replace\",\"rejected\":2,\"rejects\":\"/rejects?table=events&load_id=LOAD\",\"replayed\":true,\"row_count\":1,\"rows_received\":3,\"rows_written\":1,\"table\":\"events\"}\n");
}

#[tokio::test]
async fn a_post_answers_and_stores_the_same_bytes_as_before() {
    let app = spawn_app().await;
    app.declare_orders().await;
    let rows = [
        order(1, "paid", "2026-10-12T01:00:00Z"),
        order(2, "paid", "2026-10-13T01:00:00Z"),
    ];
    let written = answer(app.post_rows("table=orders", Some("post-1"), &rows).await).await;
    assert_eq!(written, "200 etag=None replayed=Some(\"false\")\n{\"already_present\":0,\"changed\":true,\"conflicts\":0,\"deleted\":0,\"ds\":\"2026-10-12\",\"duplicates\":0,\"inserted\":2,\"load_id\":\"LOAD\",\"mode\":\"merge\",\"partitions\":[{\"ds\":\"2026-10-12\",\"row_delta\":2}],\"rejected\":0,\"replayed\":false,\"rows_received\":2,\"rows_written\":2,\"table\":\"orders\",\"unchanged\":0,\"updated\":0}\n");
    assert_eq!(stored(&app, "post-1").await, "e0d48f2b7f90283ab069d1c97e90643e06e5c66393f0f4cf44883881cb6ebdff 200 etag=None\n{\"ds\": \"2026-10-12\", \"mode\": \"merge\", \"table\": \"orders\", \"changed\": true, \"deleted\": 0, \"load_id\": \"LOAD\", \"updated\": 0, \"inserted\": 2, \"rejected\": 0, \"replayed\": false, \"conflicts\": 0, \"unchanged\": 0, \"duplicates\": 0, \"partitions\": [{\"ds\": \"2026-10-12\", \"row_delta\": 2}], \"rows_written\": 2, \"rows_received\": 2, \"already_present\": 0}");
    let replayed = answer(app.post_rows("table=orders", Some("post-1"), &rows).await).await;
    assert_eq!(replayed, "200 etag=None replayed=Some(\"true\")\n{\"already_present\":0,\"changed\":true,\"conflicts\":0,\"deleted\":0,\"ds\":\"2026-10-12\",\"duplicates\":0,\"inserted\":2,\"load_id\":\"LOAD\",\"mode\":\"merge\",\"partitions\":[{\"ds\":\"2026-10-12\",\"row_delta\":2}],\"rejected\":0,\"replayed\":true,\"rows_received\":2,\"rows_written\":2,\"table\":\"orders\",\"unchanged\":0,\"updated\":0}\n");
}

#[tokio::test]
async fn a_post_with_rejects_links_them_and_their_replay_answers_as_before() {
    let app = spawn_app().await;
    assert_eq!(app.declare("events", EVENTS).await.status(), 201);
    let written = answer(
        app.post_rows("table=events", Some("post-r"), &events())
            .await,
    )
    .await;
    assert_eq!(written, "200 etag=None replayed=Some(\"false\")\n{\"already_present\":0,\"changed\":true,\"conflicts\":0,\"deleted\":0,\"ds\":\"2026-10-12\",\"duplicates\":0,\"inserted\":1,\"load_id\":\"LOAD\",\"mode\":\"merge\",\"partitions\":[{\"ds\":\"2026-10-12\",\"row_delta\":1}],\"rejected\":2,\"rejects\":\"/rejects?table=events&load_id=LOAD\",\"replayed\":false,\"rows_received\":3,\"rows_written\":1,\"table\":\"events\",\"unchanged\":0,\"updated\":0}\n");
    assert_eq!(stored(&app, "post-r").await, "7f9376c713d587a637ba2621b4fd42ff0d908f19b68273459c61a3fc0255fe5e 200 etag=None\n{\"ds\": \"2026-10-12\", \"mode\": \"merge\", \"table\": \"events\", \"changed\": true, \"deleted\": 0, \"load_id\": \"LOAD\", \"rejects\": \"/rejects?table=events&load_id=LOAD\", \"updated\": 0, \"inserted\": 1, \"rejected\": 2, \"replayed\": false, \"conflicts\": 0, \"unchanged\": 0, \"duplicates\": 0, \"partitions\": [{\"ds\": \"2026-10-12\", \"row_delta\": 1}], \"rows_written\": 1, \"rows_received\": 3, \"already_present\": 0}");
    let replayed = answer(
        app.post_rows("table=events", Some("post-r"), &events())
            .await,
    )
    .await;
    assert_eq!(replayed, "200 etag=None replayed=Some(\"true\")\n{\"already_present\":0,\"changed\":true,\"conflicts\":0,\"deleted\":0,\"ds\":\"2026-10-12\",\"duplicates\":0,\"inserted\":1,\"load_id\":\"LOAD\",\"mode\":\"merge\",\"partitions\":[{\"ds\":\"2026-10-12\",\"row_delta\":1}],\"rejected\":2,\"rejects\":\"/rejects?table=events&load_id=LOAD\",\"replayed\":true,\"rows_received\":3,\"rows_written\":1,\"table\":\"events\",\"unchanged\":0,\"updated\":0}\n");

    let fixed = EVENTS.replace(r#""bad_rows""#, r#""schema": "evolve", "bad_rows""#);
    assert_eq!(app.declare("events", &fixed).await.status(), 200);
    let tried = answer(replay_rejects(&app, "replay-1").await).await;
    assert_eq!(tried, "200 etag=None replayed=Some(\"false\")\n{\"changed\":true,\"duplicates\":0,\"expired\":0,\"inserted\":1,\"load_id\":\"LOAD\",\"mode\":\"replay\",\"more_pending\":false,\"partitions\":[{\"ds\":\"2026-10-12\",\"row_delta\":1}],\"replayed\":false,\"rows_replayed\":1,\"rows_written\":1,\"still_pending\":1,\"table\":\"events\",\"tried\":2,\"unchanged\":0,\"updated\":0}\n");
    assert_eq!(stored(&app, "replay-1").await, "f113cde11702d49f3548dcc12fdb43c30f506412055820bad6ab2b2aedaf6435 200 etag=None\n{\"mode\": \"replay\", \"table\": \"events\", \"tried\": 2, \"changed\": true, \"expired\": 0, \"load_id\": \"LOAD\", \"updated\": 0, \"inserted\": 1, \"replayed\": false, \"unchanged\": 0, \"duplicates\": 0, \"partitions\": [{\"ds\": \"2026-10-12\", \"row_delta\": 1}], \"more_pending\": false, \"rows_written\": 1, \"rows_replayed\": 1, \"still_pending\": 1}");
    let again = answer(replay_rejects(&app, "replay-1").await).await;
    assert_eq!(again, "200 etag=None replayed=Some(\"true\")\n{\"changed\":true,\"duplicates\":0,\"expired\":0,\"inserted\":1,\"load_id\":\"LOAD\",\"mode\":\"replay\",\"more_pending\":false,\"partitions\":[{\"ds\":\"2026-10-12\",\"row_delta\":1}],\"replayed\":true,\"rows_replayed\":1,\"rows_written\":1,\"still_pending\":1,\"table\":\"events\",\"tried\":2,\"unchanged\":0,\"updated\":0}\n");
}
