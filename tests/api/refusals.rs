//! Requests idem refuses, and what a refusal leaves behind: nothing.

use serde_json::json;

use crate::helpers::*;
use crate::support::*;

#[tokio::test]
async fn a_refused_first_write_to_an_undeclared_table_leaves_no_table() {
    let app = spawn_app().await;
    // The second row names another day than the one it is sent to.
    let body = ndjson(&[json!({"n": 1}), json!({"n": 2, "ds": "2026-10-13"})]);
    let put = app
        .put("/partitions/fresh/2026-10-12", "application/x-ndjson", body)
        .await;
    assert_eq!(put.status(), 422);
    assert_eq!(app.get("/tables/fresh").await.status(), 404);

    let post = app
        .client
        .post(app.url("/rows?table=fresh"))
        .header("content-type", "application/x-ndjson")
        .header("idempotency-key", "first")
        .body(ndjson(&[
            json!({"n": 1, "ds": "2026-10-12"}),
            json!({"n": 2}),
        ]))
        .send()
        .await
        .unwrap();
    assert_eq!(post.status(), 422);
    assert_eq!(app.get("/tables/fresh").await.status(), 404);
    let tables: i64 = sqlx::query_scalar(
        "select count(*) from pg_tables where schemaname in ('idem_data', 'idem_parts')",
    )
    .fetch_one(&app.db)
    .await
    .unwrap();
    assert_eq!(tables, 0);

    let good = ndjson(&[json!({"n": 1})]);
    let put = app
        .put("/partitions/fresh/2026-10-12", "application/x-ndjson", good)
        .await;
    assert_eq!(put.status(), 200);
    assert_eq!(json_body(app.get("/tables/fresh").await).await["rows"], 1);
}

#[tokio::test]
async fn postgres_own_namespaces_and_year_zero_are_refused_with_400() {
    let app = spawn_app().await;
    for table in ["pg_catalog", "pg_x", "information_schema"] {
        let r = app.declare(table, ORDERS).await;
        assert_eq!(r.status(), 400, "{table}");
        assert_eq!(json_body(r).await["code"], "invalid_name");
        let r = app
            .put(
                &format!("/partitions/{table}/2026-10-12"),
                "application/x-ndjson",
                "{\"n\":1}\n",
            )
            .await;
        assert_eq!(r.status(), 400, "{table}");
    }
    app.declare_orders().await;
    let r = app
        .put_ndjson(
            "/partitions/orders/0000-01-01",
            &[order(1, "paid", "2026-10-12T01:00:00Z")],
        )
        .await;
    assert_eq!(r.status(), 400);
    assert_eq!(json_body(r).await["code"], "invalid_ds");
}
