use serde_json::json;

use crate::helpers::*;
use crate::support::*;

#[tokio::test]
async fn declaring_the_same_table_twice_is_a_no_op() {
    let app = spawn_app().await;
    let first = app.declare("orders", ORDERS).await;
    assert_eq!(first.status(), 201);
    let second = app.declare("orders", ORDERS).await;
    assert_eq!(second.status(), 200);
    let body = json_body(second).await;
    assert_eq!(body["changes"], json!([]));
    assert_eq!(body["primary_key"], json!(["order_id"]));
    let columns: Vec<&str> = body["columns"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        columns,
        [
            "order_id",
            "ds",
            "customer_id",
            "status",
            "amount",
            "updated_at",
            "note"
        ]
    );
}

#[tokio::test]
async fn a_new_nullable_column_is_added_and_a_key_change_is_refused() {
    let app = spawn_app().await;
    app.declare_orders().await;
    let wider = ORDERS.replace(r#""note": "text""#, r#""note": "text", "channel": "text""#);
    let r = app.declare("orders", &wider).await;
    assert_eq!(r.status(), 200);
    let body = json_body(r).await;
    assert_eq!(body["changes"][0]["change"], "add_column");
    // The column is really there: a row can carry it.
    let mut row = order(1, "paid", "2026-10-12T01:00:00Z");
    row["channel"] = json!("web");
    let r = app
        .put_ndjson("/partitions/orders/2026-10-12", &[row])
        .await;
    assert_eq!(r.status(), 200, "{}", r.text().await.unwrap());

    let rekeyed = ORDERS.replace(r#"["order_id"]"#, r#"["customer_id"]"#);
    let r = app.declare("orders", &rekeyed).await;
    assert_eq!(r.status(), 409);
    assert_eq!(r.headers()["content-type"], "application/problem+json");
    let body = json_body(r).await;
    assert_eq!(body["code"], "schema_conflict");
    assert!(body["detail"].as_str().unwrap().contains("key"));

    let dropped = ORDERS.replace(r#", "note": "text""#, "");
    assert_eq!(app.declare("orders", &dropped).await.status(), 409);
}

#[tokio::test]
async fn invalid_names_and_types_are_refused_before_reaching_sql() {
    let app = spawn_app().await;
    let r = app.declare("Orders", ORDERS).await;
    assert_eq!(r.status(), 400);
    assert_eq!(json_body(r).await["code"], "invalid_name");
    let r = app
        .declare("t", r#"{"columns": {"a\"; drop table x; --": "text"}}"#)
        .await;
    assert_eq!(r.status(), 400);
    let r = app
        .declare("t", r#"{"columns": {"_load_id": "text"}}"#)
        .await;
    assert_eq!(json_body(r).await["code"], "invalid_name");
    let r = app.declare("t", r#"{"columns": {"a": "money"}}"#).await;
    assert_eq!(r.status(), 400);
    assert_eq!(json_body(r).await["code"], "invalid_declaration");
    let r = app.declare("t", r#"{"columns": "#).await;
    assert_eq!(r.status(), 400);
    assert_eq!(app.get("/tables").await.text().await.unwrap(), "[]\n");
}

#[tokio::test]
async fn an_undeclared_table_is_created_with_inferred_types() {
    let app = spawn_app().await;
    let body = "{\"id\":1,\"price\":2.5,\"at\":\"2026-10-12T00:00:00Z\",\"tags\":[\"a\"]}\n{\"id\":2,\"price\":3,\"at\":null,\"tags\":null}\n";
    let r = app
        .put(
            "/partitions/events/2026-10-12",
            "application/x-ndjson",
            body,
        )
        .await;
    assert_eq!(r.status(), 200, "{}", r.text().await.unwrap());
    let table = json_body(app.get("/tables/events").await).await;
    assert_eq!(table["inferred"], true);
    let types: Vec<(String, String)> = table["columns"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            (
                c["name"].as_str().unwrap().into(),
                c["type"].as_str().unwrap().into(),
            )
        })
        .collect();
    let expected = [
        ("id", "bigint"),
        ("price", "numeric"),
        ("at", "timestamptz"),
        ("tags", "jsonb"),
        ("ds", "date"),
    ];
    assert_eq!(types, expected.map(|(a, b)| (a.to_string(), b.to_string())));
    assert_eq!(table["rows"], 2);
    assert_eq!(table["partitions"], 1);
}

#[tokio::test]
async fn writes_to_undeclared_tables_can_be_refused_by_setting() {
    let settings = idem::config::Settings {
        auto_create_tables: false,
        ..Default::default()
    };
    let app = spawn_app_with(settings).await;
    let r = app
        .put(
            "/partitions/events/2026-10-12",
            "application/x-ndjson",
            "{\"id\":1}\n",
        )
        .await;
    assert_eq!(r.status(), 404);
    assert_eq!(json_body(r).await["code"], "table_not_found");
}

/// A keyed `POST /rows` of `body` to `query`.
async fn post_keyed(app: &TestApp, query: &str, key: &str, body: &str) -> reqwest::Response {
    app.client
        .post(app.url(&format!("/rows?{query}")))
        .header("content-type", "application/x-ndjson")
        .header("idempotency-key", key)
        .body(body.to_string())
        .send()
        .await
        .unwrap()
}

#[tokio::test]
async fn create_false_refuses_an_undeclared_table_and_the_write_that_makes_one_says_so() {
    let app = spawn_app().await;
    let (day, ndjson_type) = ("/partitions/evnets/2026-10-12", "application/x-ndjson");
    let line = "{\"id\":1}\n";
    let refused = app
        .put(&format!("{day}?create=false"), ndjson_type, line)
        .await;
    assert_eq!(refused.status(), 404);
    assert_eq!(json_body(refused).await["code"], "table_not_found");
    let refused = post_keyed(&app, "table=evnets&create=false", "k0", line).await;
    assert_eq!(refused.status(), 404);
    assert_eq!(
        app.get("/tables/evnets").await.status(),
        404,
        "no table made"
    );
    let wrong = app
        .put(&format!("{day}?create=perhaps"), ndjson_type, line)
        .await;
    assert_eq!(wrong.status(), 400);

    // Without it the PUT makes the table, and its receipt says so; later
    // writes to the table do not.
    let made = json_body(app.put(day, ndjson_type, line).await).await;
    assert_eq!(made["table_created"], true, "{made}");
    let next_day = "/partitions/evnets/2026-10-13?create=false";
    let next = json_body(app.put(next_day, ndjson_type, line).await).await;
    assert_eq!(next["changed"], true, "{next}");
    assert!(next.get("table_created").is_none(), "{next}");

    // A POST likewise; its replay answers the first request's receipt.
    let line = "{\"id\":1,\"ds\":\"2026-10-12\"}\n";
    let made = json_body(post_keyed(&app, "table=clicks", "k1", line).await).await;
    assert_eq!(
        (&made["table_created"], &made["replayed"]),
        (&json!(true), &json!(false))
    );
    let again = json_body(post_keyed(&app, "table=clicks", "k1", line).await).await;
    assert_eq!(
        (&again["table_created"], &again["replayed"]),
        (&json!(true), &json!(true))
    );
    let other = json_body(post_keyed(&app, "table=clicks", "k2", line).await).await;
    assert!(other.get("table_created").is_none(), "{other}");
}

#[tokio::test]
async fn the_served_openapi_document_names_every_route() {
    let app = spawn_app().await;
    let r = app.get("/openapi.yaml").await;
    assert_eq!(r.status(), 200);
    let spec = r.text().await.unwrap();
    for path in [
        "/tables:",
        "/tables/{table}:",
        "/partitions/{table}:",
        "/partitions/{table}/{ds}:",
        "/rows:",
        "/loads:",
        "/loads/{load_id}:",
        "/loads/{load_id}/parts/{n}:",
        "/loads/{load_id}/publish:",
        "/tables/{table}/rows:",
        "/tables/{table}/history/rows:",
        "/idempotency-keys/{key}:",
        "/healthz:",
        "/readyz:",
        "/openapi.yaml:",
    ] {
        assert!(
            spec.contains(&format!("  {path}")),
            "openapi.yaml lacks {path}"
        );
    }
    assert_eq!(json_body(app.get("/readyz").await).await["status"], "ready");
}

#[tokio::test]
async fn requests_the_router_refuses_still_get_problem_documents() {
    let app = spawn_app().await;
    for (r, status, code) in [
        (app.get("/loads?limit=abc").await, 400, "invalid_request"),
        (app.get("/nowhere").await, 404, "not_found"),
        (
            app.client.patch(app.url("/tables")).send().await.unwrap(),
            405,
            "method_not_allowed",
        ),
    ] {
        assert_eq!(r.status(), status);
        assert_eq!(r.headers()["content-type"], "application/problem+json");
        assert_eq!(json_body(r).await["code"], code);
    }
}

#[tokio::test]
async fn a_declaration_waits_for_writes_in_flight_at_most_the_lock_wait() {
    let app = spawn_app_with(idem::config::Settings {
        idempotency_wait_ms: 300,
        ..Default::default()
    })
    .await;
    app.declare_orders().await;
    let wider = ORDERS.replace(r#""note": "text""#, r#""note": "text", "channel": "text""#);
    // A write in flight holds the table; the change waits for it no longer
    // than a write waits, and then changes nothing.
    let mut writer = app.writer_holding("orders").await;
    let busy = tokio::time::timeout(
        std::time::Duration::from_secs(10),
        app.declare("orders", &wider),
    )
    .await
    .expect("the declaration waited for the write to end");
    assert_eq!(busy.status(), 503);
    assert!(busy.headers().contains_key("retry-after"));
    assert_eq!(json_body(busy).await["code"], "busy");
    sqlx::query("commit").execute(&mut *writer).await.unwrap();
    let table = json_body(app.get("/tables/orders").await).await;
    assert!(!table["columns"].to_string().contains("channel"), "{table}");
    // Sent again once the write is done, it is made.
    let made = app.declare("orders", &wider).await;
    assert_eq!(made.status(), 200);
    assert_eq!(json_body(made).await["changes"][0]["change"], "add_column");
}
