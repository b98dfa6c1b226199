//! A day loaded from file A, then from a corrected file B, then from A
//! again (a revert, within the keys' retention): the day ends holding A,
//! whether A's key is sent by curl, `idem put` or `idem backfill`. A keyed
//! PUT is answered from its key's record only while the day still holds
//! what that record says.

use std::sync::Arc;

use serde_json::{json, Value};

use crate::cli::{file_with, idem_json, results};
use crate::helpers::*;
use crate::support::*;

const DAY: &str = "2026-10-12";

fn file_a() -> Vec<Value> {
    vec![
        order(1, "paid", "2026-10-12T01:00:00Z"),
        order(2, "paid", "2026-10-12T02:00:00Z"),
    ]
}

fn file_b() -> Vec<Value> {
    vec![order(3, "refunded", "2026-10-12T03:00:00Z")]
}

async fn put_keyed(app: &TestApp, key: &str, rows: &[Value]) -> reqwest::Response {
    let day = format!("/partitions/orders/{DAY}");
    app.send_keyed(reqwest::Method::PUT, &day, key, rows).await
}

/// The day's rows as the API gives them back, sorted.
async fn day_rows(app: &TestApp) -> Vec<i64> {
    let mut ids: Vec<i64> = app
        .rows("orders", DAY)
        .await
        .iter()
        .map(|r| r["order_id"].as_i64().unwrap())
        .collect();
    ids.sort_unstable();
    ids
}

async fn stages(app: &TestApp) -> i64 {
    sqlx::query_scalar("select count(*) from pg_tables where schemaname = 'idem_staging'")
        .fetch_one(&app.db)
        .await
        .unwrap()
}

