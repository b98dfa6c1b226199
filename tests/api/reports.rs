//! What a refusal says: each bad row once, with every bad column of it, and
//! every unknown column named with the declared one it most likely meant.

use idem::config::Settings;
use serde_json::{json, Value};

use crate::helpers::*;
use crate::support::*;

const DAY: &str = "/partitions/orders/2026-10-12";

fn columns(row: &Value) -> Vec<(String, String)> {
    row["columns"]
        .as_array()
        .unwrap_or_else(|| panic!("columns in {row}"))
        .iter()
        .map(|c| {
            let text = |f: &str| c[f].as_str().unwrap().to_string();
            (text("column"), text("message"))
        })
        .collect()
}

#[tokio::test]
async fn a_record_with_three_bad_fields_is_one_bad_row_that_lists_its_three_columns() {
    let app = spawn_app().await;
    app.declare_orders().await;
    let mut bad = order(2, "paid", "2026-10-12T01:00:00Z");
    bad["amount"] = json!("lots");
    bad["customer_id"] = json!("seven");
    bad["updated_at"] = json!("yesterday");
    let body = [order(1, "paid", "2026-10-12T01:00:00Z"), bad];
    let r = app.put_ndjson(DAY, &body).await;
    assert_eq!(r.status(), 422);
    let problem = json_body(r).await;
    assert_eq!(problem["code"], "bad_rows");
    assert_eq!(problem["rejected"], 1, "{problem}");
    assert_eq!(
        problem["detail"],
        "1 row(s) were refused; nothing was written"
    );
    let errors = problem["errors"].as_array().unwrap();
    assert_eq!(errors.len(), 1, "{problem}");
    let row = &errors[0];
    assert_eq!(
        (row["line"].as_u64(), row["record"].as_u64()),
        (Some(2), Some(2))
    );
    let listed = columns(row);
    let names: Vec<_> = listed.iter().map(|(c, _)| c.as_str()).collect();
    // In the order of the body's fields (serde_json writes them sorted).
    assert_eq!(names, ["amount", "customer_id", "updated_at"], "{row}");
    // The first problem stays where clients have always read it.
    assert_eq!(row["column"], "amount");
    assert_eq!(row["message"], listed[0].1.as_str());

    let loads = json_body(app.get("/loads?table=orders").await).await;
    assert_eq!(loads[0]["rejected"], 1);
    assert_eq!(loads[0]["rows_received"], 2);
    assert_eq!(
        loads[0]["error"]["errors"][0]["columns"]
            .as_array()
            .unwrap()
            .len(),
        3
    );
}

#[tokio::test]
async fn the_listing_limit_counts_rows_not_their_problems() {
    let app = spawn_app_with(Settings {
        max_listed_errors: 2,
        ..Settings::default()
    })
    .await;
    app.declare_orders().await;
    let bad = |id: i64| json!({"order_id": id, "amount": "x", "customer_id": "y"});
    let body: Vec<Value> = (1..=5).map(bad).collect();
    let problem = json_body(app.put_ndjson(DAY, &body).await).await;
    assert_eq!(problem["rejected"], 5, "{problem}");
    let errors = problem["errors"].as_array().unwrap();
    assert_eq!(errors.len(), 2, "{problem}");
    for (row, line) in errors.iter().zip([1, 2]) {
        assert_eq!(row["line"], line);
        assert_eq!(columns(row).len(), 2, "{row}");
    }
}

#[tokio::test]
async fn a_csv_header_names_every_unknown_column_with_the_one_it_likely_meant() {
    let app = spawn_app().await;
    app.declare_orders().await;
    let csv = "order_id,amout,colour,staus\n1,2.50,red,paid\n";
    let r = app.put(DAY, "text/csv", csv).await;
    assert_eq!(r.status(), 422);
    let problem = json_body(r).await;
    assert_eq!(problem["code"], "malformed_body");
    let errors = problem["errors"].as_array().unwrap();
    assert_eq!(errors.len(), 1, "the header is one row: {problem}");
    let header = &errors[0];
    assert_eq!(
        (header["line"].as_u64(), header["record"].as_u64()),
        (Some(1), Some(0))
    );
    assert_eq!(header["column"], "amout");
    let not_a_column = "is not a column of this table";
    assert_eq!(
        columns(header),
        [
            (
                "amout".into(),
                format!("{not_a_column}; did you mean \"amount\"?")
            ),
            ("colour".into(), not_a_column.into()),
            (
                "staus".into(),
                format!("{not_a_column}; did you mean \"status\"?")
            ),
        ]
    );
    let detail = problem["detail"].as_str().unwrap();
    assert!(
        ["amout", "colour", "staus"]
            .iter()
            .all(|c| detail.contains(c)),
        "{detail}"
    );
}

#[tokio::test]
async fn unknown_json_fields_are_named_at_once_with_a_hint() {
    let app = spawn_app().await;
    app.declare_orders().await;
    let body = [json!({"order_id": 1, "Amount": "2.50", "colour": "red"})];
    let problem = json_body(app.put_ndjson(DAY, &body).await).await;
    assert_eq!(problem["rejected"], 1, "{problem}");
    let not_a_column = "is not a column of this table";
    assert_eq!(
        columns(&problem["errors"][0]),
        [
            (
                "Amount".into(),
                format!("{not_a_column}; did you mean \"amount\"?")
            ),
            ("colour".into(), not_a_column.into()),
        ]
    );
}
