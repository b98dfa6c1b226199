//! `DELETE /tables/{table}?confirm={table}`: a table dropped with everything
//! idem keeps of it but its ledger, which marks the table's loads dropped.

use serde_json::{json, Value};

use crate::helpers::*;
use crate::support::*;

async fn drop_table(app: &TestApp, path: &str) -> reqwest::Response {
    app.client.delete(app.url(path)).send().await.unwrap()
}

/// Declares orders and loads two days into it (one under a key, one with a
/// bad row quarantined).
async fn orders_with_two_days(app: &TestApp) {
    app.declare_orders().await;
    let day = ndjson(&[
        order(1, "paid", "2026-10-12T01:00:00Z"),
        order(2, "paid", "2026-10-12T01:00:00Z"),
    ]);
    let r = app
        .client
        .put(app.url("/partitions/orders/2026-10-12"))
        .header("content-type", "application/x-ndjson")
        .header("idempotency-key", "day-12")
        .body(day)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200, "{}", r.text().await.unwrap());
    let mut bad = order(3, "paid", "2026-10-13T01:00:00Z");
    bad["ds"] = json!("2026-10-13");
    let body = format!("{}{{\"order_id\":\"x\"}}\n", ndjson(&[bad]));
    let path = "/partitions/orders/2026-10-13?bad_rows=quarantine";
    let r = app.put(path, "application/x-ndjson", body).await;
    assert_eq!(r.status(), 200, "{}", r.text().await.unwrap());
}

async fn scalar(app: &TestApp, sql: &str) -> i64 {
    sqlx::query_scalar(sql).fetch_one(&app.db).await.unwrap()
}

#[tokio::test]
async fn a_dropped_table_leaves_no_data_registry_rows_rejects_or_keys_behind() {
    let app = spawn_app().await;
    orders_with_two_days(&app).await;

    let r = drop_table(&app, "/tables/orders?confirm=orders").await;
    assert_eq!(r.status(), 200);
    let receipt = json_body(r).await;
    assert_eq!(
        (&receipt["table"], &receipt["mode"], &receipt["changed"]),
        (&json!("orders"), &json!("drop"), &json!(true))
    );
    assert_eq!(receipt["idempotency_keys_removed"], 1, "{receipt}");

    assert_eq!(app.get("/tables/orders").await.status(), 404);
    let r = app.get("/partitions/orders/2026-10-12").await;
    assert_eq!(r.status(), 404);
    let left = "select (select count(*) from pg_class c join pg_namespace n on n.oid = c.relnamespace
                        where n.nspname in ('idem_data', 'idem_parts', 'idem_staging'))
                     + (select count(*) from idem.tables) + (select count(*) from idem.partitions)
                     + (select count(*) from idem.partition_deltas) + (select count(*) from idem.rejects)
                     + (select count(*) from idem.schema_changes)
                     + (select count(*) from idem.idempotency_keys)";
    assert_eq!(scalar(&app, left).await, 0, "nothing of the table is left");
    let r = app.get("/idempotency-keys/day-12").await;
    assert_eq!(r.status(), 404, "the key of a dropped load is gone");
}

#[tokio::test]
async fn dropping_a_table_again_or_one_never_declared_answers_204() {
    let app = spawn_app().await;
    orders_with_two_days(&app).await;
    for status in [200, 204] {
        let r = drop_table(&app, "/tables/orders?confirm=orders").await;
        assert_eq!(r.status(), status);
    }
    let r = drop_table(&app, "/tables/never_made?confirm=never_made").await;
    assert_eq!(r.status(), 204);
    let drops = "select count(*) from idem.loads where mode = 'drop'";
    assert_eq!(
        scalar(&app, drops).await,
        1,
        "only a drop that dropped is a load"
    );
    let r = drop_table(&app, "/tables/Not-A-Name?confirm=Not-A-Name").await;
    assert_eq!(r.status(), 400);
    assert_eq!(json_body(r).await["code"], "invalid_name");
}

#[tokio::test]
async fn a_drop_without_confirm_naming_the_table_is_400_and_drops_nothing() {
    let app = spawn_app().await;
    orders_with_two_days(&app).await;
    for path in [
        "/tables/orders",
        "/tables/orders?confirm=",
        "/tables/orders?confirm=order",
        "/tables/orders?confirm=ORDERS",
    ] {
        let r = drop_table(&app, path).await;
        assert_eq!(r.status(), 400, "{path}");
        assert_eq!(r.headers()["content-type"], "application/problem+json");
        let problem = json_body(r).await;
        assert_eq!(problem["code"], "confirm_required", "{path}");
        assert!(
            problem["detail"]
                .as_str()
                .unwrap()
                .contains("confirm=orders"),
            "{problem}"
        );
    }
    assert_eq!(app.count("orders", "2026-10-12").await, 2);
}

/// A token with `scopes` on `tables`.
async fn token(app: &TestApp, scopes: &[&str], tables: &[&str]) -> reqwest::Client {
    let request = json!({"name": "t", "scopes": scopes, "tables": tables});
    let r = app
        .client
        .post(app.url("/tokens"))
        .json(&request)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 201);
    client_with_token(json_body(r).await["token"].as_str().unwrap())
}

