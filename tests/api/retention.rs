//! Retention: partitions past their table's `"retention"` dropped by expire
//! rounds (each drop a ledger row of mode `expire`), writes to them refused
//! with `422 partition_expired`, and a declaration's dry run telling what a
//! new retention would drop.

use chrono::{Duration, DurationRound, NaiveDateTime, Utc};
use reqwest::Method;
use serde_json::{json, Value};

use crate::helpers::*;
use crate::support::*;

const HOURLY: &str = r#"{"columns": {"id": "bigint", "at": "timestamptz", "kind": "text"},
  "partition_by": "at", "grain": "hour", "retention": "PT72H"}"#;

fn daily(retention: Option<&str>) -> String {
    let retention = retention.map_or(String::new(), |r| format!(r#", "retention": "{r}""#));
    format!(
        r#"{{"columns": {{"id": "bigint", "ds": "date", "kind": "text"}}, "primary_key": ["id"]{retention}}}"#
    )
}

/// The day `days` from today (UTC), as a label.
fn day(days: i64) -> String {
    (Utc::now().date_naive() + Duration::days(days)).to_string()
}

/// Asserts a problem answer of `status` and `code`; returns it.
async fn assert_problem(r: reqwest::Response, status: u16, code: &str) -> Value {
    let answered = r.status();
    let problem = json_body(r).await;
    assert_eq!(
        (answered.as_u16(), &problem["code"]),
        (status, &json!(code)),
        "{problem}"
    );
    problem
}

async fn expire_ledger(app: &TestApp, table: &str) -> Vec<(String, i64, String)> {
    sqlx::query_as(
        "select ds::text, rows_written, content_sha256 from idem.loads
          where table_name = $1 and mode = 'expire' order by ds",
    )
    .bind(table)
    .fetch_all(&app.db)
    .await
    .unwrap()
}

async fn partition_labels(app: &TestApp, table: &str) -> Vec<String> {
    sqlx::query_scalar("select ds from idem.partitions where table_name = $1 order by ds")
        .bind(table)
        .fetch_all(&app.db)
        .await
        .unwrap()
}

#[tokio::test]
async fn an_hourly_table_keeps_72_partitions_through_a_week_each_drop_in_the_ledger() {
    let app = spawn_app().await;
    let r = app.declare("clicks", HOURLY).await;
    assert_eq!(r.status(), 201, "{}", r.text().await.unwrap());
    // A week of hours from tomorrow, each loaded when it has ended and an
    // expire round run then: the clock of the round is the hour's end.
    let first = (Utc::now().naive_utc() + Duration::days(1))
        .duration_trunc(Duration::hours(1))
        .unwrap();
    let mut hashes = std::collections::HashMap::new();
    for h in 0..168 {
        let hour: NaiveDateTime = first + Duration::hours(h);
        let label = hour.format("%Y-%m-%dT%H").to_string();
        let row =
            json!({"id": h, "at": hour.format("%Y-%m-%dT%H:10:00Z").to_string(), "kind": "c"});
        let r = app
            .put_ndjson(&format!("/partitions/clicks/{label}"), &[row])
            .await;
        assert_eq!(r.status(), 200, "{label}");
        let body: Value = r.json().await.unwrap();
        hashes.insert(label, body["content_sha256"].as_str().unwrap().to_string());
        let ended = hour + Duration::hours(1) + Duration::minutes(5);
        let round = app
            .state
            .pipeline()
            .expire_partitions_at(ended)
            .await
            .unwrap();
        assert!(round.is_some(), "no other round runs");
    }
    let kept = partition_labels(&app, "clicks").await;
    assert_eq!(kept.len(), 72, "{kept:?}");
    let last = first + Duration::hours(167);
    assert_eq!(
        kept[0],
        (last - Duration::hours(71))
            .format("%Y-%m-%dT%H")
            .to_string()
    );
    // Each dropped hour is one ledger row, with the rows and content hash
    // it had; nothing kept has one.
    let expired = expire_ledger(&app, "clicks").await;
    assert_eq!(expired.len(), 96);
    for (label, rows, hash) in &expired {
        assert!(!kept.contains(label), "{label} kept and expired");
        assert_eq!(*rows, 1, "{label}");
        assert_eq!(hash, &hashes[label], "{label}");
    }
    let metrics = app.get("/metrics").await.text().await.unwrap();
    assert!(
        metrics.contains(r#"idem_partitions_expired_total{table="clicks"} 96"#),
        "{metrics}"
    );
    // The partitions' own tables went with them.
    let tables: i64 = sqlx::query_scalar(
        "select count(*) from pg_inherits i join pg_class c on c.oid = i.inhparent
          where c.relname = 'clicks'",
    )
    .fetch_one(&app.db)
    .await
    .unwrap();
    assert_eq!(tables, 72);
}

#[tokio::test]
async fn a_write_to_a_period_past_retention_is_refused_and_changes_nothing() {
    let app = spawn_app().await;
    let r = app.declare("orders", &daily(Some("P7D"))).await;
    assert_eq!(r.status(), 201, "{}", r.text().await.unwrap());
    let old = day(-30);
    let row = |id: i64, ds: &str| json!({"id": id, "ds": ds, "kind": "k"});

    let r = app
        .put_ndjson(&format!("/partitions/orders/{old}"), &[row(1, &old)])
        .await;
    let problem = assert_problem(r, 422, "partition_expired").await;
    let oldest = day(-7);
    assert!(
        problem["detail"].as_str().unwrap().contains(&oldest),
        "the oldest partition kept is named: {problem}"
    );
    // A small POST (batched) and a large one (written alone) alike; one
    // old row refuses the whole body.
    let mut large: Vec<Value> = (10..4000).map(|id| row(id, &day(0))).collect();
    large.push(row(4, &old));
    for (key, rows) in [("small", vec![row(2, &old)]), ("large", large)] {
        let r = app
            .send_keyed(Method::POST, "/rows?table=orders", key, &rows)
            .await;
        assert_problem(r, 422, "partition_expired").await;
    }
    let range = format!("/partitions/orders?from={}&to={}", day(-10), day(-1));
    let r = app
        .send_keyed(Method::PUT, &range, "range-old", &[row(5, &day(-2))])
        .await;
    assert_problem(r, 422, "partition_expired").await;
    let r = app
        .client
        .post(app.url("/loads"))
        .header("idempotency-key", "open-old")
        .json(&json!({"table": "orders", "target": {"partitions": [old]}}))
        .send()
        .await
        .unwrap();
    assert_problem(r, 422, "partition_expired").await;
    assert!(partition_labels(&app, "orders").await.is_empty());
    // Within retention, writes go through.
    let r = app
        .put_ndjson(&format!("/partitions/orders/{oldest}"), &[row(6, &oldest)])
        .await;
    assert_eq!(r.status(), 200);
    let table: Value = app.get("/tables/orders").await.json().await.unwrap();
    assert_eq!(table["retention"], "P7D");
    assert_eq!(table["oldest_kept"], oldest.as_str());
}

#[tokio::test]
async fn a_dry_run_names_what_a_new_retention_would_drop_and_changes_nothing() {
    let app = spawn_app().await;
    let r = app.declare("orders", &daily(None)).await;
    assert_eq!(r.status(), 201);
    for days in [-10, -5, 0] {
        let ds = day(days);
        let r = app
            .put_ndjson(
                &format!("/partitions/orders/{ds}"),
                &[json!({"id": days, "ds": ds})],
            )
            .await;
        assert_eq!(r.status(), 200);
    }
    let dry = app
        .client
        .put(app.url("/tables/orders?dry_run=true"))
        .header("content-type", "application/json")
        .body(daily(Some("P7D")))
        .send()
        .await
        .unwrap();
    assert_eq!(dry.status(), 200);
    let dry: Value = dry.json().await.unwrap();
    assert_eq!(dry["would_expire"], json!([day(-10)]), "{dry}");
    assert_eq!(
        dry["changes"],
        json!([{"change": "set_retention", "retention": "P7D"}])
    );
    let table: Value = app.get("/tables/orders").await.json().await.unwrap();
    assert!(table.get("retention").is_none(), "{table}");
    assert_eq!(partition_labels(&app, "orders").await.len(), 3);

    // Declared, the next round drops that day alone.
    let r = app.declare("orders", &daily(Some("P7D"))).await;
    assert_eq!(r.status(), 200);
    assert_eq!(app.expire_now().await.len(), 1);
    assert_eq!(partition_labels(&app, "orders").await, [day(-5), day(0)]);
    let expired = expire_ledger(&app, "orders").await;
    assert_eq!(expired.len(), 1);
    assert_eq!(expired[0].0, day(-10));
    // A load of mode expire, listed like any other, made by idem itself.
    let loads = json_body(app.get("/loads?table=orders").await).await;
    let expire = loads
        .as_array()
        .unwrap()
        .iter()
        .find(|l| l["mode"] == "expire")
        .unwrap_or_else(|| panic!("{loads}"));
    assert_eq!(expire["ds"], day(-10).as_str());
    assert_eq!(expire["token_name"], "idem");
}

#[tokio::test]
async fn a_retention_must_be_a_whole_number_of_the_tables_periods() {
    let app = spawn_app().await;
    for (retention, status) in [("PT36H", 400), ("P1.5D", 400), ("P0D", 400), ("PT48H", 201)] {
        let r = app.declare("orders", &daily(Some(retention))).await;
        assert_eq!(
            r.status(),
            status,
            "{retention}: {}",
            r.text().await.unwrap()
        );
    }
    let plain = r#"{"columns": {"id": "bigint"}, "partition_by": null, "retention": "P7D"}"#;
    assert_eq!(app.declare("plain", plain).await.status(), 400);
}
