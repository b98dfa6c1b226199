//! Quarantined rows: replayed by the table's rules as they are now, and a
//! table nobody declared is not created by a write that stores no row.

use serde_json::{json, Value};

use crate::helpers::*;
use crate::support::*;

const EVENTS: &str = QUARANTINED_EVENTS;

async fn replay(app: &TestApp, key: &str) -> Value {
    let r = app
        .client
        .post(app.url("/rejects/replay?table=events"))
        .header("idempotency-key", key)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    json_body(r).await
}

#[tokio::test]
async fn a_reject_for_an_unknown_field_is_replayed_once_the_table_evolves() {
    let app = spawn_app().await;
    assert_eq!(app.declare("events", EVENTS).await.status(), 201);
    let rows = [
        json!({"id": 1, "ds": "2026-10-12", "qty": 1}),
        json!({"id": 2, "ds": "2026-10-12", "qty": 2, "colour": "red"}),
        json!({"id": 3, "ds": "2026-10-12", "qty": "many"}),
    ];
    let receipt = json_body(app.post_rows("table=events", Some("p1"), &rows).await).await;
    assert_eq!(receipt["rejected"], 2, "{receipt}");

    let evolving = EVENTS.replace(r#""bad_rows""#, r#""schema": "evolve", "bad_rows""#);
    assert_eq!(app.declare("events", &evolving).await.status(), 200);
    let replayed = replay(&app, "r1").await;
    assert_eq!(
        (
            replayed["tried"].as_u64(),
            replayed["rows_replayed"].as_u64(),
            replayed["still_pending"].as_u64()
        ),
        (Some(2), Some(1), Some(1)),
        "{replayed}"
    );
    let stored: Vec<(i64, Option<String>)> =
        sqlx::query_as("select id, colour from idem_data.events order by id")
            .fetch_all(&app.db)
            .await
            .unwrap();
    assert_eq!(stored, [(1, None), (2, Some("red".to_string()))]);
    let history = json_body(app.get("/tables/events/history").await).await;
    let last = history.as_array().unwrap().last().unwrap().clone();
    assert_eq!(last["load_id"], replayed["load_id"], "{history}");
}

#[tokio::test]
async fn a_quarantined_post_whose_every_row_is_bad_creates_no_table() {
    let app = spawn_app().await;
    // Neither row gives its partition value.
    let bad = [json!({"n": 1}), json!({"n": 2})];
    let r = app
        .post_rows("table=fresh&bad_rows=quarantine", Some("p1"), &bad)
        .await;
    assert_eq!(r.status(), 422);
    let body = json_body(r).await;
    assert_eq!(body["code"], "bad_rows", "{body}");
    assert_eq!(body["rejected"], 2, "{body}");
    assert_eq!(app.get("/tables/fresh").await.status(), 404);
    let (tables, catalog): (i64, i64) = sqlx::query_as(
        "select (select count(*) from pg_tables where schemaname in ('idem_data', 'idem_parts')),
                (select count(*) from idem.tables)",
    )
    .fetch_one(&app.db)
    .await
    .unwrap();
    assert_eq!((tables, catalog), (0, 0));

    // One good row: the table is made, the bad row kept.
    let mixed = [json!({"n": 1, "ds": "2026-10-12"}), json!({"n": 2})];
    let r = app
        .post_rows("table=fresh&bad_rows=quarantine", Some("p2"), &mixed)
        .await;
    assert_eq!(r.status(), 200, "{}", r.text().await.unwrap());
    let receipt = json_body(
        app.post_rows("table=fresh&bad_rows=quarantine", Some("p2"), &mixed)
            .await,
    )
    .await;
    assert_eq!(
        (receipt["inserted"].as_u64(), receipt["rejected"].as_u64()),
        (Some(1), Some(1)),
        "{receipt}"
    );
    assert_eq!(app.count("fresh", "2026-10-12").await, 1);
}

/// How many tables idem holds: its data and partition tables in Postgres,
/// and its catalog's rows.
async fn tables_held(app: &TestApp) -> (i64, i64) {
    sqlx::query_as(
        "select (select count(*) from pg_tables where schemaname in ('idem_data', 'idem_parts')),
                (select count(*) from idem.tables)",
    )
    .fetch_one(&app.db)
    .await
    .unwrap()
}

#[tokio::test]
async fn a_quarantined_put_whose_every_row_is_bad_creates_no_table() {
    let app = spawn_app().await;
    // Both rows are of another day than the one they are sent for.
    let bad = [
        json!({"n": 1, "ds": "2026-10-13"}),
        json!({"n": 2, "ds": "2026-10-14"}),
    ];
    let r = app
        .put_ndjson("/partitions/fresh/2026-10-12?bad_rows=quarantine", &bad)
        .await;
    assert_eq!(r.status(), 422);
    let body = json_body(r).await;
    assert_eq!(body["code"], "bad_rows", "{body}");
    assert_eq!(body["rejected"], 2, "{body}");
    let lines: Vec<u64> = body["errors"]
        .as_array()
        .unwrap_or_else(|| panic!("the bad rows listed: {body}"))
        .iter()
        .filter_map(|e| e["line"].as_u64())
        .collect();
    assert_eq!(lines, [1, 2], "{body}");
    assert_eq!(app.get("/tables/fresh").await.status(), 404);
    assert_eq!(tables_held(&app).await, (0, 0));

    // One good row: the table and the day are made, the bad row kept.
    let mixed = [
        json!({"n": 1, "ds": "2026-10-12"}),
        json!({"n": 2, "ds": "2026-10-13"}),
    ];
    let r = app
        .put_ndjson("/partitions/fresh/2026-10-12?bad_rows=quarantine", &mixed)
        .await;
    assert_eq!(r.status(), 200, "{}", r.text().await.unwrap());
    let receipt = json_body(r).await;
    assert_eq!(
        (
            receipt["rows_written"].as_u64(),
            receipt["rejected"].as_u64()
        ),
        (Some(1), Some(1)),
        "{receipt}"
    );
    assert_eq!(app.count("fresh", "2026-10-12").await, 1);
}

#[tokio::test]
async fn an_empty_post_to_an_undeclared_table_creates_no_table() {
    let app = spawn_app().await;
    let r = app
        .client
        .post(app.url("/rows?table=fresh"))
        .header("content-type", "application/x-ndjson")
        .header("idempotency-key", "p1")
        .body("")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200, "{}", r.text().await.unwrap());
    assert_eq!(app.get("/tables/fresh").await.status(), 404);
    assert_eq!(tables_held(&app).await, (0, 0));
}

/// A PUT stores a day, and an empty day is one: the table is made, with
/// only its partition column (later writes evolve it).
#[tokio::test]
async fn an_empty_put_to_an_undeclared_table_makes_the_table_and_an_empty_day() {
    let app = spawn_app().await;
    let day = "/partitions/fresh/2026-10-12";
    let r = app.put(day, "application/x-ndjson", "").await;
    assert_eq!(r.status(), 200, "{}", r.text().await.unwrap());
    let receipt = json_body(r).await;
    assert_eq!(
        (receipt["row_count"].as_u64(), receipt["changed"].as_bool()),
        (Some(0), Some(true)),
        "{receipt}"
    );
    let r = app.get(day).await;
    assert_eq!(r.status(), 200);
    assert_eq!(r.text().await.unwrap(), "");
    let table = json_body(app.get("/tables/fresh").await).await;
    assert_eq!(
        table["columns"],
        json!([{"name": "ds", "type": "date", "nullable": false}])
    );
    assert_eq!(table["inferred"], true, "{table}");
}
