//! The loads ledger: real start and finish times, and what a refused load
//! received and refused.

use chrono::{DateTime, FixedOffset};
use serde_json::{json, Value};

use crate::helpers::*;
use crate::support::*;

fn time(entry: &Value, field: &str) -> DateTime<FixedOffset> {
    let text = entry[field]
        .as_str()
        .unwrap_or_else(|| panic!("{field} in {entry}"));
    DateTime::parse_from_rfc3339(text).unwrap()
}

/// The entry of `load_id`, as `GET /loads/{id}` and `GET /loads` both show
/// it; its times are ordered and its duration is theirs.
async fn ledger_entry(app: &TestApp, load_id: &str) -> Value {
    let one = json_body(app.get(&format!("/loads/{load_id}")).await).await;
    let listed = json_body(app.get("/loads?table=orders").await).await;
    let in_list = listed
        .as_array()
        .unwrap()
        .iter()
        .find(|l| l["load_id"] == load_id)
        .unwrap_or_else(|| panic!("{load_id} in {listed}"));
    assert_eq!(&one, in_list);
    let (started, finished) = (time(&one, "started_at"), time(&one, "finished_at"));
    assert!(finished >= started, "{one}");
    let duration = one["duration_ms"]
        .as_i64()
        .unwrap_or_else(|| panic!("{one}"));
    let expected = (finished - started).num_milliseconds();
    assert!((duration - expected).abs() <= 1, "{one}");
    one
}

/// The newest entry of the orders table.
async fn newest_load_id(app: &TestApp) -> String {
    let loads = json_body(app.get("/loads?table=orders").await).await;
    loads[0]["load_id"].as_str().unwrap().to_string()
}

#[tokio::test]
async fn every_load_finishes_after_it_starts_and_says_how_long_it_took() {
    let app = spawn_app().await;
    app.declare_orders().await;
    let rows = [order(1, "paid", "2026-10-12T01:00:00Z")];
    let put = json_body(app.put_ndjson("/partitions/orders/2026-10-12", &rows).await).await;
    let entry = ledger_entry(&app, put["load_id"].as_str().unwrap()).await;
    assert_eq!(entry["status"], "published");

    let post = app
        .client
        .post(app.url("/rows?table=orders"))
        .header("content-type", "application/x-ndjson")
        .header("idempotency-key", "ledger-times")
        .body(ndjson(&[order(2, "paid", "2026-10-12T02:00:00Z")]))
        .send()
        .await
        .unwrap();
    assert_eq!(post.status(), 200);
    let post = json_body(post).await;
    let entry = ledger_entry(&app, post["load_id"].as_str().unwrap()).await;
    assert_eq!(entry["idempotency_key"], "ledger-times");
}

#[tokio::test]
async fn a_refused_load_records_the_rows_it_received_and_the_rows_it_refused() {
    let app = spawn_app().await;
    app.declare_orders().await;
    let mut bad = order(2, "paid", "2026-10-12T01:00:00Z");
    bad["amount"] = json!("lots");
    let mut worse = order(3, "paid", "2026-10-12T01:00:00Z");
    worse["order_id"] = Value::Null;
    let body = [order(1, "paid", "2026-10-12T01:00:00Z"), bad, worse];

    let put = app.put_ndjson("/partitions/orders/2026-10-12", &body).await;
    assert_eq!(put.status(), 422);
    let entry = ledger_entry(&app, &newest_load_id(&app).await).await;
    assert_eq!(entry["status"], "rejected");
    assert_eq!(entry["rows_received"], 3, "{entry}");
    assert_eq!(entry["rejected"], 2, "{entry}");

    let post = app
        .client
        .post(app.url("/rows?table=orders"))
        .header("content-type", "application/x-ndjson")
        .header("idempotency-key", "refused")
        .body(ndjson(&body))
        .send()
        .await
        .unwrap();
    assert_eq!(post.status(), 422);
    let entry = ledger_entry(&app, &newest_load_id(&app).await).await;
    assert_eq!(entry["idempotency_key"], "refused");
    assert_eq!(entry["rows_received"], 3, "{entry}");
    assert_eq!(entry["rejected"], 2, "{entry}");
}

