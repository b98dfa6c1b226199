//! `"distribution"` in a declaration, on whatever database the suite runs
//! on: a distribution the table cannot have is refused before anything is
//! made, `GET` shows where the rows live and a declaration takes that back
//! unchanged, and
//! without Citus a distributed table is refused with `citus_not_installed`
//! (on the suite's Citus run, the same declaration makes one).

use serde_json::{json, Value};

use crate::helpers::*;
use crate::support::*;

/// `declaration` with `"distribution": distribution`.
fn distributed(declaration: &str, distribution: Value) -> String {
    let mut declared: Value = serde_json::from_str(declaration).unwrap();
    declared["distribution"] = distribution;
    declared.to_string()
}

async fn has_citus(app: &TestApp) -> bool {
    sqlx::query_scalar("select exists (select from pg_extension where extname = 'citus')")
        .fetch_one(&app.db)
        .await
        .unwrap()
}

#[tokio::test]
async fn a_distribution_the_table_cannot_have_is_refused_before_anything_is_made() {
    let app = spawn_app().await;
    let cases = [
        (
            distributed(ORDERS, json!({"column": "customer_id"})),
            "not in the primary key",
        ),
        (
            distributed(EVENTS, json!({"column": "nope"})),
            "not a declared column",
        ),
        (distributed(ORDERS, json!("reference")), "plain tables"),
        (
            distributed(EVENTS, json!({"column": "payload", "x": 1})),
            "distribution is",
        ),
    ];
    for (declaration, says) in cases {
        let r = app.declare("orders", &declaration).await;
        let status = r.status();
        let body = json_body(r).await;
        let code = if status == 422 {
            "invalid_distribution"
        } else {
            "invalid_declaration"
        };
        assert!(status == 422 || status == 400, "{declaration}: {body}");
        assert_eq!(body["code"], code, "{declaration}: {body}");
        assert!(
            body["detail"].as_str().unwrap().contains(says),
            "{declaration}: the detail says why: {body}"
        );
    }
    assert_eq!(
        app.get("/tables/orders").await.status(),
        404,
        "nothing was made"
    );
}

#[tokio::test]
async fn a_distributed_table_needs_citus_and_a_local_one_reads_back_unchanged() {
    let app = spawn_app().await;
    let hashed = distributed(ORDERS, json!({"column": "order_id"}));
    let r = app.declare("orders", &hashed).await;
    let status = r.status();
    let body = json_body(r).await;
    if has_citus(&app).await {
        assert_eq!(status, 201, "{body}");
        assert_eq!(body["distribution"], json!({"column": "order_id"}));
    } else {
        assert_eq!(status, 409, "{body}");
        assert_eq!(body["code"], "citus_not_installed");
        assert!(body["detail"]
            .as_str()
            .unwrap()
            .contains("CREATE EXTENSION citus"));
        assert_eq!(
            app.get("/tables/orders").await.status(),
            404,
            "nothing was made"
        );
    }

    let local = distributed(EVENTS, json!("local"));
    let r = app.declare("events", &local).await;
    assert_eq!(r.status(), 201);
    let shown = json_body(app.get("/tables/events").await).await;
    assert_eq!(shown["distribution"], "local");
    // The distribution GET shows, a declaration takes back unchanged; and
    // one that says nothing keeps what the table has.
    let again = distributed(EVENTS, shown["distribution"].clone());
    let again = json_body(app.declare("events", &again).await).await;
    assert_eq!(again["changes"], json!([]), "{again}");
    let silent = json_body(app.declare("events", EVENTS).await).await;
    assert_eq!(silent["changes"], json!([]), "{silent}");
    assert_eq!(silent["distribution"], "local");
}
