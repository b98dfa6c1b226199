//! Tables as wide as Postgres holds: 1,600 columns, and rows that fit a
//! page once their long values are moved out of line (TOAST).

use serde_json::{Map, Value};

use crate::helpers::*;
use crate::support::*;

/// A keyless table of `n` text columns `c0`, `c1`, … and its `ds`.
fn text_columns(n: usize) -> String {
    let columns: Vec<String> = (0..n).map(|i| format!("\"c{i}\": \"text\"")).collect();
    format!(r#"{{"columns": {{{}}}}}"#, columns.join(", "))
}

/// A row of 2026-10-12 giving columns `c0` to `c{n-1}` the value `value`.
fn row(n: usize, value: &str) -> Value {
    let mut row = Map::new();
    row.insert("ds".into(), Value::from("2026-10-12"));
    for i in 0..n {
        row.insert(format!("c{i}"), Value::from(value));
    }
    Value::Object(row)
}

#[tokio::test]
async fn a_table_of_1500_text_columns_is_declared_and_loaded() {
    let app = spawn_app().await;
    let r = app.declare("wide", &text_columns(1500)).await;
    assert_eq!(r.status(), 201, "{}", r.text().await.unwrap());
    // Every column short, and 300 columns of 5,000 bytes (each moved out of
    // line, leaving a pointer in the row).
    let rows = [row(1500, "x"), row(300, &"y".repeat(5000))];
    let r = app.put_ndjson("/partitions/wide/2026-10-12", &rows).await;
    assert_eq!(r.status(), 200, "{}", r.text().await.unwrap());
    assert_eq!(app.count("wide", "2026-10-12").await, 2);
    let r = app
        .post_rows("table=wide", Some("p1"), &[row(1500, "z")])
        .await;
    assert_eq!(r.status(), 200, "{}", r.text().await.unwrap());
    let r = app.declare("wider", &text_columns(1597)).await;
    assert_eq!(r.status(), 400);
    assert_eq!(json_body(r).await["code"], "table_too_wide");
}

#[tokio::test]
async fn a_row_whose_values_cannot_fit_a_page_is_a_bad_row_named_by_its_line() {
    let app = spawn_app().await;
    assert_eq!(app.declare("wide", &text_columns(1500)).await.status(), 201);
    // 1,500 values of ten bytes: too short to move out of line, 16 kB in all.
    let rows = [row(3, "fits"), row(1500, "0123456789")];
    for r in [
        app.put_ndjson("/partitions/wide/2026-10-12", &rows).await,
        app.post_rows("table=wide", Some("p1"), &rows).await,
    ] {
        assert_eq!(r.status(), 422);
        let body = json_body(r).await;
        assert_eq!(body["code"], "bad_rows", "{body}");
        assert_eq!(body["rejected"], 1, "{body}");
        assert_eq!(body["errors"][0]["line"], 2, "{body}");
        let message = body["errors"][0]["message"].as_str().unwrap();
        assert!(message.contains("8160"), "{message}");
    }
    assert_eq!(app.count("wide", "2026-10-12").await, 0);
}