#[tokio::test]
async fn only_write_on_the_table_or_admin_may_drop_it() {
    let app = spawn_app().await;
    orders_with_two_days(&app).await;
    let path = app.url("/tables/orders?confirm=orders");
    let reader = token(&app, &["read"], &["*"]).await;
    let r = reader.delete(&path).send().await.unwrap();
    assert_eq!(r.status(), 403);
    assert_eq!(json_body(r).await["code"], "forbidden");
    let elsewhere = token(&app, &["write", "read"], &["sales_*"]).await;
    assert_eq!(elsewhere.delete(&path).send().await.unwrap().status(), 403);
    assert_eq!(app.count("orders", "2026-10-12").await, 2, "still there");

    let writer = token(&app, &["write"], &["ord*"]).await;
    assert_eq!(writer.delete(&path).send().await.unwrap().status(), 200);
    assert_eq!(app.get("/tables/orders").await.status(), 404);
}

#[tokio::test]
async fn the_ledger_keeps_a_dropped_tables_loads_marked_with_the_drop() {
    let app = spawn_app().await;
    orders_with_two_days(&app).await;
    assert_eq!(
        drop_table(&app, "/tables/orders?confirm=orders")
            .await
            .status(),
        200
    );

    let loads = json_body(app.get("/loads?table=orders").await).await;
    let loads = loads.as_array().unwrap();
    assert_eq!(loads.len(), 3, "{loads:?}");
    let drop = &loads[0];
    assert_eq!(
        (drop["mode"].as_str(), drop["status"].as_str()),
        (Some("drop"), Some("published"))
    );
    assert_eq!(drop["dropped_by"], Value::Null);
    assert_eq!(drop["token_name"], "admin");
    for load in &loads[1..] {
        assert_eq!(load["mode"], "replace");
        assert_eq!(load["dropped_by"], drop["load_id"], "{load}");
    }
    let one = json_body(
        app.get(&format!("/loads/{}", loads[1]["load_id"].as_str().unwrap()))
            .await,
    )
    .await;
    assert_eq!(one["dropped_by"], drop["load_id"]);
}

#[tokio::test]
async fn a_table_declared_again_after_its_drop_starts_empty_and_its_keys_write_again() {
    let app = spawn_app().await;
    orders_with_two_days(&app).await;
    assert_eq!(
        drop_table(&app, "/tables/orders?confirm=orders")
            .await
            .status(),
        200
    );

    app.declare_orders().await;
    let info = json_body(app.get("/tables/orders").await).await;
    assert_eq!(
        (info["partitions"].as_i64(), info["rows"].as_i64()),
        (Some(0), Some(0))
    );
    let history = json_body(app.get("/tables/orders/history").await).await;
    assert_eq!(history.as_array().unwrap().len(), 1, "{history}");
    let rejects = json_body(app.get("/rejects?table=orders").await).await;
    assert_eq!(rejects, json!([]));

    // The same keyed PUT as before the drop writes again: no replay.
    let r = app
        .client
        .put(app.url("/partitions/orders/2026-10-12"))
        .header("content-type", "application/x-ndjson")
        .header("idempotency-key", "day-12")
        .body(ndjson(&[order(1, "paid", "2026-10-12T01:00:00Z")]))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let receipt = json_body(r).await;
    assert_eq!(
        (
            receipt["replayed"].as_bool(),
            receipt["rows_written"].as_u64()
        ),
        (Some(false), Some(1))
    );
    assert_eq!(app.count("orders", "2026-10-12").await, 1);
}

#[tokio::test]
async fn puts_racing_a_drop_end_with_the_table_gone_or_holding_only_later_writes() {
    let app = spawn_app().await;
    app.declare_orders().await;
    for round in 0..4 {
        let days: Vec<String> = (10..14).map(|d| format!("2026-10-{d}")).collect();
        let puts = days.iter().map(|ds| {
            let rows: Vec<Value> = (1..=200)
                .map(|id| {
                    let mut row = order(id, "paid", "2026-10-12T01:00:00Z");
                    row["ds"] = json!(ds);
                    row
                })
                .collect();
            let path = format!("/partitions/orders/{ds}");
            let app = &app;
            async move { app.put_ndjson(&path, &rows).await }
        });
        let drop = drop_table(&app, "/tables/orders?confirm=orders");
        let (answers, dropped) = tokio::join!(futures::future::join_all(puts), drop);
        assert_eq!(dropped.status(), 200, "round {round}");
        for r in answers {
            let status = r.status().as_u16();
            assert!(
                [200, 404, 409].contains(&status),
                "round {round}: {status} {}",
                r.text().await.unwrap()
            );
        }
        // Consistent: what the registry says is what the table holds, and
        // no stage is left.
        let stages = "select count(*) from pg_class c join pg_namespace n on n.oid = c.relnamespace
                       where n.nspname = 'idem_staging'";
        assert_eq!(scalar(&app, stages).await, 0, "round {round}");
        if app.get("/tables/orders").await.status() == 200 {
            let info = json_body(app.get("/tables/orders").await).await;
            let rows = scalar(&app, "select count(*) from idem_data.orders").await;
            assert_eq!(info["rows"].as_i64(), Some(rows), "round {round}");
            assert_eq!(
                info["partitions"].as_i64(),
                Some(rows / 200),
                "round {round}"
            );
            let r = drop_table(&app, "/tables/orders?confirm=orders").await;
            assert_eq!(r.status(), 200);
        }
        app.declare_orders().await;
    }
}
