//! Plain tables (`"partition_by": null`): declared, merged into, appended
//! to and read whole; `/partitions` refuses them; and the whole-table read
//! (`GET`/`HEAD /tables/{t}/rows`) of any table.

use serde_json::{json, Value};

use crate::helpers::*;
use crate::support::*;

const CUSTOMERS: &str = r#"{"columns": {"customer_id": "bigint", "name": "text", "tier": "text"},
  "partition_by": null, "primary_key": ["customer_id"]}"#;

const NOTES: &str = r#"{"columns": {"note": "text"}, "partition_by": null}"#;

fn customer(id: i64, name: &str, tier: &str) -> Value {
    json!({"customer_id": id, "name": name, "tier": tier})
}

async fn declared(app: &TestApp, table: &str, declaration: &str) -> Value {
    let r = app.declare(table, declaration).await;
    assert!(r.status().is_success(), "{}", r.text().await.unwrap());
    json_body(r).await
}

/// A POST under `key`, or under a key of its own.
async fn post(app: &TestApp, query: &str, key: Option<&str>, rows: &[Value]) -> Value {
    static SENT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let fresh = format!(
        "post-{}",
        SENT.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
    );
    let r = app
        .client
        .post(app.url(&format!("/rows?{query}")))
        .header("content-type", "application/x-ndjson")
        .header("idempotency-key", key.unwrap_or(&fresh))
        .body(ndjson(rows))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200, "POST /rows?{query}");
    json_body(r).await
}

/// The whole table's rows, as `GET /tables/{t}/rows` gives them, and its ETag.
async fn whole(app: &TestApp, table: &str, accept: &str) -> (String, String) {
    let r = app
        .client
        .get(app.url(&format!("/tables/{table}/rows")))
        .header("accept", accept)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200, "GET /tables/{table}/rows");
    let etag = r.headers()["etag"].to_str().unwrap().to_string();
    (r.text().await.unwrap(), etag)
}

