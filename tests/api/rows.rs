use std::collections::BTreeSet;
use std::sync::Arc;

use serde_json::{json, Value};

use crate::helpers::*;
use crate::support::*;

impl TestApp {
    pub async fn post_rows(
        &self,
        query: &str,
        key: Option<&str>,
        rows: &[Value],
    ) -> reqwest::Response {
        let mut request = self
            .client
            .post(self.url(&format!("/rows?{query}")))
            .header("content-type", "application/x-ndjson")
            .body(ndjson(rows));
        if let Some(key) = key {
            request = request.header("idempotency-key", key);
        }
        request.send().await.unwrap()
    }

    pub async fn loads_with_key(&self, key: &str) -> Vec<(String, i64)> {
        sqlx::query_as("select status, rows_written from idem.loads where idempotency_key = $1 order by started_at")
            .bind(key)
            .fetch_all(&self.db)
            .await
            .unwrap()
    }
}

fn orders_1_2_2() -> Vec<Value> {
    vec![
        order(1, "paid", "2026-10-12T01:00:00Z"),
        order(2, "paid", "2026-10-12T02:00:00Z"),
        order(2, "paid", "2026-10-12T02:00:00Z"),
    ]
}

#[tokio::test]
async fn post_of_orders_1_2_2_twice_with_one_key_writes_once_and_replays() {
    let app = spawn_app().await;
    app.declare_orders().await;
    let first = app
        .post_rows("table=orders", Some("k-1"), &orders_1_2_2())
        .await;
    assert_eq!(first.status(), 200);
    assert_eq!(first.headers()["idempotent-replayed"], "false");
    let first = json_body(first).await;
    assert_eq!(first["mode"], "merge");
    assert_eq!(first["inserted"], 2);
    assert_eq!(first["duplicates"], 1);
    assert_eq!(first["ds"], "2026-10-12");

    let again = app
        .post_rows("table=orders", Some("k-1"), &orders_1_2_2())
        .await;
    assert_eq!(again.status(), 200);
    assert_eq!(again.headers()["idempotent-replayed"], "true");
    let again = json_body(again).await;
    assert_eq!(again["replayed"], true);
    assert_eq!(again["load_id"], first["load_id"]);
    assert_eq!(again["inserted"], 2);
    assert_eq!(app.count("orders", "2026-10-12").await, 2);

    let new_key = json_body(
        app.post_rows("table=orders", Some("k-2"), &orders_1_2_2())
            .await,
    )
    .await;
    assert_eq!(new_key["replayed"], false);
    assert_eq!(new_key["rows_written"], 0);
    assert_eq!(new_key["unchanged"], 2);
    assert_eq!(app.count("orders", "2026-10-12").await, 2);
    assert_eq!(
        app.loads_with_key("k-1").await,
        [("published".to_string(), 2)]
    );
}

#[tokio::test]
async fn a_missing_key_is_400_and_a_reused_key_with_another_body_is_422_writing_nothing() {
    let app = spawn_app().await;
    app.declare_orders().await;
    let r = app.post_rows("table=orders", None, &orders_1_2_2()).await;
    assert_eq!(r.status(), 400);
    assert_eq!(r.headers()["content-type"], "application/problem+json");
    assert_eq!(json_body(r).await["code"], "idempotency_key_missing");
    let long = "x".repeat(256);
    let r = app
        .post_rows("table=orders", Some(&long), &orders_1_2_2())
        .await;
    assert_eq!(r.status(), 400);
    assert_eq!(json_body(r).await["code"], "idempotency_key_invalid");
    assert_eq!(app.count("orders", "2026-10-12").await, 0);

    app.post_rows(
        "table=orders",
        Some("k"),
        &[order(1, "paid", "2026-10-12T01:00:00Z")],
    )
    .await;
    let other = [
        order(1, "refunded", "2026-10-12T05:00:00Z"),
        order(9, "paid", "2026-10-12T05:00:00Z"),
    ];
    let r = app.post_rows("table=orders", Some("k"), &other).await;
    assert_eq!(r.status(), 422);
    assert_eq!(json_body(r).await["code"], "idempotency_key_reused");
    let rows = app.rows("orders", "2026-10-12").await;
    assert_eq!(rows.len(), 1);
    assert_eq!(rows[0]["status"], "paid");
}

