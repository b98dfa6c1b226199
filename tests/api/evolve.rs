//! `schema: evolve`: new fields become columns and too-wide values widen
//! their columns, once, however many writers bring them at once.

use std::collections::BTreeMap;

use serde_json::{json, Value};

use crate::helpers::*;
use crate::support::*;

const EVENTS: &str = r#"{"columns": {"id": "bigint", "ds": "date", "qty": "integer", "seen": "date"},
  "primary_key": ["id"], "schema": "evolve"}"#;

async fn columns(app: &TestApp, table: &str) -> BTreeMap<String, String> {
    app.column_types(table).await.into_iter().collect()
}

#[tokio::test]
async fn twenty_writers_bringing_new_fields_at_once_all_succeed_and_each_field_is_one_column() {
    let app = spawn_app().await;
    assert_eq!(app.declare("events", EVENTS).await.status(), 201);
    let posts = (0..20i64).map(|i| {
        let app = &app;
        async move {
            // Every writer brings `shared` and a field of its own; every
            // other one also `half`.
            let rows: Vec<Value> = (0..5i64)
                .map(|k| {
                    let mut row = json!({"id": i * 10 + k, "ds": "2026-10-12", "qty": k,
                                         "shared": i * 100 + k});
                    row[format!("own_{i}")] = json!(format!("w{i}r{k}"));
                    if i % 2 == 0 {
                        row["half"] = json!(i % 4 == 0);
                    }
                    row
                })
                .collect();
            let r = app
                .post_rows("table=events", Some(&format!("e{i}")), &rows)
                .await;
            let status = r.status();
            (status, r.text().await.unwrap())
        }
    });
    for (status, body) in futures::future::join_all(posts).await {
        assert_eq!(status, 200, "{body}");
    }
    let columns = columns(&app, "events").await;
    assert_eq!(columns["shared"], "bigint");
    assert_eq!(columns["half"], "boolean");
    for i in 0..20 {
        assert_eq!(columns[&format!("own_{i}")], "text");
    }
    assert_eq!(columns.len(), 4 + 2 + 20, "{columns:?}");

    // Every value is stored.
    for i in 0..20i64 {
        let sql = format!(
            "select id, shared, own_{i} from idem_data.events where id / 10 = $1 order by id"
        );
        let rows: Vec<(i64, i64, String)> = sqlx::query_as(&sql)
            .bind(i)
            .fetch_all(&app.db)
            .await
            .unwrap();
        let expected: Vec<(i64, i64, String)> = (0..5)
            .map(|k| (i * 10 + k, i * 100 + k, format!("w{i}r{k}")))
            .collect();
        assert_eq!(rows, expected);
    }
    let halves: i64 =
        sqlx::query_scalar("select count(*) from idem_data.events where half is not null")
            .fetch_one(&app.db)
            .await
            .unwrap();
    assert_eq!(halves, 50);

    // The history has each added column exactly once, with the load that
    // brought it.
    let history = json_body(app.get("/tables/events/history").await).await;
    let versions = history.as_array().unwrap();
    assert_eq!(versions[0]["version"], 1);
    let mut added = Vec::new();
    for version in &versions[1..] {
        assert!(version["load_id"].is_string(), "{version}");
        for change in version["changes"].as_array().unwrap() {
            assert_eq!(change["change"], "add_column");
            added.push(change["column"].as_str().unwrap().to_string());
        }
    }
    added.sort();
    let mut expected: Vec<String> = (0..20).map(|i| format!("own_{i}")).collect();
    expected.extend(["half".to_string(), "shared".to_string()]);
    expected.sort();
    assert_eq!(added, expected);
    assert!(versions.len() <= 21, "changes merge: {}", versions.len());
}