fn lines(text: &str) -> Vec<Value> {
    text.lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

#[tokio::test]
async fn a_plain_customers_table_takes_merges_and_reads_back_whole() {
    let app = spawn_app().await;
    let info = declared(&app, "customers", CUSTOMERS).await;
    assert_eq!(info["partition_by"], Value::Null);
    assert_eq!(info["grain"], "whole");

    let first = post(
        &app,
        "table=customers",
        None,
        &[customer(1, "Ada", "gold"), customer(2, "Bob", "free")],
    )
    .await;
    assert_eq!(first["mode"], "merge");
    assert_eq!(first["inserted"], 2);
    assert_eq!(first["ds"], Value::Null);
    assert_eq!(first["partitions"][0]["ds"], Value::Null, "{first}");
    assert_eq!(first["partitions"][0]["row_delta"], 2, "{first}");
    let second = post(&app, "table=customers", None, &[customer(2, "Bob", "gold")]).await;
    assert_eq!(second["updated"], 1);

    let (text, etag) = whole(&app, "customers", "application/x-ndjson").await;
    let mut rows = lines(&text);
    rows.sort_by_key(|r| r["customer_id"].as_i64());
    assert_eq!(
        rows,
        [customer(1, "Ada", "gold"), customer(2, "Bob", "gold")]
    );
    let head = app
        .client
        .head(app.url("/tables/customers/rows"))
        .send()
        .await
        .unwrap();
    assert_eq!(head.status(), 200);
    assert_eq!(head.headers()["etag"].to_str().unwrap(), etag);
    assert_eq!(head.headers()["idem-row-count"], "2");

    let unchanged = app
        .client
        .get(app.url("/tables/customers/rows"))
        .header("if-none-match", &etag)
        .send()
        .await
        .unwrap();
    assert_eq!(unchanged.status(), 304);

    let (csv, csv_etag) = whole(&app, "customers", "text/csv").await;
    assert_eq!(csv_etag, etag);
    let mut csv_lines: Vec<&str> = csv.lines().collect();
    assert_eq!(csv_lines.remove(0), "customer_id,name,tier");
    csv_lines.sort();
    assert_eq!(csv_lines, ["1,Ada,gold", "2,Bob,gold"]);

    let info = json_body(app.get("/tables/customers").await).await;
    assert_eq!(info["partition_by"], Value::Null);
    assert_eq!(info["rows"], 2, "{info}");
    assert_eq!(info["partitions"], 0, "{info}");
}

#[tokio::test]
async fn a_plain_table_takes_patches_and_inserts_of_missing_keys_and_drops_whole() {
    let app = spawn_app().await;
    declared(&app, "customers", CUSTOMERS).await;
    post(&app, "table=customers", None, &[customer(1, "Ada", "free")]).await;
    let patch = [json!({"customer_id": 1, "tier": "gold"})];
    let patched = post(&app, "table=customers&mode=patch", None, &patch).await;
    assert_eq!(patched["ds"], Value::Null, "{patched}");
    let missing = [customer(1, "Eve", "free"), customer(3, "Cy", "free")];
    post(&app, "table=customers&mode=insert_missing", None, &missing).await;
    let (text, _) = whole(&app, "customers", "application/x-ndjson").await;
    let mut rows = lines(&text);
    rows.sort_by_key(|r| r["customer_id"].as_i64());
    assert_eq!(
        rows,
        [customer(1, "Ada", "gold"), customer(3, "Cy", "free")]
    );

    let dropped = app
        .client
        .delete(app.url("/tables/customers?confirm=customers"))
        .send()
        .await
        .unwrap();
    assert_eq!(dropped.status(), 200);
    assert_eq!(app.get("/tables/customers/rows").await.status(), 404);
    declared(&app, "customers", CUSTOMERS).await;
    let (text, _) = whole(&app, "customers", "application/x-ndjson").await;
    assert_eq!(text, "");
}

#[tokio::test]
async fn a_plain_table_without_a_key_appends_and_a_replayed_key_writes_once() {
    let app = spawn_app().await;
    declared(&app, "notes", NOTES).await;
    let rows = [json!({"note": "a"}), json!({"note": "b"})];
    let first = post(&app, "table=notes&mode=append", Some("k-1"), &rows).await;
    assert_eq!(first["ds"], Value::Null);
    let again = post(&app, "table=notes&mode=append", Some("k-1"), &rows).await;
    assert_eq!(again["load_id"], first["load_id"]);
    post(&app, "table=notes&mode=append", None, &rows[..1]).await;
    let (text, _) = whole(&app, "notes", "application/x-ndjson").await;
    assert_eq!(lines(&text).len(), 3);

    let loads = json_body(app.get("/loads?table=notes").await).await;
    let loads = loads.as_array().unwrap();
    assert_eq!(loads.len(), 2, "{loads:?}");
    for load in loads {
        assert_eq!(load["ds"], Value::Null, "{load}");
    }
    let one = json_body(
        app.get(&format!("/loads/{}", first["load_id"].as_str().unwrap()))
            .await,
    )
    .await;
    assert_eq!(one["ds"], Value::Null, "{one}");
}

#[tokio::test]
async fn partitions_of_a_plain_table_are_refused_and_listed_as_none() {
    let app = spawn_app().await;
    declared(&app, "customers", CUSTOMERS).await;
    post(&app, "table=customers", None, &[customer(1, "Ada", "gold")]).await;
    let path = "/partitions/customers/2026-10-12";
    let answers = [
        app.get(path).await,
        app.client.head(app.url(path)).send().await.unwrap(),
        app.client.delete(app.url(path)).send().await.unwrap(),
        app.put_ndjson(path, &[customer(2, "Bob", "free")]).await,
    ];
    for r in answers {
        assert_eq!(r.status(), 409);
        if r.content_length() != Some(0) {
            let problem = json_body(r).await;
            assert_eq!(problem["code"], "not_partitioned", "{problem}");
            assert!(problem["detail"]
                .as_str()
                .unwrap()
                .contains("/tables/customers/rows"));
        }
    }
    let listed = json_body(app.get("/partitions/customers").await).await;
    let items = listed["items"].as_array().or(listed.as_array()).unwrap();
    assert!(items.is_empty(), "{listed}");
}

#[tokio::test]
async fn flipping_partition_by_between_null_and_a_column_is_refused() {
    let app = spawn_app().await;
    declared(&app, "customers", CUSTOMERS).await;
    let partitioned = CUSTOMERS.replace("\"partition_by\": null", "\"partition_by\": \"ds\"");
    let r = app.declare("customers", &partitioned).await;
    assert_eq!(r.status(), 409);

    app.declare_orders().await;
    let plain = r#"{"columns": {"order_id": "bigint", "ds": "date", "customer_id": "bigint",
      "status": "text", "amount": "numeric", "updated_at": "timestamptz", "note": "text"},
      "partition_by": null, "primary_key": ["order_id"], "cursor": "updated_at"}"#;
    let r = app.declare("orders", plain).await;
    assert_eq!(r.status(), 409);
    let info = json_body(app.get("/tables/orders").await).await;
    assert_eq!(info["partition_by"], "ds");
}