#[tokio::test]
async fn a_refused_request_stores_no_key_so_the_fixed_request_can_use_it() {
    let app = spawn_app().await;
    app.declare_orders().await;
    let mut rows: Vec<Value> = (1..=100)
        .map(|i| order(i, "paid", "2026-10-12T01:00:00Z"))
        .collect();
    rows[60]["amount"] = json!("not a number");
    let r = app.post_rows("table=orders", Some("fix-me"), &rows).await;
    assert_eq!(r.status(), 422);
    let problem = json_body(r).await;
    assert_eq!(problem["errors"][0]["line"], 61);
    assert_eq!(problem["errors"][0]["column"], "amount");
    assert_eq!(
        app.count("orders", "2026-10-12").await,
        0,
        "half a body is never written"
    );
    assert_eq!(app.get("/idempotency-keys/fix-me").await.status(), 404);

    rows[60]["amount"] = json!("1.00");
    let r = app.post_rows("table=orders", Some("fix-me"), &rows).await;
    assert_eq!(r.status(), 200);
    assert_eq!(json_body(r).await["inserted"], 100);
    let key = json_body(app.get("/idempotency-keys/fix-me").await).await;
    assert_eq!(key["status"], "completed");
    assert_eq!(key["response"]["status"], 200);
    assert_eq!(key["retention_seconds"], 72 * 3600);
    assert!(key["expires_at"].as_str().unwrap() > key["created_at"].as_str().unwrap());
}

#[tokio::test]
async fn fifty_concurrent_posts_with_one_key_write_once() {
    let app = Arc::new(spawn_app().await);
    app.declare_orders().await;
    let rows: Vec<Value> = (1..=500)
        .map(|i| order(i, "paid", "2026-10-12T01:00:00Z"))
        .collect();
    let tasks: Vec<_> = (0..50)
        .map(|_| {
            let (app, rows) = (app.clone(), rows.clone());
            tokio::spawn(async move {
                let r = app.post_rows("table=orders", Some("same"), &rows).await;
                let status = r.status().as_u16();
                let replayed = r
                    .headers()
                    .get("idempotent-replayed")
                    .map(|v| v.to_str().unwrap().to_string());
                (status, replayed)
            })
        })
        .collect();
    let mut firsts = 0;
    for t in tasks {
        let (status, replayed) = t.await.unwrap();
        assert!(status == 200 || status == 409, "answer {status}");
        if replayed.as_deref() == Some("false") {
            firsts += 1;
        }
    }
    assert_eq!(firsts, 1, "exactly one request did the write");
    assert_eq!(
        app.loads_with_key("same").await,
        [("published".to_string(), 500)]
    );
    assert_eq!(app.count("orders", "2026-10-12").await, 500);
}

#[tokio::test]
async fn an_older_cursor_never_overwrites_newer_data_and_tombstones_delete() {
    let app = spawn_app().await;
    app.declare_orders().await;
    let newer = order(1, "shipped", "2026-10-12T09:00:00Z");
    let older = order(1, "created", "2026-10-12T01:00:00Z");
    app.post_rows("table=orders", Some("a"), &[newer]).await;
    let r = json_body(app.post_rows("table=orders", Some("b"), &[older]).await).await;
    assert_eq!(r["rows_written"], 0);
    assert_eq!(
        app.rows("orders", "2026-10-12").await[0]["status"],
        "shipped"
    );

    let newest = order(1, "delivered", "2026-10-12T10:00:00Z");
    let r = json_body(
        app.post_rows(
            "table=orders",
            Some("c"),
            &[newest, order(2, "paid", "2026-10-12T10:00:00Z")],
        )
        .await,
    )
    .await;
    assert_eq!(
        (r["updated"].as_u64(), r["inserted"].as_u64()),
        (Some(1), Some(1))
    );
    assert_eq!(
        app.rows("orders", "2026-10-12").await[0]["status"],
        "delivered"
    );

    let tombstone = json!({"order_id": 2, "ds": "2026-10-12", "_deleted": true});
    let r = json_body(app.post_rows("table=orders", Some("d"), &[tombstone]).await).await;
    assert_eq!(r["deleted"], 1);
    let rows = app.rows("orders", "2026-10-12").await;
    assert_eq!(rows.len(), 1);
    assert_eq!(rows[0]["order_id"], 1);
}

