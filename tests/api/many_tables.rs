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
        // A batch's deltas (several tables' in one statement) land on their
        // own table: the partition's count and hash are its rows'.
        let path = format!("/partitions/{name}/2026-10-18");
        let head = app.get(&path).await;
        assert_eq!(head.headers()["idem-row-count"], "3", "{name}");
        app.put_back_unchanged(&path).await;
    }
    // A replay answers what the write answered, and writes nothing again.
    let (status, again) = append(&app, &names[0], "event-0", 0).await;
    assert_eq!(status, 200);
    assert_eq!(again["load_id"], answers[0].1["load_id"]);
    assert_eq!(app.count(&names[0], "2026-10-18").await, 3);
}

/// A merge of one order to `table` under `key`: its status and body.
async fn merge_order(app: &TestApp, table: &str, key: &str, status: &str) -> (u16, Value) {
    let r = app
        .client
        .post(app.url(&format!("/rows?table={table}")))
        .header("content-type", "application/x-ndjson")
        .header("idempotency-key", key)
        .body(ndjson(&[order(1, status, "2026-10-12T01:00:00Z")]))
        .send()
        .await
        .unwrap();
    (r.status().as_u16(), json_body(r).await)
}

#[tokio::test]
async fn a_batch_waiting_for_a_lock_on_one_table_does_not_hold_up_another_tables_posts() {
    let app = spawn_app().await;
    for table in ["held", "free"] {
        let r = app.declare(table, ORDERS).await;
        assert!(r.status().is_success(), "{}", r.text().await.unwrap());
        let (status, body) = merge_order(&app, table, &format!("{table}-first"), "paid").await;
        assert_eq!(status, 200, "{body}");
    }
    // Another session holds the stored row of `held`: a POST that updates
    // it waits for that lock (up to the key's wait, 10 s by default).
    let mut holder = app.db.begin().await.unwrap();
    sqlx::query("select 1 from idem_data.held where order_id = 1 for update")
        .execute(&mut *holder)
        .await
        .unwrap();
    let waiting = {
        let app_client = app.client.clone();
        let url = app.url("/rows?table=held");
        tokio::spawn(async move {
            app_client
                .post(url)
                .header("content-type", "application/x-ndjson")
                .header("idempotency-key", "held-second")
                .body(ndjson(&[order(1, "shipped", "2026-10-12T02:00:00Z")]))
                .send()
                .await
                .unwrap()
                .status()
                .as_u16()
        })
    };
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    // Meanwhile a small POST to another table is written at once.
    let started = std::time::Instant::now();
    let (status, body) = merge_order(&app, "free", "free-second", "refunded").await;
    let took = started.elapsed();
    assert_eq!(status, 200, "{body}");
    assert!(!waiting.is_finished(), "the held POST waits for its row");
    assert!(
        took < std::time::Duration::from_secs(3),
        "a POST to another table waited {took:?} behind a batch waiting for a lock"
    );
    holder.rollback().await.unwrap();
    assert_eq!(waiting.await.unwrap(), 200);
    assert_eq!(app.rows("held", "2026-10-12").await[0]["status"], "shipped");
}

#[tokio::test]
async fn a_batch_locks_the_days_it_writes_in_one_order_up_to_the_first_day_still_to_make() {
    use idem::names::TableName;
    use idem::period::Period;
    use idem::store::locks::partition_lock_key;
    use idem::store::write::touched::lock_existing_partitions;

    let app = spawn_app().await;
    let day = Period::parse_any("2026-10-18").unwrap();
    let names: Vec<TableName> = ["events_a", "events_b", "events_c"]
        .iter()
        .map(|name| TableName::parse(name).unwrap())
        .collect();
    for (i, name) in names.iter().enumerate() {
        let r = app.declare(name.as_str(), EVENTS).await;
        assert!(r.status().is_success(), "{}", r.text().await.unwrap());
        // events_b has no partition of the day yet.
        if name.as_str() != "events_b" {
            let (status, body) = append(&app, name.as_str(), &format!("first-{i}"), i).await;
            assert_eq!(status, 200, "{body}");
        }
    }
    // A swap of a day takes its lock exclusively: it can while no writer
    // holds it shared.
    let swap_could_lock = |name: &TableName| {
        let (db, key) = (app.db.clone(), partition_lock_key(name, day));
        async move {
            let mut other = db.begin().await.unwrap();
            sqlx::query_scalar::<_, bool>("select pg_try_advisory_xact_lock($1)")
                .bind(key)
                .fetch_one(&mut *other)
                .await
                .unwrap()
        }
    };
    let wanted: Vec<(&TableName, Period)> = names.iter().map(|name| (name, day)).collect();

    // events_b's day is missing: only events_a's is locked, since
    // events_c's must wait until events_b's is made (in order).
    let mut writer = app.db.begin().await.unwrap();
    assert_eq!(
        lock_existing_partitions(&mut writer, &wanted)
            .await
            .unwrap(),
        1
    );
    assert!(!swap_could_lock(&names[0]).await, "events_a's day is held");
    assert!(
        swap_could_lock(&names[2]).await,
        "events_c's day is not held yet"
    );
    writer.rollback().await.unwrap();

    // Once events_b's day exists, the three are locked by one statement.
    let (status, body) = append(&app, "events_b", "first-b", 9).await;
    assert_eq!(status, 200, "{body}");
    let mut writer = app.db.begin().await.unwrap();
    assert_eq!(
        lock_existing_partitions(&mut writer, &wanted)
            .await
            .unwrap(),
        3
    );
    for name in &names {
        assert!(!swap_could_lock(name).await, "{} is held", name.as_str());
    }
    writer.commit().await.unwrap();
    assert!(
        swap_could_lock(&names[1]).await,
        "released at the writer's end"
    );
}