#[tokio::test]
async fn a_partitioned_tables_whole_read_is_its_partitions_in_order_and_its_etag_follows_them() {
    let app = spawn_app().await;
    app.declare_orders().await;
    for (day, ids) in [("2026-10-13", 10..13), ("2026-10-12", 1..4)] {
        let rows: Vec<Value> = ids
            .map(|i| {
                let mut row = order(i, "paid", &format!("{day}T01:00:00Z"));
                row["ds"] = json!(day);
                row
            })
            .collect();
        let r = app
            .put_ndjson(&format!("/partitions/orders/{day}"), &rows)
            .await;
        assert_eq!(r.status(), 200);
    }
    let mut parts = String::new();
    for day in ["2026-10-12", "2026-10-13"] {
        let r = app.get(&format!("/partitions/orders/{day}")).await;
        parts.push_str(&r.text().await.unwrap());
    }
    let (text, etag) = whole(&app, "orders", "application/x-ndjson").await;
    assert_eq!(text, parts);
    let (array, array_etag) = whole(&app, "orders", "application/json").await;
    assert_eq!(array_etag, etag);
    let array: Vec<Value> = serde_json::from_str(&array).unwrap();
    assert_eq!(array, lines(&parts));

    // Another day untouched: the same ETag; a day changed: another.
    let again = app
        .put_ndjson(
            "/partitions/orders/2026-10-12",
            &(1..4)
                .map(|i| order(i, "paid", "2026-10-12T01:00:00Z"))
                .collect::<Vec<_>>(),
        )
        .await;
    assert_eq!(json_body(again).await["changed"], false);
    assert_eq!(whole(&app, "orders", "application/x-ndjson").await.1, etag);
    let changed = app
        .put_ndjson(
            "/partitions/orders/2026-10-12",
            &[order(1, "refunded", "2026-10-12T01:00:00Z")],
        )
        .await;
    assert_eq!(changed.status(), 200);
    assert_ne!(whole(&app, "orders", "application/x-ndjson").await.1, etag);
}

#[tokio::test]
async fn an_empty_plain_table_reads_as_no_rows() {
    let app = spawn_app().await;
    declared(&app, "customers", CUSTOMERS).await;
    let (text, _) = whole(&app, "customers", "application/x-ndjson").await;
    assert_eq!(text, "");
    assert_eq!(app.get("/tables/nothing/rows").await.status(), 404);
}