#[tokio::test]
async fn insert_missing_keeps_the_first_version() {
    let app = spawn_app().await;
    app.declare_orders().await;
    app.post_rows(
        "table=orders&mode=insert_missing",
        Some("a"),
        &[order(1, "first", "2026-10-12T01:00:00Z")],
    )
    .await;
    let r = app
        .post_rows(
            "table=orders&mode=insert_missing",
            Some("b"),
            &[
                order(1, "second", "2026-10-12T09:00:00Z"),
                order(2, "new", "2026-10-12T09:00:00Z"),
            ],
        )
        .await;
    let r = json_body(r).await;
    assert_eq!(
        (r["inserted"].as_u64(), r["unchanged"].as_u64()),
        (Some(1), Some(1))
    );
    let rows = app.rows("orders", "2026-10-12").await;
    let statuses: BTreeSet<&str> = rows.iter().map(|r| r["status"].as_str().unwrap()).collect();
    assert_eq!(statuses, BTreeSet::from(["first", "new"]));
}

#[tokio::test]
async fn rows_for_several_days_go_to_their_partitions_and_keep_the_partition_hash_true() {
    let app = spawn_app().await;
    app.declare_orders().await;
    let mut rows = vec![
        order(1, "paid", "2026-10-12T01:00:00Z"),
        order(2, "paid", "2026-10-12T01:00:00Z"),
    ];
    let mut other_day = order(3, "paid", "2026-10-13T01:00:00Z");
    other_day["ds"] = json!("2026-10-13");
    rows.push(other_day);
    let r = json_body(app.post_rows("table=orders", Some("days"), &rows).await).await;
    assert_eq!(r["partitions"].as_array().unwrap().len(), 2);
    assert_eq!(r["ds"], Value::Null);
    assert_eq!(app.count("orders", "2026-10-13").await, 1);

    // A later merge changes a row; the ETag must still be the hash of what
    // is stored: the same rows PUT back change nothing.
    app.post_rows(
        "table=orders",
        Some("later"),
        &[order(2, "refunded", "2026-10-12T05:00:00Z")],
    )
    .await;
    app.put_back_unchanged("/partitions/orders/2026-10-12")
        .await;
    let missing_ds = app
        .post_rows("table=orders", Some("no-ds"), &[json!({"order_id": 7})])
        .await;
    assert_eq!(missing_ds.status(), 422);
    assert_eq!(json_body(missing_ds).await["errors"][0]["column"], "ds");
}

#[tokio::test]
async fn appends_keep_identical_rows_distinct_and_a_retry_does_not_double() {
    let app = spawn_app().await;
    let event = json!({"ds": "2026-10-12", "kind": "click", "n": 1});
    let r = json_body(
        app.post_rows("table=events", Some("e1"), &[event.clone(), event.clone()])
            .await,
    )
    .await;
    assert_eq!(r["mode"], "append");
    assert_eq!(r["inserted"], 2);
    app.post_rows("table=events", Some("e1"), &[event.clone(), event.clone()])
        .await;
    assert_eq!(app.count("events", "2026-10-12").await, 2);
    app.post_rows("table=events", Some("e2"), std::slice::from_ref(&event))
        .await;
    assert_eq!(app.count("events", "2026-10-12").await, 3);
    let r = app
        .post_rows("table=events&mode=merge", Some("e3"), &[event])
        .await;
    assert_eq!(r.status(), 400);
}