#[tokio::test]
async fn a_value_too_wide_widens_its_column_where_that_is_safe() {
    let app = spawn_app().await;
    assert_eq!(app.declare("events", EVENTS).await.status(), 201);
    let rows = [
        json!({"id": 1, "ds": "2026-10-12", "qty": 5_000_000_000i64, "seen": "2026-10-11"}),
        json!({"id": 2, "ds": "2026-10-12", "qty": 1, "seen": "2026-10-11T08:30:00Z"}),
    ];
    let r = app.post_rows("table=events", Some("w1"), &rows).await;
    assert_eq!(r.status(), 200, "{}", r.text().await.unwrap());
    let widened = columns(&app, "events").await;
    assert_eq!(
        (widened["qty"].as_str(), widened["seen"].as_str()),
        ("bigint", "timestamptz")
    );
    let r = app
        .post_rows(
            "table=events",
            Some("w2"),
            &[json!({"id": 3, "ds": "2026-10-12", "qty": 2.5})],
        )
        .await;
    assert_eq!(r.status(), 200);
    assert_eq!(columns(&app, "events").await["qty"], "numeric");
    let qty: Vec<String> = sqlx::query_scalar("select qty::text from idem_data.events order by id")
        .fetch_all(&app.db)
        .await
        .unwrap();
    assert_eq!(qty, ["5000000000", "1", "2.5"]);

    // A key, or a value no widening holds, is still a bad row.
    let bad = [
        json!({"id": "x", "ds": "2026-10-12"}),
        json!({"id": 9, "ds": "2026-10-12", "qty": "lots"}),
    ];
    let r = app.post_rows("table=events", Some("w3"), &bad).await;
    assert_eq!(r.status(), 422);
    let problem = json_body(r).await;
    let named: Vec<&str> = problem["errors"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["column"].as_str().unwrap())
        .collect();
    assert_eq!(named, ["id", "qty"], "{problem}");
}

#[tokio::test]
async fn a_table_nobody_declared_grows_and_keeps_its_etag_equal_to_its_rows() {
    let app = spawn_app().await;
    let r = app
        .put_ndjson("/partitions/feed/2026-10-12", &[json!({"a": 1, "b": "x"})])
        .await;
    assert_eq!(r.status(), 200);
    let info = json_body(app.get("/tables/feed").await).await;
    assert_eq!(info["schema"], "evolve", "{info}");
    // A PUT of the day with a new field: one more column, the day's rows.
    let rows = [
        json!({"a": 1, "b": "x"}),
        json!({"a": 2, "b": "y", "c": 2.5}),
    ];
    let r = app.put_ndjson("/partitions/feed/2026-10-12", &rows).await;
    assert_eq!(r.status(), 200, "{}", r.text().await.unwrap());
    assert_eq!(columns(&app, "feed").await["c"], "numeric");
    // The rows without `c` hash as they did: what GET gives back, PUT takes
    // back unchanged.
    let r = app.get("/partitions/feed/2026-10-12").await;
    let etag = r.headers()["etag"].to_str().unwrap().to_string();
    let text = r.text().await.unwrap();
    let r = app
        .put("/partitions/feed/2026-10-12", "application/x-ndjson", text)
        .await;
    assert_eq!(r.headers()["etag"].to_str().unwrap(), etag);
    assert_eq!(json_body(r).await["changed"], false);
    // A day written before the column came keeps its ETag too.
    let r = app
        .put_ndjson("/partitions/feed/2026-10-13", &[json!({"a": 3, "b": "z"})])
        .await;
    let before = r.headers()["etag"].to_str().unwrap().to_string();
    app.put_ndjson("/partitions/feed/2026-10-14", &[json!({"a": 4, "d": true})])
        .await;
    let text = app
        .get("/partitions/feed/2026-10-13")
        .await
        .text()
        .await
        .unwrap();
    let r = app
        .put("/partitions/feed/2026-10-13", "application/x-ndjson", text)
        .await;
    assert_eq!(r.headers()["etag"].to_str().unwrap(), before);
    let history = json_body(app.get("/tables/feed/history").await).await;
    assert_eq!(history.as_array().unwrap().len(), 3, "{history}");
    assert_eq!(app.get("/tables/nothing/history").await.status(), 404);
}