#[tokio::test]
async fn a_quarantined_row_of_a_plain_table_is_kept_without_a_ds_and_replayed() {
    let app = spawn_app().await;
    let quarantine = CUSTOMERS.replace(
        "\"partition_by\": null",
        "\"partition_by\": null, \"bad_rows\": \"quarantine\"",
    );
    declared(&app, "customers", &quarantine).await;
    let rows = [
        customer(1, "Ada", "gold"),
        json!({"customer_id": "x", "name": "Bad"}),
    ];
    let written = post(&app, "table=customers", None, &rows).await;
    assert_eq!(written["rejected"], 1, "{written}");
    let rejects = json_body(app.get("/rejects?table=customers").await).await;
    assert_eq!(rejects.as_array().unwrap().len(), 1, "{rejects}");
    assert_eq!(rejects[0]["ds"], Value::Null, "{rejects}");

    let replayed = app
        .client
        .post(app.url("/rejects/replay?table=customers"))
        .header("idempotency-key", "replay-1")
        .send()
        .await
        .unwrap();
    assert_eq!(replayed.status(), 200, "{}", replayed.text().await.unwrap());
    let (text, _) = whole(&app, "customers", "application/x-ndjson").await;
    assert_eq!(lines(&text), [customer(1, "Ada", "gold")]);
}

#[tokio::test]
async fn a_repeated_key_of_a_plain_table_is_logged_without_a_ds() {
    let app = spawn_app().await;
    declared(&app, "customers", CUSTOMERS).await;
    let rows = [customer(1, "Ada", "free"), customer(1, "Ada", "gold")];
    let written = post(&app, "table=customers", None, &rows).await;
    assert_eq!(written["duplicates"], 1, "{written}");
    let logged = json_body(app.get("/duplicates?table=customers").await).await;
    let logged = logged.as_array().unwrap();
    assert_eq!(logged.len(), 1, "{logged:?}");
    assert_eq!(logged[0]["ds"], Value::Null, "{logged:?}");
}

#[tokio::test]
async fn the_served_openapi_document_describes_whole_reads_and_plain_tables() {
    let app = spawn_app().await;
    let spec = app.get("/openapi.yaml").await.text().await.unwrap();
    let whole = spec
        .split("\n  /tables/{table}/rows:\n")
        .nth(1)
        .expect("openapi.yaml describes /tables/{table}/rows");
    let whole = whole.split("\n  /").next().unwrap();
    for operation in ["operationId: getTableRows", "operationId: headTableRows"] {
        assert!(whole.contains(operation), "{operation}");
    }
    assert!(spec.contains("- not_partitioned"));
}

#[tokio::test]
async fn a_plain_table_under_evolve_grows_a_column_for_a_new_field() {
    let app = spawn_app().await;
    let evolving = CUSTOMERS.replace(
        "\"partition_by\": null",
        "\"partition_by\": null, \"schema\": \"evolve\"",
    );
    declared(&app, "customers", &evolving).await;
    let mut row = customer(1, "Ada", "gold");
    row["since"] = json!(2019);
    post(&app, "table=customers", None, &[row.clone()]).await;
    let (text, _) = whole(&app, "customers", "application/x-ndjson").await;
    assert_eq!(lines(&text), [row]);
}

#[tokio::test]
async fn an_hourly_tables_whole_read_gives_its_hours_in_order() {
    let app = spawn_app().await;
    let hourly = r#"{"columns": {"id": "bigint", "at": "timestamptz"},
      "partition_by": "at", "grain": "hour", "primary_key": ["id"]}"#;
    declared(&app, "clicks", hourly).await;
    let late = json!({"id": 1, "at": "2026-10-12T14:30:00+00:00"});
    let early = json!({"id": 2, "at": "2026-10-12T13:05:00+00:00"});
    post(&app, "table=clicks", None, &[late.clone(), early.clone()]).await;
    let (text, _) = whole(&app, "clicks", "application/x-ndjson").await;
    let ids: Vec<i64> = lines(&text)
        .iter()
        .map(|r| r["id"].as_i64().unwrap())
        .collect();
    assert_eq!(ids, [2, 1]);
}