#[tokio::test]
async fn a_keyed_put_is_replayed_and_its_key_is_visible() {
    let app = spawn_app().await;
    app.declare_orders().await;
    let send = |key: &'static str, rows: Vec<Value>| {
        app.client
            .put(app.url("/partitions/orders/2026-10-12"))
            .header("content-type", "application/x-ndjson")
            .header("idempotency-key", key)
            .body(ndjson(&rows))
            .send()
    };
    let first = send("put-1", orders_1_2_2()).await.unwrap();
    assert_eq!(first.headers()["idempotent-replayed"], "false");
    let etag = first.headers()["etag"].clone();
    let first = json_body(first).await;
    assert_eq!(first["rows_written"], 2);
    let again = send("put-1", orders_1_2_2()).await.unwrap();
    assert_eq!(again.headers()["idempotent-replayed"], "true");
    assert_eq!(again.headers()["etag"], etag);
    assert_eq!(json_body(again).await["load_id"], first["load_id"]);
    let other = send("put-1", vec![order(5, "paid", "2026-10-12T01:00:00Z")])
        .await
        .unwrap();
    assert_eq!(other.status(), 422);
    assert_eq!(app.count("orders", "2026-10-12").await, 2);
    let key = json_body(app.get("/idempotency-keys/put-1").await).await;
    assert_eq!(key["load_id"], first["load_id"]);
}

/// A large body streams into its write's transaction (a small one is read
/// whole before any): every body is large here.
fn streaming_bodies() -> idem::config::Settings {
    idem::config::Settings {
        small_body_bytes: 0,
        ..Default::default()
    }
}

/// A streamed body's rows in key order are upserted as they came (no sort),
/// others sorted first: either way the same rows, counts and content hash.
#[tokio::test]
async fn a_streamed_merge_in_key_order_or_out_of_it_writes_the_same_rows() {
    let app = spawn_app_with(streaming_bodies()).await;
    app.declare_orders().await;
    let ascending: Vec<Value> = (1..=40)
        .map(|id| order(id, "paid", "2026-10-12T01:00:00Z"))
        .collect();
    let first = app.post_rows("table=orders", Some("asc"), &ascending).await;
    let first = json_body(first).await;
    assert_eq!(
        (&first["inserted"], &first["updated"]),
        (&json!(40), &json!(0))
    );

    // Newer versions of keys 20 to 40 and new keys 41 to 60, backwards.
    let descending: Vec<Value> = (20..=60)
        .rev()
        .map(|id| order(id, "shipped", "2026-10-12T02:00:00Z"))
        .collect();
    let second = app
        .post_rows("table=orders", Some("desc"), &descending)
        .await;
    let second = json_body(second).await;
    assert_eq!(
        (&second["inserted"], &second["updated"]),
        (&json!(20), &json!(21))
    );
    assert_eq!(app.count("orders", "2026-10-12").await, 60);

    app.put_back_unchanged("/partitions/orders/2026-10-12")
        .await;
}

