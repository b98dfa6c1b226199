//! Partitions of an hour or a month: the same swap, hash, merge and key
//! guarantees as a day's, per partition of the table's grain.

use serde_json::{json, Value};

use crate::helpers::*;
use crate::support::*;

const EVENTS: &str = r#"{"columns": {"id": "bigint", "event_time": "timestamptz", "kind": "text"},
  "partition_by": "event_time", "grain": "hour", "primary_key": ["id"]}"#;

fn hour_rows(hour: u32, ids: std::ops::Range<i64>, kind: &str) -> Vec<Value> {
    ids.map(|id| {
        json!({"id": id, "event_time": format!("2026-10-12T{hour:02}:{:02}:00Z", id % 60), "kind": kind})
    })
    .collect()
}

async fn etags(app: &TestApp, table: &str) -> Vec<(String, String)> {
    let list: Vec<Value> =
        serde_json::from_value(json_body(app.get(&format!("/partitions/{table}")).await).await)
            .unwrap();
    list.iter()
        .map(|p| {
            (
                p["ds"].as_str().unwrap().to_string(),
                p["content_sha256"].as_str().unwrap().to_string(),
            )
        })
        .collect()
}

#[tokio::test]
async fn twenty_four_hourly_puts_build_a_day_and_a_second_put_of_one_hour_touches_only_it() {
    let app = spawn_app().await;
    let r = app.declare("events", EVENTS).await;
    assert_eq!(r.status(), 201, "{}", r.text().await.unwrap());
    for hour in 0..24 {
        let path = format!("/partitions/events/2026-10-12T{hour:02}");
        let r = app.put_ndjson(&path, &hour_rows(hour, 0..10, "a")).await;
        assert_eq!(r.status(), 200, "{path}: {}", r.text().await.unwrap());
    }
    let before = etags(&app, "events").await;
    assert_eq!(before.len(), 24);
    assert_eq!(before[13].0, "2026-10-12T13");
    let listed = json_body(
        app.get("/partitions/events?limit=1&cursor=2026-10-12T12")
            .await,
    )
    .await;
    assert_eq!(listed[0]["from"], "2026-10-12T13:00:00Z");
    assert_eq!(listed[0]["to"], "2026-10-12T14:00:00Z");
    let day_rows: i64 = sqlx::query_scalar("select count(*) from idem_data.events")
        .fetch_one(&app.db)
        .await
        .unwrap();
    assert_eq!(day_rows, 240);

    // Hour 13 again with other rows: only hour 13 changes.
    let r = app
        .put_ndjson(
            "/partitions/events/2026-10-12T13",
            &hour_rows(13, 5..8, "b"),
        )
        .await;
    assert_eq!(json_body(r).await["changed"], true);
    let after = etags(&app, "events").await;
    for (hour, (was, now)) in before.iter().zip(&after).enumerate() {
        assert_eq!(was == now, hour != 13, "hour {hour}");
    }
    let rows = app.rows("events", "2026-10-12T13").await;
    assert_eq!(rows.len(), 3);
    assert!(rows.iter().all(|r| r["kind"] == "b"));
    // The same hour again changes nothing; a row of another hour is refused.
    let again = app
        .put_ndjson(
            "/partitions/events/2026-10-12T13",
            &hour_rows(13, 5..8, "b"),
        )
        .await;
    assert_eq!(json_body(again).await["changed"], false);
    let outside = app
        .put_ndjson(
            "/partitions/events/2026-10-12T13",
            &hour_rows(14, 0..1, "c"),
        )
        .await;
    assert_eq!(outside.status(), 422);
    let day_form = app
        .put_ndjson("/partitions/events/2026-10-12", &hour_rows(13, 0..1, "c"))
        .await;
    assert_eq!(day_form.status(), 400);
    assert_eq!(json_body(day_form).await["code"], "invalid_ds");
}

#[tokio::test]
async fn posted_rows_go_to_their_hours_and_merge_by_key_within_each() {
    let app = spawn_app().await;
    app.declare("events", EVENTS).await;
    let mut rows = hour_rows(9, 0..3, "a");
    rows.extend(hour_rows(10, 0..2, "a"));
    let r = app.post_rows("table=events", Some("hours"), &rows).await;
    assert_eq!(r.status(), 200);
    let receipt = json_body(r).await;
    let labels: Vec<&str> = receipt["partitions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["ds"].as_str().unwrap())
        .collect();
    assert_eq!(labels, ["2026-10-12T09", "2026-10-12T10"]);
    // Key 1 within hour 9 is replaced, and the hour's ETag stays the hash of
    // what it holds.
    let r = app
        .post_rows("table=events", Some("again"), &hour_rows(9, 1..2, "z"))
        .await;
    assert_eq!(json_body(r).await["updated"], 1);
    let path = "/partitions/events/2026-10-12T09";
    let text = app.put_back_unchanged(path).await;
    assert_eq!(text.lines().count(), 3);
}

#[tokio::test]
async fn a_monthly_table_holds_a_month_of_days_per_partition() {
    let app = spawn_app().await;
    let r = app
        .declare(
            "sales",
            r#"{"columns": {"sale_id": "bigint", "ds": "date", "amount": "numeric"},
                "grain": "month", "primary_key": ["sale_id"]}"#,
        )
        .await;
    assert_eq!(r.status(), 201);
    let rows = vec![
        json!({"sale_id": 1, "ds": "2026-10-01", "amount": "1.50"}),
        json!({"sale_id": 2, "ds": "2026-10-31", "amount": "2"}),
    ];
    let r = app.put_ndjson("/partitions/sales/2026-10", &rows).await;
    assert_eq!(r.status(), 200, "{}", r.text().await.unwrap());
    let stored = app.get("/partitions/sales/2026-10").await;
    let text = stored.text().await.unwrap();
    let again = app
        .put("/partitions/sales/2026-10", "application/x-ndjson", text)
        .await;
    assert_eq!(json_body(again).await["changed"], false);
    let november = app
        .put_ndjson(
            "/partitions/sales/2026-10",
            &[json!({"sale_id": 3, "ds": "2026-11-01"})],
        )
        .await;
    assert_eq!(november.status(), 422);
    assert_eq!(etags(&app, "sales").await[0].0, "2026-10");
}

#[tokio::test]
async fn grains_are_declared_once_and_fit_their_column() {
    let app = spawn_app().await;
    let date_by_hour = app
        .declare(
            "bad",
            r#"{"columns": {"id": "bigint", "ds": "date"}, "grain": "hour"}"#,
        )
        .await;
    assert_eq!(date_by_hour.status(), 400);
    let unknown = app
        .declare(
            "bad",
            r#"{"columns": {"id": "bigint", "ds": "date"}, "grain": "week"}"#,
        )
        .await;
    assert_eq!(unknown.status(), 400);
    app.declare("events", EVENTS).await;
    let regrained = app
        .declare("events", &EVENTS.replace("\"hour\"", "\"day\""))
        .await;
    assert_eq!(regrained.status(), 409);
    let table = json_body(app.get("/tables/events").await).await;
    assert_eq!(table["grain"], "hour");
}