#[tokio::test]
async fn a_keyed_put_sent_again_after_another_load_replaced_its_day_applies_its_body() {
    let app = spawn_app().await;
    app.declare_orders().await;
    let first = json_body(put_keyed(&app, "file-a", &file_a()).await).await;
    assert_eq!(first["changed"], true);
    put_keyed(&app, "file-b", &file_b()).await;
    assert_eq!(day_rows(&app).await, [3]);

    // The revert: the day holds B, so A's record no longer describes it.
    let revert = put_keyed(&app, "file-a", &file_a()).await;
    assert_eq!(revert.status(), 200);
    assert_eq!(revert.headers()["idempotent-replayed"], "false");
    let revert = json_body(revert).await;
    assert_eq!(
        (
            &revert["changed"],
            &revert["replayed"],
            &revert["rows_written"]
        ),
        (&json!(true), &json!(false), &json!(2))
    );
    assert_ne!(revert["load_id"], first["load_id"]);
    assert_eq!(day_rows(&app).await, [1, 2]);
    // The key's record now describes the newest execution, and stands.
    let key = json_body(app.get("/idempotency-keys/file-a").await).await;
    assert_eq!(key["load_id"], revert["load_id"]);
    let again = put_keyed(&app, "file-a", &file_a()).await;
    assert_eq!(again.headers()["idempotent-replayed"], "true");
    assert_eq!(json_body(again).await["load_id"], revert["load_id"]);

    // Another request under a key whose record no longer stands is still
    // refused, and leaves neither rows nor a stage behind.
    let other = put_keyed(&app, "file-b", &file_a()[..1]).await;
    assert_eq!(other.status(), 422);
    assert_eq!(
        json_body(other).await["code"],
        json!("idempotency_key_reused")
    );
    assert_eq!(day_rows(&app).await, [1, 2]);
    assert_eq!(stages(&app).await, 0);

    // A day dropped since is loaded again by its key's request.
    let gone = app
        .client
        .delete(app.url(&format!("/partitions/orders/{DAY}")))
        .send()
        .await
        .unwrap();
    assert_eq!(gone.status(), 204);
    let back = json_body(put_keyed(&app, "file-a", &file_a()).await).await;
    assert_eq!(
        (&back["changed"], &back["replayed"]),
        (&json!(true), &json!(false))
    );
    assert_eq!(day_rows(&app).await, [1, 2]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn keyed_reverts_sent_at_once_write_the_day_once() {
    let app = Arc::new(spawn_app().await);
    app.declare_orders().await;
    put_keyed(&app, "file-a", &file_a()).await;
    put_keyed(&app, "file-b", &file_b()).await;
    let sends = (0..6).map(|_| {
        let app = app.clone();
        async move {
            let r = put_keyed(&app, "file-a", &file_a()).await;
            let replayed = r.headers()["idempotent-replayed"].to_str().unwrap() == "true";
            (replayed, json_body(r).await)
        }
    });
    let answers = futures::future::join_all(sends).await;
    let fresh: Vec<&Value> = answers.iter().filter(|a| !a.0).map(|a| &a.1).collect();
    assert_eq!(fresh.len(), 1, "one write under the key: {answers:?}");
    for (_, answer) in &answers {
        assert_eq!(answer["load_id"], fresh[0]["load_id"], "{answers:?}");
    }
    assert_eq!(day_rows(&app).await, [1, 2]);
}

/// A revert run by another process moves the key on: a process that
/// remembers the key's first record answers with the revert's load, not
/// the one it replaced (the day holds the same content under both).
#[tokio::test]
async fn a_revert_run_by_another_process_is_what_a_repeat_gets_back() {
    let first = spawn_app().await;
    first.declare_orders().await;
    let other = spawn_app_on(first.options.clone(), Default::default()).await;
    let original = json_body(put_keyed(&first, "file-a", &file_a()).await).await;
    put_keyed(&other, "file-b", &file_b()).await;
    let revert = json_body(put_keyed(&other, "file-a", &file_a()).await).await;
    assert_eq!(revert["replayed"], json!(false));
    assert_ne!(revert["load_id"], original["load_id"]);
    let repeat = json_body(put_keyed(&first, "file-a", &file_a()).await).await;
    assert_eq!(
        (&repeat["replayed"], &repeat["load_id"]),
        (&json!(true), &revert["load_id"])
    );
    assert_eq!(day_rows(&first).await, [1, 2]);
}

#[tokio::test]
async fn idem_put_of_a_file_a_corrected_file_and_the_first_again_leaves_the_first() {
    let app = spawn_app().await;
    app.declare_orders().await;
    let (a, b) = (
        file_with(".ndjson", &ndjson(&file_a())),
        file_with(".ndjson", &ndjson(&file_b())),
    );
    let put = |file: &tempfile::NamedTempFile| {
        let path = file.path().to_str().unwrap().to_string();
        let base = app.base.clone();
        async move { idem_json(&base, &["put", "orders", DAY, &path]).await }
    };
    for (file, ids) in [(&a, vec![1, 2]), (&b, vec![3])] {
        let (code, _, stderr) = put(file).await;
        assert_eq!(code, Some(0), "{stderr}");
        assert_eq!(day_rows(&app).await, ids);
    }
    let (code, receipt, stderr) = put(&a).await;
    assert_eq!(code, Some(0), "{stderr}");
    assert_eq!(
        (&receipt["changed"], &receipt["replayed"]),
        (&json!(true), &json!(false))
    );
    assert_eq!(day_rows(&app).await, [1, 2]);
}

#[tokio::test]
async fn idem_backfill_of_a_file_a_corrected_file_and_the_first_again_leaves_the_first() {
    let app = spawn_app().await;
    app.declare_orders().await;
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join(format!("ds={DAY}.ndjson"));
    let pattern = dir.path().join("ds={ds}.ndjson");
    let pattern = pattern.to_str().unwrap();
    let backfill = [
        "backfill", "orders", "--from", DAY, "--to", DAY, "--files", pattern, "--json",
    ];
    let mut last = Vec::new();
    for (rows, ids) in [
        (file_a(), vec![1, 2]),
        (file_b(), vec![3]),
        (file_a(), vec![1, 2]),
    ] {
        std::fs::write(&file, ndjson(&rows)).unwrap();
        let (code, report, stderr) = idem_json(&app.base, &backfill).await;
        assert_eq!(code, Some(0), "{stderr}");
        assert_eq!(day_rows(&app).await, ids);
        last = results(&report);
    }
    assert_eq!(last, [(DAY.to_string(), "changed".to_string())]);
}