#[tokio::test]
async fn a_write_whose_connection_dies_leaves_no_rows_and_no_key_and_the_retry_succeeds_once() {
    let app = spawn_app_with(streaming_bodies()).await;
    app.declare_orders().await;
    // Each half more than a write reads before it takes its turn.
    let rows: Vec<Value> = (1..=2000)
        .map(|i| order(i, "paid", "2026-10-12T01:00:00Z"))
        .collect();
    let (first_half, second_half) = (ndjson(&rows[..1000]), ndjson(&rows[1000..]));
    let Trickle {
        body: tx,
        answer: pending,
    } = app.trickle(reqwest::Method::POST, "/rows?table=orders", Some("dies"));
    tx.send(Ok(first_half)).await.unwrap();
    // The write's transaction is open (it holds the key, and waits for the
    // rest of the body); kill its connection, not another's.
    let mut killed = 0;
    for _ in 0..100 {
        killed = sqlx::query_scalar::<_, i64>(
            "select count(pg_terminate_backend(pid)) from pg_stat_activity
              where datname = current_database() and application_name = 'idem'
                and xact_start is not null
                and (state = 'idle in transaction' or query ilike '%idem_incoming%')",
        )
        .fetch_one(&app.db)
        .await
        .unwrap();
        if killed > 0 {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    assert!(killed > 0, "found the write's connection");
    let _ = tx.send(Ok(second_half)).await;
    drop(tx);
    let answer = pending.await.unwrap().unwrap();
    assert!(answer.status().is_server_error(), "{}", answer.status());
    assert_eq!(app.count("orders", "2026-10-12").await, 0);
    assert_eq!(app.get("/idempotency-keys/dies").await.status(), 404);

    let retry = app.post_rows("table=orders", Some("dies"), &rows).await;
    assert_eq!(retry.status(), 200);
    assert_eq!(json_body(retry).await["inserted"], 2000);
    let replay = app.post_rows("table=orders", Some("dies"), &rows).await;
    assert_eq!(replay.headers()["idempotent-replayed"], "true");
    assert_eq!(app.count("orders", "2026-10-12").await, 2000);
}

#[tokio::test]
async fn a_csv_tombstone_deletes_its_key() {
    let app = spawn_app().await;
    app.declare_orders().await;
    app.post_rows(
        "table=orders",
        Some("a"),
        &[order(1, "paid", "2026-10-12T01:00:00Z")],
    )
    .await;
    let r = app
        .client
        .post(app.url("/rows?table=orders"))
        .header("content-type", "text/csv")
        .header("idempotency-key", "csv-delete")
        .body("order_id,ds,_deleted\n1,2026-10-12,true\n")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200, "{}", r.text().await.unwrap());
    assert_eq!(app.count("orders", "2026-10-12").await, 0);
}

#[tokio::test]
async fn expired_keys_are_reaped_and_then_count_as_new() {
    let settings = idem::config::Settings {
        idempotency_retention_secs: 1,
        ..Default::default()
    };
    let app = spawn_app_with(settings).await;
    app.declare_orders().await;
    let rows = [order(1, "paid", "2026-10-12T01:00:00Z")];
    let first = json_body(app.post_rows("table=orders", Some("short"), &rows).await).await;
    let replay = app.post_rows("table=orders", Some("short"), &rows).await;
    assert_eq!(replay.headers()["idempotent-replayed"], "true");
    tokio::time::sleep(std::time::Duration::from_millis(1100)).await;
    // Expired: no longer replayed (the server's remembered copy neither),
    // even before the reaper passes.
    let again = app.post_rows("table=orders", Some("short"), &rows).await;
    assert_eq!(again.headers()["idempotent-replayed"], "false");
    assert_ne!(json_body(again).await["load_id"], first["load_id"]);
    tokio::time::sleep(std::time::Duration::from_millis(1100)).await;
    let store = idem::store::Store::from_pool(app.db.clone());
    assert_eq!(store.reap_keys().await.unwrap(), 1);
    assert_eq!(app.get("/idempotency-keys/short").await.status(), 404);
}

#[tokio::test]
async fn a_request_that_waits_too_long_for_its_key_gets_409_with_retry_after() {
    let settings = idem::config::Settings {
        idempotency_wait_ms: 300,
        ..streaming_bodies()
    };
    let app = spawn_app_with(settings).await;
    app.declare_orders().await;
    // The first request holds the key while its (large) body trickles in.
    let Trickle {
        body: tx,
        answer: first,
    } = app.trickle(reqwest::Method::POST, "/rows?table=orders", Some("slow"));
    // More than a write reads before it takes its turn (and claims its key).
    let rows: Vec<Value> = (1..=1000)
        .map(|i| order(i, "paid", "2026-10-12T01:00:00Z"))
        .collect();
    tx.send(Ok(ndjson(&rows))).await.unwrap();
    let mut in_flight = false;
    for _ in 0..50 {
        let state = json_body(app.get("/idempotency-keys/slow").await).await;
        if state["status"] == "in_flight" {
            in_flight = true;
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    assert!(in_flight, "the first request holds its key");
    let second = app
        .post_rows(
            "table=orders",
            Some("slow"),
            &[order(1, "paid", "2026-10-12T01:00:00Z")],
        )
        .await;
    assert_eq!(second.status(), 409);
    assert_eq!(second.headers()["retry-after"], "1");
    assert_eq!(json_body(second).await["code"], "idempotency_key_in_flight");
    drop(tx);
    assert_eq!(first.await.unwrap().unwrap().status(), 200);
    let third = app.post_rows("table=orders", Some("slow"), &rows).await;
    assert_eq!(third.headers()["idempotent-replayed"], "true");
}
