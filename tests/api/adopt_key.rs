//! A key adopted later: a table a first write made (no key) takes the key
//! a later declaration gives it, when its stored rows are unique on it, or
//! with its repeats resolved by the duplicates rule when the declaration
//! asks; writers wait for the adoption, none fails, none writes a repeat.

use reqwest::Method;
use serde_json::{json, Value};

use crate::helpers::*;
use crate::support::*;

/// The orders of a day as a first write sends them, order 2 twice.
fn first_day() -> Vec<Value> {
    vec![
        order(1, "paid", "2026-10-12T08:00:00Z"),
        order(2, "paid", "2026-10-12T09:00:00Z"),
        order(2, "shipped", "2026-10-12T10:00:00Z"),
    ]
}

/// The declaration of `orders` as its first write made it (its columns'
/// types as inferred from the body), with the key and cursor added.
async fn keyed_orders(app: &TestApp) -> String {
    let table = json_body(app.get("/tables/orders").await).await;
    let columns: serde_json::Map<String, Value> = table["columns"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| (c["name"].as_str().unwrap().to_string(), c["type"].clone()))
        .collect();
    json!({"columns": columns, "primary_key": ["order_id"], "cursor": "updated_at"}).to_string()
}

fn with_adopt(declaration: &str, repeats: &str) -> String {
    let mut value: Value = serde_json::from_str(declaration).unwrap();
    value["adopt"] = json!({"repeats": repeats});
    value.to_string()
}

/// A test's app whose `orders`, made by a first write, holds `rows` in
/// 2026-10-12; none on a Citus cluster (see `refused_on_citus`).
async fn orders_stored(rows: &[Value]) -> Option<TestApp> {
    let app = spawn_app().await;
    let day = "/partitions/orders/2026-10-12";
    assert_eq!(app.put_ndjson(day, rows).await.status(), 200);
    if refused_on_citus(&app).await {
        return None;
    }
    Some(app)
}

/// On a Citus cluster every table a first write makes is distributed by
/// its row id, which a key would change: the adoption is refused there.
async fn refused_on_citus(app: &TestApp) -> bool {
    if distribution_default() != idem::schema::DistributionDefault::Key {
        return false;
    }
    let declaration = with_adopt(&keyed_orders(app).await, "resolve");
    let r = app.declare("orders", &declaration).await;
    assert_eq!(r.status(), 409);
    assert_eq!(json_body(r).await["code"], "citus_unsupported");
    true
}

