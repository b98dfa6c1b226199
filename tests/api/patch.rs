//! `POST /rows?mode=patch`: only the fields a row gives change.

use serde_json::{json, Value};

use crate::helpers::*;
use crate::support::*;

const DAY: &str = "/partitions/orders/2026-10-12";

async fn post(app: &TestApp, mode: &str, key: &str, rows: &[Value]) -> Value {
    let r = app
        .post_rows(&format!("table=orders&mode={mode}"), Some(key), rows)
        .await;
    assert_eq!(r.status(), 200, "{mode} {key}");
    json_body(r).await
}

async fn row(app: &TestApp, order_id: i64) -> Option<Value> {
    app.rows("orders", "2026-10-12")
        .await
        .into_iter()
        .find(|r| r["order_id"] == order_id)
}

/// The day's ETag is the hash of what is stored: its rows read back and
/// PUT again change nothing.
async fn assert_etag_is_the_stored_content(app: &TestApp) {
    app.put_back_unchanged(DAY).await;
}

#[tokio::test]
async fn a_patch_changes_only_the_fields_it_gives() {
    let app = spawn_app().await;
    app.declare_orders().await;
    let full = json!({"order_id": 1, "ds": "2026-10-12", "customer_id": 7, "status": "paid",
                      "amount": "10.50", "updated_at": "2026-10-12T01:00:00Z", "note": "fragile"});
    post(&app, "merge", "first", &[full]).await;
    let before = row(&app, 1).await.unwrap();
    assert_eq!(before["note"], "fragile");

    let receipt = post(
        &app,
        "patch",
        "ship",
        &[json!({"order_id": 1, "ds": "2026-10-12", "status": "shipped"})],
    )
    .await;
    assert_eq!(receipt["mode"], "patch");
    assert_eq!(receipt["updated"], 1);
    let patched = row(&app, 1).await.unwrap();
    assert_eq!(patched["status"], "shipped");
    for field in ["customer_id", "amount", "updated_at", "note"] {
        assert_eq!(patched[field], before[field], "{field} kept");
    }
    assert_etag_is_the_stored_content(&app).await;

    // The same patch again changes nothing; a merge replaces the whole row.
    let again = post(
        &app,
        "patch",
        "ship-again",
        &[json!({"order_id": 1, "ds": "2026-10-12", "status": "shipped"})],
    )
    .await;
    assert_eq!(again["changed"], false);
    post(
        &app,
        "merge",
        "replace",
        &[
            json!({"order_id": 1, "ds": "2026-10-12", "status": "delivered",
                 "updated_at": "2026-10-12T02:00:00Z"}),
        ],
    )
    .await;
    let replaced = row(&app, 1).await.unwrap();
    assert_eq!(replaced["note"], Value::Null);
    assert_eq!(replaced["customer_id"], Value::Null);
    assert_etag_is_the_stored_content(&app).await;
}

#[tokio::test]
async fn a_patch_keeps_the_cursor_rule_inserts_new_keys_and_reads_tombstones() {
    let app = spawn_app().await;
    app.declare_orders().await;
    post(
        &app,
        "merge",
        "first",
        &[
            order(1, "paid", "2026-10-12T05:00:00Z"),
            order(2, "paid", "2026-10-12T05:00:00Z"),
        ],
    )
    .await;
    // An older version of key 1 changes nothing, even for the fields it gives.
    let old = post(
        &app,
        "patch",
        "old",
        &[
            json!({"order_id": 1, "ds": "2026-10-12", "status": "created",
                 "updated_at": "2026-10-12T01:00:00Z"}),
        ],
    )
    .await;
    assert_eq!(old["changed"], false);
    assert_eq!(row(&app, 1).await.unwrap()["status"], "paid");

    // A new key is inserted with the fields given; a tombstone deletes.
    let mixed = post(
        &app,
        "patch",
        "mixed",
        &[
            json!({"order_id": 3, "ds": "2026-10-12", "status": "new"}),
            json!({"order_id": 2, "ds": "2026-10-12", "_deleted": true}),
        ],
    )
    .await;
    assert_eq!(
        (mixed["inserted"].clone(), mixed["deleted"].clone()),
        (json!(1), json!(1))
    );
    let three = row(&app, 3).await.unwrap();
    assert_eq!(three["status"], "new");
    assert_eq!(three["amount"], Value::Null);
    assert!(row(&app, 2).await.is_none());
    assert_etag_is_the_stored_content(&app).await;
}

#[tokio::test]
async fn a_patch_needs_a_key() {
    let app = spawn_app().await;
    app.declare("events", r#"{"columns": {"n": "bigint"}}"#)
        .await;
    let r = app
        .client
        .post(app.url("/rows?table=events&mode=patch"))
        .header("content-type", "application/x-ndjson")
        .header("idempotency-key", "k")
        .body("{\"n\":1,\"ds\":\"2026-10-12\"}\n")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 400);
}

#[tokio::test]
async fn a_patched_row_hashes_as_the_whole_row_for_every_type() {
    let app = spawn_app().await;
    let declared = app
        .declare(
            "things",
            r#"{"columns": {"id": "bigint", "ds": "date", "doc": "jsonb", "price": "numeric",
                "at": "timestamptz", "ok": "boolean", "ratio": "double precision",
                "tag": "uuid", "name": "text"}, "primary_key": ["id"]}"#,
        )
        .await;
    assert!(declared.status().is_success());
    let full = json!({"id": 1, "ds": "2026-10-12", "doc": {"b": [1.50, null], "a": "x"},
                      "price": "1e2", "at": "2026-10-12T09:00:00+02:00", "ok": true,
                      "ratio": 0.1, "tag": "6f1c1e0e-3b4a-4f55-9b7c-1d2e3f405162", "name": ""});
    let r = app
        .post_rows("table=things&mode=merge", Some("full"), &[full])
        .await;
    assert_eq!(r.status(), 200);
    let r = app
        .post_rows(
            "table=things&mode=patch",
            Some("patch"),
            &[json!({"id": 1, "ds": "2026-10-12", "ok": false})],
        )
        .await;
    assert_eq!(json_body(r).await["updated"], 1);
    let day = "/partitions/things/2026-10-12";
    let text = app.put_back_unchanged(day).await;
    assert!(
        text.contains("\"ok\":false") && text.contains("\"name\":\"\""),
        "{text}"
    );
}
