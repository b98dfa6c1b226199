//! A table's policies for rows that do not fit: `schema` (fields the table
//! has no column for).

use serde_json::{json, Value};

use crate::helpers::*;
use crate::support::*;

fn with_schema(policy: &str) -> String {
    ORDERS.replace(
        r#""cursor": "updated_at"}"#,
        &format!(r#""cursor": "updated_at", "schema": "{policy}"}}"#),
    )
}

/// Order `id` with fields the table lacks.
fn order_with_extras(id: i64) -> Value {
    let mut row = order(id, "paid", "2026-10-12T01:00:00Z");
    row["colour"] = json!("red");
    row["size"] = json!({"w": 3});
    row
}

#[tokio::test]
async fn a_frozen_table_refuses_an_unknown_field_naming_line_and_column() {
    let app = spawn_app().await;
    app.declare_orders().await;
    let table = json_body(app.get("/tables/orders").await).await;
    assert_eq!(table["schema"], "freeze", "the default: {table}");
    let rows = [
        order(1, "paid", "2026-10-12T01:00:00Z"),
        order_with_extras(2),
    ];
    let r = app.post_rows("table=orders", Some("k1"), &rows).await;
    assert_eq!(r.status(), 422);
    let body = json_body(r).await;
    let bad = &body["errors"][0];
    assert_eq!(bad["line"], 2, "{body}");
    let columns: Vec<&str> = bad["columns"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["column"].as_str().unwrap())
        .collect();
    assert!(
        columns.contains(&"colour") && columns.contains(&"size"),
        "{body}"
    );
    assert_eq!(
        app.count("orders", "2026-10-12").await,
        0,
        "nothing written"
    );
}

#[tokio::test]
async fn discard_unknown_writes_the_known_fields_and_counts_the_dropped_ones() {
    let app = spawn_app().await;
    let r = app.declare("orders", &with_schema("discard_unknown")).await;
    assert_eq!(r.status(), 201, "{}", r.text().await.unwrap());
    let table = json_body(app.get("/tables/orders").await).await;
    assert_eq!(table["schema"], "discard_unknown");

    let rows = [
        order_with_extras(1),
        order(2, "paid", "2026-10-12T01:00:00Z"),
    ];
    let r = app.post_rows("table=orders", Some("k1"), &rows).await;
    assert_eq!(r.status(), 200, "{}", r.text().await.unwrap());
    let receipt = json_body(r).await;
    assert_eq!(receipt["discarded_fields"], 2, "{receipt}");
    assert_eq!(receipt["inserted"], 2);
    // The day holds exactly the rows without the unknown fields.
    let without = [
        order(1, "paid", "2026-10-12T01:00:00Z"),
        order(2, "paid", "2026-10-12T01:00:00Z"),
    ];
    let r = app
        .put_ndjson("/partitions/orders/2026-10-12", &without)
        .await;
    assert_eq!(json_body(r).await["changed"], false);
    let stored = app.rows("orders", "2026-10-12").await;
    assert!(stored
        .iter()
        .all(|r| r.get("colour").is_none() && r.get("size").is_none()));

    // A CSV header naming a column the table lacks: the column is dropped.
    let csv = "order_id,ds,customer_id,status,amount,updated_at,note,colour\n\
               3,2026-10-13,7,paid,10.50,2026-10-13T01:00:00Z,,red\n\
               4,2026-10-13,7,paid,10.50,2026-10-13T01:00:00Z,,blue\n";
    let r = app
        .put("/partitions/orders/2026-10-13", "text/csv", csv)
        .await;
    assert_eq!(r.status(), 200, "{}", r.text().await.unwrap());
    let receipt = json_body(r).await;
    assert_eq!(receipt["discarded_fields"], 2, "{receipt}");
    assert_eq!(receipt["rows_written"], 2);
    assert_eq!(app.rows("orders", "2026-10-13").await.len(), 2);
    // What GET gives back, PUT takes back unchanged.
    let ndjson_back = app
        .get("/partitions/orders/2026-10-13")
        .await
        .text()
        .await
        .unwrap();
    let r = app
        .put(
            "/partitions/orders/2026-10-13",
            "application/x-ndjson",
            ndjson_back,
        )
        .await;
    let receipt = json_body(r).await;
    assert_eq!(receipt["changed"], false, "{receipt}");
    assert!(
        receipt.get("discarded_fields").is_none(),
        "none dropped: {receipt}"
    );
}

#[tokio::test]
async fn the_schema_policy_changes_by_declaration_and_unknown_values_are_refused() {
    let app = spawn_app().await;
    app.declare_orders().await;
    let r = app.declare("orders", &with_schema("discard_unknown")).await;
    assert_eq!(r.status(), 200);
    let body = json_body(r).await;
    assert_eq!(body["changes"][0]["change"], "set_schema_policy", "{body}");
    assert_eq!(body["changes"][0]["schema"], "discard_unknown");
    let r = app.declare("orders", &with_schema("discard_unknown")).await;
    assert_eq!(
        json_body(r).await["changes"],
        json!([]),
        "the same again changes nothing"
    );
    let r = app
        .post_rows("table=orders", Some("k"), &[order_with_extras(1)])
        .await;
    assert_eq!(r.status(), 200);
    // Back to the default: an unknown field is a bad row again.
    assert_eq!(app.declare("orders", ORDERS).await.status(), 200);
    let r = app
        .post_rows("table=orders", Some("k2"), &[order_with_extras(2)])
        .await;
    assert_eq!(r.status(), 422);

    for (field, value) in [
        ("schema", "grow"),
        ("bad_rows", "drop"),
        ("duplicates", "newest"),
        ("reject_retry_window", "3 weeks"),
    ] {
        let declaration = ORDERS.replace(
            r#""cursor": "updated_at"}"#,
            &format!(r#""cursor": "updated_at", "{field}": "{value}"}}"#),
        );
        let r = app.declare("orders", &declaration).await;
        assert_eq!(r.status(), 400, "{field}");
        let body = json_body(r).await;
        assert_eq!(body["code"], "invalid_declaration");
        assert!(body["detail"].as_str().unwrap().contains(field), "{body}");
    }
    // Every policy is a recorded change of the definition alone.
    let all = ORDERS.replace(
        r#""cursor": "updated_at"}"#,
        r#""cursor": "updated_at", "schema": "evolve", "bad_rows": "quarantine",
            "duplicates": "hold", "duplicate_log": false, "reject_retry_window": "7d"}"#,
    );
    let body = json_body(app.declare("orders", &all).await).await;
    let changes: Vec<&str> = body["changes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["change"].as_str().unwrap())
        .collect();
    assert_eq!(
        changes,
        [
            "set_schema_policy",
            "set_bad_row_policy",
            "set_reject_retry_window",
            "set_duplicate_policy",
            "set_duplicate_log"
        ],
        "{body}"
    );
    let table = json_body(app.get("/tables/orders").await).await;
    assert_eq!(table["reject_retry_window"], "168h");
    // What GET says of the table, a declaration takes back unchanged.
    let r = app.declare("orders", &all.replace("7d", "168h")).await;
    assert_eq!(json_body(r).await["changes"], json!([]));
}