#[tokio::test]
async fn a_large_body_bringing_a_field_on_its_last_line_grows_the_table_and_is_written_whole() {
    let app = spawn_app().await;
    assert_eq!(app.declare("events", EVENTS).await.status(), 201);
    // Past the small-body size: read from a spool file, twice.
    let mut rows: Vec<Value> = (0..4000i64)
        .map(|i| json!({"id": i, "ds": "2026-10-12", "qty": i % 7, "seen": "2026-10-01"}))
        .collect();
    rows.push(json!({"id": 4000, "ds": "2026-10-12", "late": "last line"}));
    let body = ndjson(&rows);
    assert!(body.len() > 128 * 1024, "{}", body.len());
    let r = app
        .put(
            "/partitions/events/2026-10-12",
            "application/x-ndjson",
            body,
        )
        .await;
    assert_eq!(r.status(), 200, "{}", r.text().await.unwrap());
    assert_eq!(json_body(r).await["rows_written"], 4001);
    assert_eq!(columns(&app, "events").await["late"], "text");
    let late: Vec<Option<String>> =
        sqlx::query_scalar("select late from idem_data.events where id >= 3999 order by id")
            .fetch_all(&app.db)
            .await
            .unwrap();
    assert_eq!(late, [None, Some("last line".to_string())]);
}

#[tokio::test]
async fn a_csv_header_naming_new_columns_grows_the_table() {
    let app = spawn_app().await;
    assert_eq!(app.declare("events", EVENTS).await.status(), 201);
    let body = "id,ds,qty,colour,weight\r\n1,2026-10-12,3,red,1.5\r\n2,2026-10-12,4,,2\r\n";
    let r = app
        .put("/partitions/events/2026-10-12", "text/csv", body)
        .await;
    assert_eq!(r.status(), 200, "{}", r.text().await.unwrap());
    let grown = columns(&app, "events").await;
    assert_eq!(
        (grown["colour"].as_str(), grown["weight"].as_str()),
        ("text", "numeric")
    );
    let rows: Vec<(i64, Option<String>, String)> =
        sqlx::query_as("select id, colour, weight::text from idem_data.events order by id")
            .fetch_all(&app.db)
            .await
            .unwrap();
    assert_eq!(
        rows,
        [
            (1, Some("red".to_string()), "1.5".to_string()),
            (2, None, "2".to_string())
        ]
    );
    // Refused bodies change nothing: a bad row under `reject` keeps the
    // table as it was, the new field it brought included.
    let bad = [json!({"id": "x", "ds": "2026-10-12", "shade": "blue"})];
    let r = app.post_rows("table=events", Some("b1"), &bad).await;
    assert_eq!(r.status(), 422);
    assert!(!columns(&app, "events").await.contains_key("shade"));
}

#[tokio::test]
async fn puts_of_several_days_bringing_new_fields_at_once_all_land() {
    let app = spawn_app().await;
    assert_eq!(app.declare("events", EVENTS).await.status(), 201);
    let puts = (1..=6i64).map(|day| {
        let app = &app;
        async move {
            let ds = format!("2026-10-{day:02}");
            let rows: Vec<Value> = (0..50i64)
                .map(|k| {
                    let mut row = json!({"id": k, "ds": ds, "qty": k});
                    row[format!("day_{day}")] = json!(day * 1000 + k);
                    row
                })
                .collect();
            let r = app
                .put_ndjson(&format!("/partitions/events/{ds}"), &rows)
                .await;
            let status = r.status();
            (status, r.text().await.unwrap())
        }
    });
    for (status, body) in futures::future::join_all(puts).await {
        assert_eq!(status, 200, "{body}");
    }
    let grown = columns(&app, "events").await;
    for day in 1..=6 {
        assert_eq!(grown[&format!("day_{day}")], "bigint");
        let sum: i64 = sqlx::query_scalar(&format!(
            "select sum(day_{day})::bigint from idem_data.events where ds = '2026-10-{day:02}'"
        ))
        .fetch_one(&app.db)
        .await
        .unwrap();
        assert_eq!(sum, (0..50).map(|k| day * 1000 + k).sum::<i64>());
    }
}