#[tokio::test]
async fn a_refusal_that_quotes_a_nul_is_still_recorded() {
    let app = spawn_app().await;
    app.declare_orders().await;
    let body = "{\"order_id\":1,\"bad\\u0000name\":2}\n";
    let put = app
        .put(
            "/partitions/orders/2026-10-12",
            "application/x-ndjson",
            body,
        )
        .await;
    assert_eq!(put.status(), 422);
    let problem = json_body(put).await;
    assert_eq!(problem["errors"][0]["column"], "bad\u{0}name", "{problem}");

    let entry = ledger_entry(&app, &newest_load_id(&app).await).await;
    assert_eq!(entry["status"], "rejected");
    assert_eq!(entry["rejected"], 1, "{entry}");
    assert_eq!(
        entry["error"]["errors"][0]["column"], "bad\u{FFFD}name",
        "{entry}"
    );
}

#[tokio::test]
async fn the_ledger_filters_by_status_and_token_and_rejects_by_error_column() {
    let app = spawn_app().await;
    let events = QUARANTINED_EVENTS;
    assert_eq!(app.declare("events", events).await.status(), 201);
    let (_, secret) = make_token(
        &app.client,
        &app.base,
        &json!({"name": "feed", "scopes": ["write", "read"], "tables": ["events"]}),
    )
    .await;
    let day = |qty: Value| ndjson(&[json!({"id": 1, "ds": "2026-10-12", "qty": qty})]);
    let feed = client_with_token(&secret);
    let r = feed
        .put(app.url("/partitions/events/2026-10-12"))
        .header("content-type", "application/x-ndjson")
        .body(day(json!(1)))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    // The admin sends it again (unchanged), then a body of one bad row and
    // one that is no object.
    let again = app.put(
        "/partitions/events/2026-10-12",
        "application/x-ndjson",
        day(json!(1)),
    );
    assert_eq!(again.await.status(), 200);
    let bad = format!("{}[1]\n", day(json!("many")));
    let r = app
        .put("/partitions/events/2026-10-13", "application/x-ndjson", bad)
        .await;
    assert_eq!(r.status(), 200, "{}", r.text().await.unwrap());

    let loads = |query: &'static str| {
        let app = &app;
        async move {
            let listed = json_body(app.get(&format!("/loads?table=events&{query}")).await).await;
            let statuses: Vec<String> = listed
                .as_array()
                .unwrap()
                .iter()
                .map(|l| {
                    format!(
                        "{}/{}",
                        l["status"].as_str().unwrap(),
                        l["token_name"].as_str().unwrap()
                    )
                })
                .collect();
            statuses
        }
    };
    assert_eq!(loads("token=feed").await, ["published/feed"]);
    assert_eq!(loads("status=unchanged").await, ["unchanged/admin"]);
    assert_eq!(
        loads("status=published&token=admin").await,
        ["published/admin"]
    );
    assert!(loads("token=nobody").await.is_empty());
    // A filter Postgres could not hold, or past its bounds, is a 400.
    let long = "c".repeat(1001);
    for path in [
        "/loads?status=lost".to_string(),
        "/loads?token=a%00b".to_string(),
        format!("/loads?token={}", "t".repeat(101)),
        "/rejects?column=a%00b".to_string(),
        format!("/rejects?column={long}"),
    ] {
        let r = app.get(&path).await;
        assert_eq!(r.status(), 400, "{path}");
        assert_eq!(json_body(r).await["code"], "invalid_request", "{path}");
    }

    let rejects = |column: &'static str| {
        let app = &app;
        async move {
            let listed = json_body(
                app.get(&format!("/rejects?table=events&column={column}"))
                    .await,
            )
            .await;
            listed
                .as_array()
                .unwrap()
                .iter()
                .map(|r| r["line"].as_u64().unwrap())
                .collect::<Vec<_>>()
        }
    };
    assert_eq!(rejects("qty").await, [1]);
    assert_eq!(rejects("").await, [2]);
    assert!(rejects("id").await.is_empty());
}