#[tokio::test]
async fn a_table_made_by_a_first_write_adopts_its_key_its_repeats_resolved_and_logged() {
    let app = spawn_app().await;
    let day = "/partitions/orders/2026-10-12";
    assert_eq!(app.put_ndjson(day, &first_day()).await.status(), 200);
    assert_eq!(
        app.count("orders", "2026-10-12").await,
        3,
        "stored as sent: no key"
    );
    if refused_on_citus(&app).await {
        return;
    }
    let keyed = keyed_orders(&app).await;
    let refused = app.declare("orders", &keyed).await;
    assert_eq!(refused.status(), 409);
    let problem = json_body(refused).await;
    let detail = problem["detail"].as_str().unwrap();
    assert!(
        detail.contains(r#"{"order_id": 2} in 2026-10-12 (2 rows)"#) && detail.contains("resolve"),
        "{problem}"
    );
    assert_eq!(
        app.count("orders", "2026-10-12").await,
        3,
        "the refusal changed nothing"
    );

    let adopted = app.declare("orders", &with_adopt(&keyed, "resolve")).await;
    assert_eq!(adopted.status(), 200);
    let adopted = json_body(adopted).await;
    assert_eq!(adopted["primary_key"], json!(["order_id"]), "{adopted}");
    assert!(
        adopted["changes"]
            .as_array()
            .unwrap()
            .contains(&json!({"change": "adopt_key", "primary_key": ["order_id"]})),
        "{adopted}"
    );
    // The cursor picks order 2's survivor; its other version is logged.
    let rows = app.rows("orders", "2026-10-12").await;
    assert_eq!(rows.len(), 2);
    let two = rows.iter().find(|r| r["order_id"] == 2).unwrap();
    assert_eq!(two["status"], "shipped");
    let logged = json_body(app.get("/duplicates?table=orders").await).await;
    let logged = logged.as_array().unwrap();
    assert_eq!(logged.len(), 1, "{logged:?}");
    assert_eq!(logged[0]["key"], json!({"order_id": 2}));
    assert_eq!(logged[0]["row"]["status"], "paid");
    // Keyed now: a POST of order 1 updates it, the day's count and hash
    // follow, and the day reads back as it is stored.
    let post = app
        .send_keyed(
            Method::POST,
            "/rows?table=orders",
            "after-adoption",
            &[order(1, "refunded", "2026-10-12T11:00:00Z")],
        )
        .await;
    assert_eq!(post.status(), 200);
    assert_eq!(json_body(post).await["updated"], 1);
    assert_eq!(app.count("orders", "2026-10-12").await, 2);
    app.put_back_unchanged(day).await;

    // History may follow, seeded from the rows as they now are.
    let mut with_history: Value = serde_json::from_str(&keyed).unwrap();
    with_history["history"] = json!("scd2");
    let r = app.declare("orders", &with_history.to_string()).await;
    assert_eq!(r.status(), 200, "{}", r.text().await.unwrap());
    let history = app.get("/tables/orders/history/rows").await;
    assert_eq!(history.status(), 200);
    let versions: Vec<Value> = history
        .text()
        .await
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let mut statuses: Vec<&str> = versions
        .iter()
        .map(|v| v["status"].as_str().unwrap())
        .collect();
    statuses.sort();
    assert_eq!(statuses, ["refunded", "shipped"], "{versions:?}");
}

#[tokio::test]
async fn a_key_the_stored_rows_hold_once_is_adopted_without_asking() {
    let app = spawn_app().await;
    let day = "/partitions/orders/2026-10-12";
    let rows = [
        order(1, "paid", "2026-10-12T08:00:00Z"),
        order(2, "paid", "2026-10-12T09:00:00Z"),
    ];
    assert_eq!(app.put_ndjson(day, &rows).await.status(), 200);
    let etag = app.get(day).await.headers()["etag"].clone();
    if refused_on_citus(&app).await {
        return;
    }
    let keyed = keyed_orders(&app).await;
    assert_eq!(app.declare("orders", &keyed).await.status(), 200);
    // The same rows, the same content: the partition's ETag stays.
    assert_eq!(app.get(day).await.headers()["etag"], etag);
    assert_eq!(app.put_ndjson(day, &rows).await.status(), 200);
    assert_eq!(app.get(day).await.headers()["etag"], etag);
}

#[tokio::test]
async fn eight_writers_during_an_adoption_all_succeed_and_no_key_repeats() {
    let Some(app) = orders_stored(&first_day()).await else {
        return;
    };
    let writers = (0..8).map(|w| {
        let app = &app;
        async move {
            let mut statuses = Vec::new();
            for n in 0..25 {
                // Keys 1..=5 again and again: before the adoption each is a
                // row of its own, after it a merge.
                let id = 1 + (w + n) % 5;
                let row = order(
                    id,
                    "paid",
                    &format!("2026-10-12T{:02}:{:02}:00Z", n / 10, n % 10),
                );
                let key = format!("writer-{w}-{n}");
                let r = app
                    .send_keyed(Method::POST, "/rows?table=orders", &key, &[row])
                    .await;
                statuses.push(r.status().as_u16());
            }
            statuses
        }
    });
    let declaration = with_adopt(&keyed_orders(&app).await, "resolve");
    let adoption = async {
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        app.declare("orders", &declaration).await
    };
    let (statuses, adopted) = tokio::join!(futures::future::join_all(writers), adoption);
    assert_eq!(adopted.status(), 200, "{}", adopted.text().await.unwrap());
    for statuses in statuses {
        assert!(statuses.iter().all(|s| *s == 200), "{statuses:?}");
    }
    let (rows, keys): (i64, i64) =
        sqlx::query_as("select count(*), count(distinct (ds, order_id)) from idem_data.orders")
            .fetch_one(&app.db)
            .await
            .unwrap();
    assert_eq!(rows, keys, "no key stored twice");
    assert_eq!(keys, 5);
    // Writers wrote on both sides of the adoption: appends before it,
    // merges after.
    let (appends, merges): (i64, i64) = sqlx::query_as(
        "select count(*) filter (where mode = 'append'), count(*) filter (where mode = 'merge')
           from idem.loads where idempotency_key like 'writer-%'",
    )
    .fetch_one(&app.db)
    .await
    .unwrap();
    assert!(
        appends > 0 && merges > 0,
        "appends {appends}, merges {merges}"
    );
}

#[tokio::test]
async fn a_refused_adoption_answers_while_a_writer_holds_the_table() {
    let Some(app) = orders_stored(&first_day()).await else {
        return;
    };
    // A writer in the middle of its write holds the table's lock shared; a
    // declaration that changes the table waits for it to end, one whose key
    // the stored rows repeat is refused without waiting (the guard below
    // only keeps a regression from hanging the suite).
    let mut writer = app.writer_holding("orders").await;
    let declaration = keyed_orders(&app).await;
    let refused = tokio::time::timeout(
        std::time::Duration::from_secs(60),
        app.declare("orders", &declaration),
    )
    .await
    .expect("the refusal waited for the writer");
    assert_eq!(refused.status(), 409);
    assert_eq!(json_body(refused).await["code"], "schema_conflict");
    sqlx::query("commit").execute(&mut *writer).await.unwrap();
    assert_eq!(app.count("orders", "2026-10-12").await, 3);
}

#[tokio::test]
async fn a_partition_larger_than_one_read_is_rekeyed_whole() {
    // More rows than the adoption reads at a time (10,000).
    let rows: Vec<Value> = (1..=25_000)
        .map(|id| order(id, "paid", "2026-10-12T08:00:00Z"))
        .collect();
    let Some(app) = orders_stored(&rows).await else {
        return;
    };
    let day = "/partitions/orders/2026-10-12";
    assert_eq!(
        app.declare("orders", &keyed_orders(&app).await)
            .await
            .status(),
        200
    );
    // Every row took its key's id: orders from each read merge into their
    // stored row, and the day is as many rows as before.
    let changed = [1, 10_001, 25_000].map(|id| order(id, "shipped", "2026-10-12T09:00:00Z"));
    let post = app
        .send_keyed(Method::POST, "/rows?table=orders", "after", &changed)
        .await;
    assert_eq!(post.status(), 200);
    assert_eq!(json_body(post).await["updated"], 3);
    assert_eq!(app.count("orders", "2026-10-12").await, 25_000);
    app.put_back_unchanged(day).await;
}

#[tokio::test]
async fn a_repeat_written_while_the_adoption_waits_for_the_table_is_refused() {
    let again = "update again set _row_id = sha256(_row_id), status = 'again'";
    refused_after_a_writer(again, r#"{"order_id": 1} in 2026-10-12 (2 rows)"#).await;
}

#[tokio::test]
async fn a_null_key_written_while_the_adoption_waits_for_the_table_is_refused() {
    let again = "update again set _row_id = sha256(_row_id), order_id = null";
    refused_after_a_writer(again, "1 stored row(s) have no value for the key").await;
}

#[tokio::test]
async fn a_repeat_written_while_the_adoption_waits_for_the_table_is_resolved_when_asked() {
    let again = "update again set _row_id = sha256(_row_id), status = 'again', \
                 updated_at = updated_at + interval '1 hour'";
    let Some((app, adopted)) = declared_after_a_writer(again, "resolve").await else {
        return;
    };
    assert_eq!(adopted.status(), 200, "{}", adopted.text().await.unwrap());
    // The repeat, stored after the rows were first read, took its key's id
    // too: the duplicates rule met both versions of order 1 and kept the
    // later one.
    let rows = app.rows("orders", "2026-10-12").await;
    assert_eq!(rows.len(), 2, "{rows:?}");
    let one = rows.iter().find(|r| r["order_id"] == 1).unwrap();
    assert_eq!(one["status"], "again");
    let logged = json_body(app.get("/duplicates?table=orders").await).await;
    assert_eq!(logged.as_array().unwrap().len(), 1, "{logged}");
}

/// A declaration the writer's change makes a 409 naming `named`, and
/// that changes nothing.
async fn refused_after_a_writer(change: &str, named: &str) {
    let Some((app, refused)) = declared_after_a_writer(change, "refuse").await else {
        return;
    };
    assert_eq!(refused.status(), 409);
    let problem = json_body(refused).await;
    assert!(
        problem["detail"].as_str().unwrap().contains(named),
        "{problem}"
    );
    let table = json_body(app.get("/tables/orders").await).await;
    assert_eq!(table["primary_key"], json!([]), "nothing changed: {table}");
}

/// A declaration adopting `order_id`, checked when the stored rows (orders
/// 1 and 2) hold each key once, waits for a writer that holds the table and
/// stores order 1 again, changed by `change` (an UPDATE of the temporary
/// table `again`); the app and the declaration's answer (none on Citus).
/// `repeats` is the declaration's `"adopt": {"repeats": …}`.
async fn declared_after_a_writer(
    change: &str,
    repeats: &str,
) -> Option<(TestApp, reqwest::Response)> {
    let rows = [
        order(1, "paid", "2026-10-12T08:00:00Z"),
        order(2, "paid", "2026-10-12T09:00:00Z"),
    ];
    let app = orders_stored(&rows).await?;
    let mut writer = app.writer_holding("orders").await;
    let declaration = with_adopt(&keyed_orders(&app).await, repeats);
    let write = async {
        wait_for_advisory_lock_waiter(&app).await;
        for sql in [
            "create temp table again as select * from idem_data.orders where order_id = 1",
            change,
            "insert into idem_data.orders select * from again",
            "commit",
        ] {
            sqlx::query(sql).execute(&mut *writer).await.unwrap();
        }
    };
    let (answer, ()) = tokio::join!(app.declare("orders", &declaration), write);
    Some((app, answer))
}

/// Until a session of the test's database waits for an advisory lock.
async fn wait_for_advisory_lock_waiter(app: &TestApp) {
    for _ in 0..600 {
        let waiting: i64 = sqlx::query_scalar(
            "select count(*) from pg_locks where locktype = 'advisory' and not granted",
        )
        .fetch_one(&app.db)
        .await
        .unwrap();
        if waiting > 0 {
            return;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    panic!("nobody waited for the table's lock");
}

#[tokio::test]
async fn history_after_an_adoption_needs_every_stored_row_to_have_a_cursor() {
    let mut undated = order(2, "paid", "2026-10-12T09:00:00Z");
    undated["updated_at"] = Value::Null;
    let rows = [order(1, "paid", "2026-10-12T08:00:00Z"), undated];
    let Some(app) = orders_stored(&rows).await else {
        return;
    };
    let keyed = keyed_orders(&app).await;
    assert_eq!(app.declare("orders", &keyed).await.status(), 200);
    let mut with_history: Value = serde_json::from_str(&keyed).unwrap();
    with_history["history"] = json!("scd2");
    let refused = app.declare("orders", &with_history.to_string()).await;
    assert_eq!(refused.status(), 409);
    let problem = json_body(refused).await;
    assert!(
        problem["detail"].as_str().unwrap().contains("1 have none"),
        "{problem}"
    );
    let table = json_body(app.get("/tables/orders").await).await;
    assert!(table["history"].is_null(), "nothing changed: {table}");
}
