//! Writes spread over many tables: more tables than a connection keeps
//! prepared statements for (each table's write is a statement of its own).

use serde_json::{json, Value};

use crate::helpers::*;
use crate::support::*;

const TABLES: usize = 12;
const ROUNDS: usize = 3;

const EVENTS: &str = r#"{"columns": {"event_id": "bigint", "ds": "date", "kind": "text"}}"#;

async fn append(app: &TestApp, table: &str, key: &str, event_id: usize) -> (u16, Value) {
    let r = app
        .client
        .post(app.url(&format!("/rows?table={table}&mode=append")))
        .header("content-type", "application/x-ndjson")
        .header("idempotency-key", key)
        .body(ndjson(&[
            json!({"event_id": event_id, "ds": "2026-10-18", "kind": "click"}),
        ]))
        .send()
        .await
        .unwrap();
    (r.status().as_u16(), json_body(r).await)
}

#[tokio::test]
async fn appends_spread_over_more_tables_than_the_statement_cache_holds_each_land_once() {
    let (options, _database) = fresh_database().await;
    // Each connection keeps 4 statements: every table's write pushes
    // another table's out, mid-transaction included.
    let app = spawn_app_on(options.statement_cache_capacity(4), Default::default()).await;
    let names: Vec<String> = (1..=TABLES).map(|i| format!("events_{i:02}")).collect();
    for name in &names {
        let r = app.declare(name, EVENTS).await;
        assert!(r.status().is_success(), "{}", r.text().await.unwrap());
    }
    let sends = (0..TABLES * ROUNDS).map(|i| {
        let (app, table) = (&app, &names[i % TABLES]);
        async move { append(app, table, &format!("event-{i}"), i).await }
    });
    let answers = futures::future::join_all(sends).await;
    for (i, (status, body)) in answers.iter().enumerate() {
        assert_eq!(*status, 200, "POST {i}: {body}");
        assert_eq!(body["inserted"], 1, "POST {i}: {body}");
        assert_eq!(
            body["table"],
            names[i % TABLES],
            "POST {i}: its own table's receipt"
        );
    }
    for name in &names {
        assert_eq!(app.count(name, "2026-10-18").await, 3, "{name}");
    }
    // A replay answers what the write answered, and writes nothing again.
    let (status, again) = append(&app, &names[0], "event-0", 0).await;
    assert_eq!(status, 200);
    assert_eq!(again["load_id"], answers[0].1["load_id"]);
    assert_eq!(app.count(&names[0], "2026-10-18").await, 3);
}
