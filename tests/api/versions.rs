//! `"write_mode": "versions"`: every version of a key kept once, identified
//! by key and cursor, however often and in whatever order it is sent; a
//! version sent again with other content refused or held; PUTs replace a
//! day's versions.

use std::collections::BTreeSet;

use serde_json::{json, Value};

use crate::helpers::*;
use crate::support::*;

const DAY: &str = "2026-10-12";
const STATUSES: [&str; 3] = ["pending", "paid", "shipped"];

/// The orders table, keeping every version of an order.
fn versions_table(extra: &str) -> String {
    ORDERS.replace(
        r#""cursor": "updated_at"}"#,
        &format!(r#""cursor": "updated_at", "write_mode": "versions"{extra}}}"#),
    )
}

async fn declare_versions(app: &TestApp, extra: &str) {
    let r = app.declare("orders", &versions_table(extra)).await;
    assert_eq!(r.status(), 201, "{}", r.text().await.unwrap());
}

/// Order `id`'s version `step` (0 pending, 1 paid, 2 shipped): each at a
/// cursor of its own.
fn version(id: i64, step: usize) -> Value {
    let at = format!(
        "2026-10-12T{:02}:{:02}:{:02}Z",
        step * 3,
        id / 60 % 60,
        id % 60
    );
    order(id, STATUSES[step], &at)
}

/// The issue's trail: 1,000 orders, each pending, paid and shipped.
fn trail() -> Vec<Value> {
    (0..3)
        .flat_map(|step| (1..=1000).map(move |id| version(id, step)))
        .collect()
}

/// Posts `rows` in bodies of the given sizes (the rest in one more), each
/// under its own key; returns the receipts.
async fn post_in_pieces(app: &TestApp, rows: &[Value], sizes: &[usize], key: &str) -> Vec<Value> {
    let mut receipts = Vec::new();
    let mut rest = rows;
    for (n, size) in sizes.iter().chain([&usize::MAX]).enumerate() {
        if rest.is_empty() {
            break;
        }
        let (piece, after) = rest.split_at((*size).min(rest.len()));
        rest = after;
        let r = app
            .post_rows("table=orders", Some(&format!("{key}-{n}")), piece)
            .await;
        assert_eq!(r.status(), 200, "{key}-{n}: {}", r.text().await.unwrap());
        receipts.push(json_body(r).await);
    }
    receipts
}

fn total(receipts: &[Value], field: &str) -> u64 {
    receipts.iter().map(|r| r[field].as_u64().unwrap()).sum()
}

async fn post_one(app: &TestApp, query: &str, key: &str, rows: &[Value]) -> (u16, Value) {
    let r = app.post_rows(query, Some(key), rows).await;
    (r.status().as_u16(), json_body(r).await)
}

#[tokio::test]
async fn the_trail_sent_twice_and_reordered_is_stored_once_per_version() {
    let app = spawn_app().await;
    declare_versions(&app, "").await;
    let rows = trail();
    // 60 rows go as arrays, 1,500 (over 128 kB) through COPY.
    let sizes = [60, 1500, 40, 700];
    let first = post_in_pieces(&app, &rows, &sizes, "first").await;
    assert_eq!(total(&first, "inserted"), 3000);
    assert_eq!(total(&first, "already_present"), 0);
    assert!(first.iter().all(|r| r["mode"] == "versions"), "{first:?}");

    let again = post_in_pieces(&app, &rows, &sizes, "again").await;
    assert_eq!(total(&again, "inserted"), 0);
    assert_eq!(total(&again, "already_present"), 3000);
    assert_eq!(total(&again, "unchanged"), 3000);
    assert!(again.iter().all(|r| r["changed"] == false), "{again:?}");

    let mut reordered = rows.clone();
    reordered.reverse();
    let third = post_in_pieces(&app, &reordered, &[1200, 30, 900], "reordered").await;
    assert_eq!(total(&third, "inserted"), 0);
    assert_eq!(total(&third, "already_present"), 3000);
    assert_eq!(total(&third, "conflicts"), 0);

    let stored = app.rows("orders", DAY).await;
    assert_eq!(stored.len(), 3000);
    let statuses: BTreeSet<(i64, String)> = stored
        .iter()
        .map(|r| (r["order_id"].as_i64().unwrap(), r["status"].to_string()))
        .collect();
    assert_eq!(statuses.len(), 3000, "each order in each of its statuses");
}

#[tokio::test]
async fn a_version_sent_again_with_other_content_is_refused_by_key_and_cursor() {
    let app = spawn_app().await;
    declare_versions(&app, "").await;
    let (status, _) = post_one(&app, "table=orders", "one", &[version(1, 0)]).await;
    assert_eq!(status, 200);

    let (status, problem) =
        post_one(&app, "table=orders", "two", &[version(2, 0), problem_row()]).await;
    assert_eq!(status, 422, "{problem}");
    assert_eq!(problem["code"], "bad_rows");
    let listed = &problem["errors"][0];
    assert_eq!(listed["column"], "updated_at");
    let message = listed["message"].as_str().unwrap();
    assert!(
        message.contains("\"order_id\": 1") && message.contains("2026-10-12"),
        "names the key and the cursor: {message}"
    );
    assert_eq!(app.count("orders", DAY).await, 1, "nothing written");

    // A large body (through COPY) the same.
    let mut large: Vec<Value> = (2..=1500).map(|id| version(id, 1)).collect();
    large.push(problem_row());
    let (status, problem) = post_one(&app, "table=orders", "three", &large).await;
    assert_eq!(status, 422, "{problem}");
    assert_eq!(problem["rejected"], 1, "{problem}");
    assert_eq!(app.count("orders", DAY).await, 1, "nothing written");
}

/// Order 1's first version with another amount.
fn problem_row() -> Value {
    let mut changed = version(1, 0);
    changed["amount"] = json!("99.00");
    changed
}

#[tokio::test]
async fn under_quarantine_a_conflicting_version_is_held_and_the_rest_written() {
    let app = spawn_app().await;
    declare_versions(&app, r#", "bad_rows": "quarantine""#).await;
    post_one(&app, "table=orders", "one", &[version(1, 0)]).await;

    let body = [version(2, 0), problem_row(), version(1, 1)];
    let (status, receipt) = post_one(&app, "table=orders", "two", &body).await;
    assert_eq!(status, 200, "{receipt}");
    assert_eq!(receipt["inserted"], 2, "{receipt}");
    assert_eq!(receipt["conflicts"], 1, "{receipt}");
    assert_eq!(receipt["already_present"], 0, "{receipt}");
    assert_eq!(app.count("orders", DAY).await, 3);

    let log = all_pages(&app, "/duplicates?table=orders", 100).await;
    assert_eq!(log.len(), 1, "{log:?}");
    let held = &log[0];
    assert_eq!(held["policy"], "conflict");
    assert_eq!(held["load_id"], receipt["load_id"]);
    assert_eq!(held["key"]["order_id"], 1);
    assert!(held["key"]["updated_at"].is_string(), "{held}");
    assert!(
        held["row"]["amount"].to_string().starts_with("99"),
        "{held}"
    );
    assert!(
        held["kept_row_hash"].is_string(),
        "the stored version's hash"
    );
}

#[tokio::test]
async fn one_version_twice_in_a_body_follows_the_duplicates_policy() {
    let mut changed = version(1, 0);
    changed["note"] = json!("again");
    let body = [version(1, 0), changed, version(2, 0)];
    for (policy, status, stored) in [("keep_one", 200, 2), ("hold", 200, 1), ("reject", 422, 0)] {
        let app = spawn_app().await;
        declare_versions(&app, &format!(r#", "duplicates": "{policy}""#)).await;
        let (got, answer) = post_one(&app, "table=orders", "k", &body).await;
        assert_eq!(got, status, "{policy}: {answer}");
        assert_eq!(app.count("orders", DAY).await, stored, "{policy}");
        if policy != "reject" {
            let log = all_pages(&app, "/duplicates?table=orders", 100).await;
            assert!(log.iter().all(|v| v["policy"] == policy), "{log:?}");
            assert!(
                log.iter().all(|v| v["key"]["updated_at"].is_string()),
                "{log:?}"
            );
        }
    }

    // The same row twice is one version.
    let app = spawn_app().await;
    declare_versions(&app, "").await;
    let (got, receipt) = post_one(&app, "table=orders", "k", &[version(1, 0), version(1, 0)]).await;
    assert_eq!(got, 200, "{receipt}");
    assert_eq!(app.count("orders", DAY).await, 1);
}

#[tokio::test]
async fn versions_and_other_modes_do_not_mix() {
    let app = spawn_app().await;
    declare_versions(&app, "").await;
    for mode in ["merge", "patch", "insert_missing", "append"] {
        let (status, problem) = post_one(
            &app,
            &format!("table=orders&mode={mode}"),
            mode,
            &[version(1, 0)],
        )
        .await;
        assert_eq!(status, 400, "{mode}: {problem}");
        assert!(
            problem["detail"].as_str().unwrap().contains("versions"),
            "{problem}"
        );
    }
    let (status, _) = post_one(&app, "table=orders&mode=versions", "v", &[version(1, 0)]).await;
    assert_eq!(status, 200);

    let r = app.declare("merged", ORDERS).await;
    assert_eq!(r.status(), 201);
    let (status, problem) =
        post_one(&app, "table=merged&mode=versions", "m", &[version(1, 0)]).await;
    assert_eq!(status, 400, "{problem}");
    assert!(
        problem["detail"].as_str().unwrap().contains("write_mode"),
        "{problem}"
    );
    let r = app
        .put_ndjson(
            &format!("/partitions/merged/{DAY}?mode=versions"),
            &[version(1, 0)],
        )
        .await;
    assert_eq!(r.status(), 400);
}

#[tokio::test]
async fn a_tombstone_is_refused_by_a_table_that_keeps_versions() {
    let app = spawn_app().await;
    declare_versions(&app, "").await;
    let mut tombstone = version(1, 1);
    tombstone["_deleted"] = json!(true);
    let (status, problem) = post_one(&app, "table=orders", "t", &[version(1, 0), tombstone]).await;
    assert_eq!(status, 422, "{problem}");
    let listed = &problem["errors"][0];
    assert_eq!(listed["column"], "_deleted");
    assert!(
        listed["message"]
            .as_str()
            .unwrap()
            .contains("keeps every version"),
        "{problem}"
    );
    assert_eq!(app.count("orders", DAY).await, 0);

    let mut live = version(1, 0);
    live["_deleted"] = json!(false);
    let (status, problem) = post_one(&app, "table=orders", "f", &[live]).await;
    assert_eq!(status, 200, "{problem}");
}

#[tokio::test]
async fn a_put_replaces_a_days_versions_and_its_own_get_changes_nothing() {
    let app = spawn_app().await;
    declare_versions(&app, "").await;
    let path = format!("/partitions/orders/{DAY}");
    let day: Vec<Value> = (0..3)
        .flat_map(|step| (1..=50).map(move |id| version(id, step)))
        .collect();
    let r = app.put_ndjson(&path, &day).await;
    assert_eq!(r.status(), 200, "{}", r.text().await.unwrap());
    assert_eq!(app.count("orders", DAY).await, 150);

    let fewer: Vec<Value> = (1..=50).map(|id| version(id, 0)).collect();
    let r = app
        .put_ndjson(&format!("{path}?mode=versions"), &fewer)
        .await;
    assert_eq!(r.status(), 200, "{}", r.text().await.unwrap());
    assert_eq!(
        app.count("orders", DAY).await,
        50,
        "the day's versions replaced"
    );
    assert_eq!(app.rows("orders", DAY).await.len(), 50);

    let r = app.put_ndjson(&path, &day).await;
    assert_eq!(r.status(), 200);
    let read = app.get(&path).await.text().await.unwrap();
    let r = app.put(&path, "application/x-ndjson", read).await;
    let receipt = json_body(r).await;
    assert_eq!(receipt["changed"], false, "{receipt}");
    assert_eq!(receipt["row_count"], 150, "{receipt}");

    let r = app.put_ndjson(&format!("{path}?mode=merge"), &fewer).await;
    assert_eq!(r.status(), 400);
    let range = format!("/partitions/orders?from={DAY}&to={DAY}&mode=versions");
    let r = app.put_ndjson(&range, &day).await;
    assert_eq!(r.status(), 200, "{}", r.text().await.unwrap());
    assert_eq!(app.count("orders", DAY).await, 150);
}

#[tokio::test]
async fn a_declared_write_mode_is_the_mode_of_a_post_without_one() {
    let app = spawn_app().await;
    let declaration = ORDERS.replace(
        r#""cursor": "updated_at"}"#,
        r#""cursor": "updated_at", "write_mode": "insert_missing"}"#,
    );
    assert_eq!(app.declare("orders", &declaration).await.status(), 201);
    let (_, receipt) = post_one(&app, "table=orders", "a", &[version(1, 0)]).await;
    assert_eq!(receipt["mode"], "insert_missing");
    let (_, receipt) = post_one(&app, "table=orders", "b", &[version(1, 1), version(2, 0)]).await;
    assert_eq!(receipt["mode"], "insert_missing");
    assert_eq!(receipt["inserted"], 1, "{receipt}");
    assert_eq!(receipt["unchanged"], 1, "{receipt}");
    assert_eq!(
        receipt["already_present"], 0,
        "another row under the key: {receipt}"
    );
    let stored = app.rows("orders", DAY).await;
    assert_eq!(stored[0]["status"], "pending", "{stored:?}");

    let (_, receipt) = post_one(&app, "table=orders", "c", &[version(1, 0)]).await;
    assert_eq!(receipt["already_present"], 1, "{receipt}");
    assert_eq!(receipt["conflicts"], 0, "{receipt}");
    let (_, receipt) = post_one(&app, "table=orders&mode=merge", "d", &[version(2, 0)]).await;
    assert_eq!(receipt["already_present"], 1, "{receipt}");
}

#[tokio::test]
async fn clients_posting_overlapping_versions_at_once_store_each_version_once() {
    let app = spawn_app().await;
    declare_versions(&app, "").await;
    let posts = (0..8).map(|client: i64| {
        let app = &app;
        async move {
            // Client i sends orders 25i+1 ..= 25i+100: each order by up to
            // four clients, in an order of its own.
            let mut rows: Vec<Value> = (0..3)
                .flat_map(|step| {
                    (25 * client + 1..=25 * client + 100).map(move |id| version(id, step))
                })
                .collect();
            if client % 2 == 1 {
                rows.reverse();
            }
            post_one(app, "table=orders", &format!("client-{client}"), &rows).await
        }
    });
    let answers = futures::future::join_all(posts).await;
    let mut inserted = 0;
    for (status, receipt) in &answers {
        assert_eq!(*status, 200, "{receipt}");
        assert_eq!(receipt["conflicts"], 0, "{receipt}");
        inserted += receipt["inserted"].as_u64().unwrap();
    }
    let versions = 3 * (25 * 7 + 100);
    assert_eq!(inserted, versions);
    assert_eq!(
        app.count("orders", DAY).await,
        i64::try_from(versions).unwrap()
    );
}

#[tokio::test]
async fn a_staged_load_and_a_whole_table_put_keep_a_days_versions() {
    let app = spawn_app().await;
    declare_versions(&app, "").await;
    let request = json!({"table": "orders", "target": {"partitions": [DAY]}});
    let r = app
        .client
        .post(app.url("/loads"))
        .header("idempotency-key", "load")
        .json(&request)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 201, "{}", r.text().await.unwrap());
    let load_id = json_body(r).await["load_id"].as_str().unwrap().to_string();
    // Each part brings some versions of orders 1..=20; parts 2 and 3 repeat
    // part 1's versions, which count once.
    for (n, steps) in [(1, 0..2), (2, 1..3), (3, 0..3)] {
        let rows: Vec<Value> = steps
            .flat_map(|step| (1..=20).map(move |id| version(id, step)))
            .collect();
        let path = format!("/loads/{load_id}/parts/{n}?ds={DAY}");
        let r = app.put_ndjson(&path, &rows).await;
        assert_eq!(r.status(), 200, "part {n}: {}", r.text().await.unwrap());
    }
    let r = app
        .client
        .post(app.url(&format!("/loads/{load_id}/publish")))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200, "{}", r.text().await.unwrap());
    assert_eq!(app.count("orders", DAY).await, 60);

    let rows: Vec<Value> = (1..=5).map(|id| version(id, 2)).collect();
    let r = app
        .put_ndjson("/tables/orders/rows?mode=versions", &rows)
        .await;
    assert_eq!(r.status(), 200, "{}", r.text().await.unwrap());
    assert_eq!(app.count("orders", DAY).await, 5);
}
