//! Names a column can never have (Postgres's system columns) and fields
//! that are no column at all (a tombstone's `_deleted` without a key):
//! refused with a 4xx that says why, on every way a column comes to be.

use serde_json::{json, Value};

use crate::helpers::*;
use crate::support::*;

const SYSTEM_COLUMNS: [&str; 6] = ["xmin", "xmax", "cmin", "cmax", "ctid", "tableoid"];

const EVOLVING: &str = r#"{"columns": {"id": "bigint", "ds": "date"}, "schema": "evolve"}"#;

async fn post(
    app: &TestApp,
    query: &str,
    key: &str,
    content_type: &str,
    body: String,
) -> reqwest::Response {
    app.client
        .post(app.url(&format!("/rows?{query}")))
        .header("content-type", content_type)
        .header("idempotency-key", key)
        .body(body)
        .send()
        .await
        .unwrap()
}

/// The answer is `400 invalid_name` and its detail names the column and
/// says that Postgres keeps the name for itself.
async fn assert_refused_name(r: reqwest::Response, name: &str, route: &str) {
    assert_eq!(r.status(), 400, "{route} {name}");
    let body = json_body(r).await;
    assert_eq!(body["code"], "invalid_name", "{route} {name}: {body}");
    let detail = body["detail"].as_str().unwrap();
    assert!(
        detail.contains(name) && detail.contains("system column"),
        "{route} {name}: {detail}"
    );
}

#[tokio::test]
async fn postgres_system_column_names_are_invalid_names_on_every_route_that_adds_a_column() {
    let app = spawn_app().await;
    assert_eq!(app.declare("grows", EVOLVING).await.status(), 201);
    for name in SYSTEM_COLUMNS {
        let declared = format!(r#"{{"columns": {{"id": "bigint", "{name}": "text"}}}}"#);
        assert_refused_name(
            app.declare("declared", &declared).await,
            name,
            "PUT /tables",
        )
        .await;

        let changed = format!(
            r#"{{"columns": {{"id": "bigint", "ds": "date", "{name}": "text"}}, "schema": "evolve"}}"#
        );
        assert_refused_name(
            app.declare("grows", &changed).await,
            name,
            "PUT /tables again",
        )
        .await;

        let row = ndjson(&[json!({"id": 1, name: 5})]);
        let put = app
            .put(
                "/partitions/fresh/2026-10-12",
                "application/x-ndjson",
                row.clone(),
            )
            .await;
        assert_refused_name(put, name, "PUT inferred").await;
        let csv = format!("id,{name}\r\n1,5\r\n");
        let put = app
            .put("/partitions/fresh/2026-10-12", "text/csv", csv.clone())
            .await;
        assert_refused_name(put, name, "PUT inferred csv").await;
        let row_with_ds = ndjson(&[json!({"id": 1, "ds": "2026-10-12", name: 5})]);
        let posted = post(
            &app,
            "table=fresh",
            name,
            "application/x-ndjson",
            row_with_ds.clone(),
        )
        .await;
        assert_refused_name(posted, name, "POST inferred").await;

        let posted = post(
            &app,
            "table=grows",
            name,
            "application/x-ndjson",
            row_with_ds,
        )
        .await;
        assert_refused_name(posted, name, "POST evolve").await;
        let put = app
            .put("/partitions/grows/2026-10-12", "text/csv", csv)
            .await;
        assert_refused_name(put, name, "PUT evolve csv").await;
    }
    assert_eq!(app.get("/tables/fresh").await.status(), 404);
    assert_eq!(app.get("/tables/declared").await.status(), 404);
    let grows = json_body(app.get("/tables/grows").await).await;
    assert_eq!(grows["columns"].as_array().unwrap().len(), 2, "{grows}");
}

fn first_error(body: &Value) -> (&str, &str) {
    let error = &body["errors"][0];
    (
        error["column"].as_str().unwrap_or_default(),
        error["message"].as_str().unwrap_or_default(),
    )
}

#[tokio::test]
async fn a_tombstone_sent_to_a_table_without_a_key_is_told_that_tombstones_need_one() {
    let app = spawn_app().await;
    let keyless = r#"{"columns": {"id": "bigint", "ds": "date"}}"#;
    assert_eq!(app.declare("events", keyless).await.status(), 201);
    assert_eq!(app.declare("grows", EVOLVING).await.status(), 201);
    let tombstone = ndjson(&[json!({"id": 1, "ds": "2026-10-12", "_deleted": true})]);
    let csv = "id,ds,_deleted\r\n1,2026-10-12,true\r\n".to_string();
    // A CSV header naming a field no column has refuses the body whole
    // (`malformed_body`).
    let cases = [
        (
            "table=events",
            "application/x-ndjson",
            tombstone.clone(),
            "bad_rows",
        ),
        (
            "table=grows",
            "application/x-ndjson",
            tombstone.clone(),
            "bad_rows",
        ),
        ("table=fresh", "application/x-ndjson", tombstone, "bad_rows"),
        ("table=events", "text/csv", csv.clone(), "malformed_body"),
        ("table=fresh", "text/csv", csv, "malformed_body"),
    ];
    for (i, (query, content_type, body, code)) in cases.into_iter().enumerate() {
        let r = post(&app, query, &format!("k{i}"), content_type, body).await;
        assert_eq!(r.status(), 422, "{query} {content_type}");
        let body = json_body(r).await;
        assert_eq!(body["code"], code, "{query} {content_type}: {body}");
        let (column, message) = first_error(&body);
        assert_eq!(column, "_deleted", "{query} {content_type}: {body}");
        assert!(
            message.contains("tombstone") && message.contains("primary key"),
            "{query} {content_type}: {message}"
        );
    }
    assert_eq!(app.get("/tables/fresh").await.status(), 404);
}
