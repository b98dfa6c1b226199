//! `duplicates`: repeated keys in one body collapsed to one (`keep_one`,
//! the dropped versions logged) or held back whole (`hold`), and the log.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::Value;

use crate::helpers::*;
use crate::support::*;

/// The bench generator's orders: `n` of them, every `dup_every`-th twice.
fn generated_orders(n: u32, dup_every: u32) -> String {
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/bench/gen_orders.py");
    let out = std::process::Command::new("python3")
        .args([
            script,
            &n.to_string(),
            "--dup-every",
            &dup_every.to_string(),
        ])
        .output()
        .expect("python3 runs the bench generator");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

fn with_policy(policy: &str) -> String {
    ORDERS.replace(
        r#""cursor": "updated_at"}"#,
        &format!(r#""cursor": "updated_at", "duplicates": "{policy}"}}"#),
    )
}

/// Every version of the log of `table` (following the pages).
async fn logged(app: &TestApp, query: &str) -> Vec<Value> {
    all_pages(app, &format!("/duplicates?{query}&limit=1000"), 1000).await
}

/// How many times each order_id occurs in an NDJSON body.
fn occurrences(body: &str) -> BTreeMap<i64, usize> {
    let mut seen = BTreeMap::new();
    for line in body.lines() {
        let row: Value = serde_json::from_str(line).unwrap();
        *seen.entry(row["order_id"].as_i64().unwrap()).or_default() += 1;
    }
    seen
}

async fn stored_ids(app: &TestApp) -> BTreeSet<i64> {
    sqlx::query_scalar::<_, i64>("select order_id from idem_data.orders")
        .fetch_all(&app.db)
        .await
        .unwrap()
        .into_iter()
        .collect()
}

#[tokio::test]
async fn hold_writes_only_the_keys_that_occur_once_and_logs_every_version_of_the_others() {
    let body = generated_orders(1000, 10);
    let seen = occurrences(&body);
    let once: BTreeSet<i64> = seen
        .iter()
        .filter(|(_, n)| **n == 1)
        .map(|(k, _)| *k)
        .collect();
    let repeated: BTreeSet<i64> = seen
        .iter()
        .filter(|(_, n)| **n > 1)
        .map(|(k, _)| *k)
        .collect();
    assert_eq!((once.len(), repeated.len()), (900, 100));

    for (how, path) in [
        ("PUT", "/partitions/orders/2026-10-12"),
        ("POST", "/rows?table=orders"),
    ] {
        let app = spawn_app().await;
        assert_eq!(
            app.declare("orders", &with_policy("hold")).await.status(),
            201
        );
        let request = match how {
            "PUT" => app.client.put(app.url(path)),
            _ => app
                .client
                .post(app.url(path))
                .header("idempotency-key", "h1"),
        };
        let r = request
            .header("content-type", "application/x-ndjson")
            .body(body.clone())
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200, "{how}");
        let receipt = json_body(r).await;
        assert_eq!(receipt["duplicates"], 200, "{how}: {receipt}");
        assert_eq!(
            stored_ids(&app).await,
            once,
            "{how}: exactly the keys seen once"
        );

        let log = logged(
            &app,
            &format!(
                "table=orders&load_id={}",
                receipt["load_id"].as_str().unwrap()
            ),
        )
        .await;
        assert_eq!(log.len(), 200, "{how}: every version of each repeated key");
        let logged_keys: BTreeSet<i64> = log
            .iter()
            .map(|v| v["key"]["order_id"].as_i64().unwrap())
            .collect();
        assert_eq!(logged_keys, repeated, "{how}");
        for version in &log {
            assert_eq!(version["policy"], "hold");
            assert!(version["kept_row_hash"].is_null(), "{version}");
            assert_eq!(version["row"]["order_id"], version["key"]["order_id"]);
            assert_eq!(version["ds"], "2026-10-12");
        }
        // The day's ETag is its rows', as ever.
        if how == "PUT" {
            let r = app.get("/partitions/orders/2026-10-12").await;
            let text = r.text().await.unwrap();
            assert_eq!(text.lines().count(), 900);
            let again = app
                .put(
                    "/partitions/orders/2026-10-12",
                    "application/x-ndjson",
                    text,
                )
                .await;
            assert_eq!(json_body(again).await["changed"], false);
        }
    }
}

#[tokio::test]
async fn keep_one_logs_exactly_the_dropped_versions_naming_the_one_kept() {
    for how in ["PUT", "POST"] {
        let app = spawn_app().await;
        app.declare_orders().await;
        let rows = [
            order(1, "created", "2026-10-12T01:00:00Z"),
            order(1, "paid", "2026-10-12T03:00:00Z"),
            order(1, "shipped", "2026-10-12T02:00:00Z"),
            order(2, "paid", "2026-10-12T01:00:00Z"),
        ];
        let r = match how {
            "PUT" => app.put_ndjson("/partitions/orders/2026-10-12", &rows).await,
            _ => app.post_rows("table=orders", Some("k1"), &rows).await,
        };
        let receipt = json_body(r).await;
        assert_eq!(receipt["duplicates"], 2, "{how}: {receipt}");
        let stored = app.rows("orders", "2026-10-12").await;
        assert_eq!(stored.len(), 2);
        assert_eq!(stored[0]["status"], "paid", "the largest cursor is kept");

        let log = logged(&app, "table=orders").await;
        let statuses: BTreeSet<&str> = log
            .iter()
            .map(|v| v["row"]["status"].as_str().unwrap())
            .collect();
        assert_eq!(
            statuses,
            BTreeSet::from(["created", "shipped"]),
            "{how}: {log:?}"
        );
        let kept: BTreeSet<&str> = log
            .iter()
            .map(|v| v["kept_row_hash"].as_str().unwrap())
            .collect();
        assert_eq!(kept.len(), 1, "one kept version");
        let versions: Vec<i64> = log.iter().map(|v| v["version"].as_i64().unwrap()).collect();
        assert_eq!(versions, [2, 3], "ranked after the kept version 1");
        assert!(log
            .iter()
            .all(|v| v["policy"] == "keep_one" && v["key"] == serde_json::json!({"order_id": 1})));
    }
}

#[tokio::test]
async fn a_table_can_turn_the_log_off_and_on_again() {
    let app = spawn_app().await;
    let off = ORDERS.replace(
        r#""cursor": "updated_at"}"#,
        r#""cursor": "updated_at", "duplicate_log": false}"#,
    );
    assert_eq!(app.declare("orders", &off).await.status(), 201);
    let rows = [
        order(1, "created", "2026-10-12T01:00:00Z"),
        order(1, "paid", "2026-10-12T03:00:00Z"),
    ];
    let receipt = json_body(app.put_ndjson("/partitions/orders/2026-10-12", &rows).await).await;
    assert_eq!(receipt["duplicates"], 1);
    assert!(logged(&app, "table=orders").await.is_empty());

    // Logging on again: the next load's dropped version is logged.
    app.declare_orders().await;
    let rows = [
        order(1, "created", "2026-10-12T01:00:00Z"),
        order(1, "shipped", "2026-10-12T04:00:00Z"),
    ];
    app.put_ndjson("/partitions/orders/2026-10-12", &rows).await;
    let log = logged(&app, "table=orders").await;
    assert_eq!(log.len(), 1);
    assert_eq!(log[0]["row"]["status"], "created");
    let table = json_body(app.get("/tables/orders").await).await;
    assert_eq!(
        (
            table["duplicates"].as_str(),
            table["duplicate_log"].as_bool()
        ),
        (Some("keep_one"), Some(true))
    );
    let keyless = r#"{"columns": {"n": "bigint"}, "duplicates": "hold"}"#;
    assert_eq!(app.declare("keyless", keyless).await.status(), 400);
}

#[tokio::test]
async fn reject_refuses_a_repeated_key_unless_bad_rows_are_quarantined() {
    let app = spawn_app().await;
    assert_eq!(
        app.declare("orders", &with_policy("reject")).await.status(),
        201
    );
    let rows = [
        order(1, "created", "2026-10-12T01:00:00Z"),
        order(1, "paid", "2026-10-12T03:00:00Z"),
        order(2, "paid", "2026-10-12T01:00:00Z"),
    ];
    for how in ["PUT", "POST"] {
        let r = match how {
            "PUT" => app.put_ndjson("/partitions/orders/2026-10-12", &rows).await,
            _ => app.post_rows("table=orders", Some("k1"), &rows).await,
        };
        assert_eq!(r.status(), 422, "{how}");
        let problem = json_body(r).await;
        assert_eq!(problem["code"], "bad_rows");
        assert_eq!(problem["rejected"], 1, "{how}: one key: {problem}");
        let listed = &problem["errors"][0];
        assert_eq!(listed["column"], "order_id");
        assert!(
            listed["message"]
                .as_str()
                .unwrap()
                .contains("occurs 2 times"),
            "{problem}"
        );
        assert_eq!(app.count("orders", "2026-10-12").await, 0, "{how}");
    }
    assert!(
        logged(&app, "table=orders").await.is_empty(),
        "refused loads log nothing"
    );

    let r = app
        .put(
            "/partitions/orders/2026-10-12?bad_rows=quarantine",
            "application/x-ndjson",
            ndjson(&rows),
        )
        .await;
    assert_eq!(r.status(), 200);
    assert_eq!(stored_ids(&app).await, BTreeSet::from([2]));
    let log = logged(&app, "table=orders").await;
    assert_eq!(log.len(), 2);
    assert!(log.iter().all(|v| v["policy"] == "reject"), "{log:?}");
}

#[tokio::test]
async fn columns_named_like_an_alias_are_read_and_logged_as_columns() {
    let app = spawn_app().await;
    let declaration = r#"{"columns": {"s": "bigint", "r": "text", "row": "text", "t": "jsonb"},
      "primary_key": ["s"]}"#;
    assert_eq!(app.declare("odd", declaration).await.status(), 201);
    let rows = [
        serde_json::json!({"s": 1, "r": "a", "row": "x", "t": {"k": 1}, "ds": "2026-10-12"}),
        serde_json::json!({"s": 1, "r": "b", "row": "y", "t": [2], "ds": "2026-10-12"}),
    ];
    let r = app.put_ndjson("/partitions/odd/2026-10-12", &rows).await;
    assert_eq!(r.status(), 200);
    let r = app
        .client
        .get(app.url("/partitions/odd/2026-10-12"))
        .header("accept", "application/json")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let read = json_body(r).await;
    assert_eq!(read.as_array().unwrap().len(), 1, "{read}");
    assert_eq!(read[0]["s"], 1);
    let log = logged(&app, "table=odd").await;
    assert_eq!(log.len(), 1);
    assert_eq!(log[0]["key"], serde_json::json!({"s": 1}));
    assert!(log[0]["row"]["r"].is_string(), "{log:?}");
}
