//! Loads of several partitions: a range in one request, a staged load in
//! parts, its publish, abandonment and refusals.

use serde_json::{json, Value};

use crate::helpers::*;
use crate::support::*;

/// Days of October 2026, from the 12th.
fn day(offset: u32) -> String {
    format!("2026-10-{:02}", 12 + offset)
}

/// `rows` orders of `ds`, ids from `first`, in status `status`.
fn day_body(ds: &str, first: i64, rows: i64, status: &str) -> String {
    (first..first + rows)
        .map(|id| order_line(id, ds, status))
        .collect()
}

async fn ndjson_put(app: &TestApp, path: &str, body: String) -> reqwest::Response {
    app.put(path, "application/x-ndjson", body).await
}

async fn open(app: &TestApp, key: &str, request: &Value) -> reqwest::Response {
    app.client
        .post(app.url("/loads"))
        .header("idempotency-key", key)
        .json(request)
        .send()
        .await
        .unwrap()
}

async fn publish(app: &TestApp, load_id: &str) -> reqwest::Response {
    app.client
        .post(app.url(&format!("/loads/{load_id}/publish")))
        .send()
        .await
        .unwrap()
}

async fn part(app: &TestApp, load_id: &str, n: u32, ds: &str, body: String) -> Value {
    let r = app
        .put(
            &format!("/loads/{load_id}/parts/{n}?ds={ds}"),
            "application/x-ndjson",
            body,
        )
        .await;
    assert_eq!(r.status(), 200, "part {n}");
    json_body(r).await
}

/// Tables in idem's staging schema (stages and parts).
async fn staged_tables(app: &TestApp) -> i64 {
    sqlx::query_scalar("select count(*) from pg_tables where schemaname = 'idem_staging'")
        .fetch_one(&app.db)
        .await
        .unwrap()
}

/// Each day's row count as the API tells it (`None`: no partition).
async fn day_counts(app: &TestApp, days: u32) -> Vec<Option<u64>> {
    let mut counts = Vec::new();
    for d in 0..days {
        let r = app
            .client
            .head(app.url(&format!("/partitions/orders/{}", day(d))))
            .send()
            .await
            .unwrap();
        counts.push((r.status() == 200).then(|| {
            r.headers()["idem-row-count"]
                .to_str()
                .unwrap()
                .parse()
                .unwrap()
        }));
    }
    counts
}

#[tokio::test]
async fn a_range_put_replaces_every_day_of_it_at_once_and_again_changes_nothing() {
    let app = spawn_app().await;
    app.declare_orders().await;
    for d in 0..3 {
        let r = ndjson_put(
            &app,
            &format!("/partitions/orders/{}", day(d)),
            day_body(&day(d), 1, 5, "old"),
        )
        .await;
        assert_eq!(r.status(), 200);
    }
    // Days 0 and 1 get new rows, day 2 none (it becomes empty), and the
    // range reaches days 3 and 4, which did not exist.
    let body = day_body(&day(0), 1, 3, "new") + &day_body(&day(1), 100, 4, "new");
    let path = format!("/partitions/orders?from={}&to={}", day(0), day(4));
    let r = ndjson_put(&app, &path, body.clone()).await;
    assert_eq!(r.status(), 200);
    let etag = r.headers()["etag"].to_str().unwrap().to_string();
    let receipt = json_body(r).await;
    assert_eq!(receipt["mode"], "replace_range");
    assert_eq!(receipt["rows_received"], 7);
    assert_eq!(receipt["rows_written"], 7);
    assert_eq!(receipt["changed"], true);
    assert_eq!(receipt["partitions"].as_array().unwrap().len(), 5);
    assert_eq!(
        etag,
        format!("\"{}\"", receipt["content_sha256"].as_str().unwrap())
    );
    assert_eq!(
        day_counts(&app, 5).await,
        [Some(3), Some(4), Some(0), Some(0), Some(0)]
    );
    assert!(app
        .rows("orders", &day(0))
        .await
        .iter()
        .all(|r| r["status"] == "new"));

    let again = json_body(ndjson_put(&app, &path, body).await).await;
    assert_eq!(again["changed"], false);
    assert_eq!(again["rows_written"], 0);
    assert_eq!(again["content_sha256"], receipt["content_sha256"]);
    assert!(again["partitions"]
        .as_array()
        .unwrap()
        .iter()
        .all(|p| p["changed"] == false));
}

#[tokio::test]
async fn a_range_put_with_a_row_outside_the_range_is_refused_and_changes_no_day() {
    let app = spawn_app().await;
    app.declare_orders().await;
    let r = ndjson_put(
        &app,
        &format!("/partitions/orders/{}", day(0)),
        day_body(&day(0), 1, 5, "old"),
    )
    .await;
    assert_eq!(r.status(), 200);
    let body = day_body(&day(0), 1, 2, "new") + &day_body(&day(5), 50, 1, "new");
    let path = format!("/partitions/orders?from={}&to={}", day(0), day(1));
    let r = ndjson_put(&app, &path, body).await;
    assert_eq!(r.status(), 422);
    let problem = json_body(r).await;
    assert_eq!(problem["code"], "bad_rows");
    assert_eq!(problem["errors"][0]["line"], 3);
    assert_eq!(problem["errors"][0]["column"], "ds");
    assert_eq!(day_counts(&app, 2).await, [Some(5), None]);
    assert!(app
        .rows("orders", &day(0))
        .await
        .iter()
        .all(|r| r["status"] == "old"));
}

#[tokio::test]
async fn a_load_of_seven_parts_publishes_their_union_once() {
    let app = spawn_app().await;
    app.declare_orders().await;
    for d in 0..7 {
        let path = format!("/partitions/orders/{}", day(d));
        assert_eq!(
            ndjson_put(&app, &path, day_body(&day(d), 1, 20, "old"))
                .await
                .status(),
            200
        );
    }
    let request = json!({"table": "orders", "target": {"range": {"from": day(0), "to": day(6)}}});
    let r = open(&app, "week-42", &request).await;
    assert_eq!(r.status(), 201);
    assert_eq!(r.headers()["idempotent-replayed"], "false");
    let load = json_body(r).await;
    assert_eq!(load["status"], "open");
    let load_id = load["load_id"].as_str().unwrap().to_string();
    // The same key again: the same load.
    let r = open(&app, "week-42", &request).await;
    assert_eq!(r.status(), 201);
    assert_eq!(r.headers()["idempotent-replayed"], "true");
    assert_eq!(json_body(r).await["load_id"], load_id.as_str());

    for d in [0, 1, 3, 4] {
        part(
            &app,
            &load_id,
            d + 1,
            &day(d),
            day_body(&day(d), 1, 10 + i64::from(d), "new"),
        )
        .await;
    }
    // Part 3 sent three times: once wrong, then right twice.
    part(
        &app,
        &load_id,
        3,
        &day(2),
        day_body(&day(2), 1, 99, "wrong"),
    )
    .await;
    let right = part(&app, &load_id, 3, &day(2), day_body(&day(2), 1, 12, "new")).await;
    assert_eq!(right["changed"], true);
    let same = part(&app, &load_id, 3, &day(2), day_body(&day(2), 1, 12, "new")).await;
    assert_eq!(same["changed"], false);
    assert_eq!(same["partitions"][day(2)], 12);
    // Parts 6 and 7 at once.
    let (day5, day6) = (day(5), day(6));
    let (six, seven) = tokio::join!(
        part(&app, &load_id, 6, &day5, day_body(&day5, 1, 15, "new")),
        part(&app, &load_id, 7, &day6, day_body(&day6, 1, 16, "new")),
    );
    assert_eq!(
        (six["rows_staged"].clone(), seven["rows_staged"].clone()),
        (json!(15), json!(16))
    );
    // Nothing is live before the publish.
    assert_eq!(day_counts(&app, 7).await, vec![Some(20); 7]);

    let view = json_body(app.get(&format!("/loads/{load_id}")).await).await;
    assert_eq!(view["parts"].as_array().unwrap().len(), 7);
    assert_eq!(view["partitions"][day(2)], 12);

    let r = publish(&app, &load_id).await;
    assert_eq!(r.status(), 200);
    let receipt = json_body(r).await;
    assert_eq!(receipt["status"], "published");
    assert_eq!(receipt["replayed"], false);
    assert_eq!(receipt["rows_written"], 10 + 11 + 12 + 13 + 14 + 15 + 16);
    assert_eq!(
        day_counts(&app, 7).await,
        (10..17).map(Some).collect::<Vec<_>>()
    );
    for d in 0..7 {
        assert!(app
            .rows("orders", &day(d))
            .await
            .iter()
            .all(|r| r["status"] == "new"));
    }
    let again = json_body(publish(&app, &load_id).await).await;
    assert_eq!(again["replayed"], true);
    assert_eq!(again["load_id"], receipt["load_id"]);
    assert_eq!(again["content_sha256"], receipt["content_sha256"]);
    let view = json_body(app.get(&format!("/loads/{load_id}")).await).await;
    assert_eq!(view["status"], "published");
    assert_eq!(view["receipt"]["rows_written"], receipt["rows_written"]);
    // No part table is left behind.
    assert_eq!(staged_tables(&app).await, 0);
}

#[tokio::test]
async fn parts_with_one_key_twice_are_resolved_by_the_rule_of_one_put() {
    let app = spawn_app().await;
    app.declare_orders().await;
    let request = json!({"table": "orders", "target": {"partitions": [day(0)]}});
    let load = json_body(open(&app, "dups", &request).await).await;
    let load_id = load["load_id"].as_str().unwrap();
    let early = order_line(1, &day(0), "early");
    let late = order_line(1, &day(0), "late").replace("T01:02:03Z", "T09:02:03Z");
    part(
        &app,
        load_id,
        1,
        &day(0),
        early + &order_line(2, &day(0), "x"),
    )
    .await;
    part(&app, load_id, 2, &day(0), late).await;
    let receipt = json_body(publish(&app, load_id).await).await;
    assert_eq!(receipt["duplicates"], 1);
    assert_eq!(receipt["rows_written"], 2);
    let rows = app.rows("orders", &day(0)).await;
    assert_eq!(rows.len(), 2);
    assert!(rows.iter().any(|r| r["status"] == "late"));
}

#[tokio::test]
async fn an_abandoned_load_takes_no_part_and_a_key_reused_for_another_load_is_refused() {
    let app = spawn_app().await;
    app.declare_orders().await;
    let request = json!({"table": "orders", "target": {"partitions": [day(0), day(1)]}});
    let load = json_body(open(&app, "k", &request).await).await;
    let load_id = load["load_id"].as_str().unwrap();
    let other = json!({"table": "orders", "target": {"partitions": [day(0)]}});
    let r = open(&app, "k", &other).await;
    assert_eq!(r.status(), 422);
    assert_eq!(json_body(r).await["code"], "idempotency_key_reused");
    part(&app, load_id, 1, &day(0), day_body(&day(0), 1, 3, "x")).await;
    // A part outside the target.
    let r = app
        .put(
            &format!("/loads/{load_id}/parts/2?ds={}", day(4)),
            "application/x-ndjson",
            day_body(&day(4), 1, 1, "x"),
        )
        .await;
    assert_eq!(r.status(), 400);

    let r = app
        .client
        .delete(app.url(&format!("/loads/{load_id}")))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(json_body(r).await["status"], "abandoned");
    let r = app
        .put(
            &format!("/loads/{load_id}/parts/2?ds={}", day(1)),
            "application/x-ndjson",
            day_body(&day(1), 1, 1, "x"),
        )
        .await;
    assert_eq!(r.status(), 409);
    assert_eq!(json_body(r).await["code"], "load_not_open");
    let r = publish(&app, load_id).await;
    assert_eq!(r.status(), 409);
    assert_eq!(day_counts(&app, 2).await, [None, None]);
    assert_eq!(staged_tables(&app).await, 0);
}

#[tokio::test]
async fn a_whole_table_put_drops_the_days_its_body_lacks_and_again_changes_nothing() {
    let app = spawn_app().await;
    app.declare_orders().await;
    for d in 0..3 {
        let path = format!("/partitions/orders/{}", day(d));
        assert_eq!(
            ndjson_put(&app, &path, day_body(&day(d), 1, 4, "old"))
                .await
                .status(),
            200
        );
    }
    let body = day_body(&day(1), 1, 2, "new") + &day_body(&day(3), 1, 3, "new");
    let r = ndjson_put(&app, "/tables/orders/rows", body.clone()).await;
    assert_eq!(r.status(), 200);
    let receipt = json_body(r).await;
    assert_eq!(receipt["mode"], "replace_table");
    assert_eq!(receipt["row_count"], 5);
    assert_eq!(day_counts(&app, 4).await, [None, Some(2), None, Some(3)]);
    let again = json_body(ndjson_put(&app, "/tables/orders/rows", body).await).await;
    assert_eq!(again["changed"], false);
    assert_eq!(again["content_sha256"], receipt["content_sha256"]);
}

#[tokio::test]
async fn a_dry_run_tells_what_would_change_and_changes_nothing() {
    let app = spawn_app().await;
    app.declare_orders().await;
    let path = format!("/partitions/orders/{}", day(0));
    assert_eq!(
        ndjson_put(&app, &path, day_body(&day(0), 1, 4, "old"))
            .await
            .status(),
        200
    );
    let range = format!(
        "/partitions/orders?from={}&to={}&dry_run=true",
        day(0),
        day(1)
    );
    let r = ndjson_put(&app, &range, day_body(&day(0), 1, 2, "new")).await;
    assert_eq!(r.status(), 200);
    let receipt = json_body(r).await;
    assert_eq!(receipt["dry_run"], true);
    assert_eq!(receipt["changed"], true);
    assert_eq!(day_counts(&app, 2).await, [Some(4), None]);
    let ledger: i64 =
        sqlx::query_scalar("select count(*) from idem.loads where mode = 'replace_range'")
            .fetch_one(&app.db)
            .await
            .unwrap();
    assert_eq!(ledger, 0);
}

#[tokio::test]
async fn a_range_put_under_quarantine_writes_the_good_rows_and_keeps_the_bad_one() {
    let app = spawn_app().await;
    app.declare_orders().await;
    let bad = format!(
        "{{\"order_id\":9,\"ds\":\"{}\",\"amount\":\"lots\"}}\n",
        day(1)
    );
    let body = day_body(&day(0), 1, 3, "new") + &bad;
    let path = format!(
        "/partitions/orders?from={}&to={}&bad_rows=quarantine",
        day(0),
        day(1)
    );
    let r = ndjson_put(&app, &path, body).await;
    assert_eq!(r.status(), 200);
    let receipt = json_body(r).await;
    assert_eq!(receipt["rows_received"], 4);
    assert_eq!(receipt["rows_written"], 3);
    assert_eq!(receipt["rejected"], 1);
    assert_eq!(day_counts(&app, 2).await, [Some(3), Some(0)]);
    let load_id = receipt["load_id"].as_str().unwrap();
    let rejects = json_body(
        app.get(&format!("/rejects?table=orders&load_id={load_id}"))
            .await,
    )
    .await;
    assert_eq!(rejects.as_array().unwrap().len(), 1, "{rejects}");
    assert_eq!(rejects[0]["errors"][0]["column"], "amount");
}

#[tokio::test]
async fn parts_staged_before_the_table_changed_are_refused_at_publish_until_sent_again() {
    let app = spawn_app().await;
    app.declare_orders().await;
    let request = json!({"table": "orders", "target": {"partitions": [day(0)]}});
    let load = json_body(open(&app, "evolving", &request).await).await;
    let load_id = load["load_id"].as_str().unwrap();
    part(&app, load_id, 1, &day(0), day_body(&day(0), 1, 3, "x")).await;
    let wider = ORDERS.replace(
        r#""note": "text"}"#,
        r#""note": "text", "channel": "text"}"#,
    );
    assert!(app.declare("orders", &wider).await.status().is_success());
    let r = publish(&app, load_id).await;
    assert_eq!(r.status(), 409);
    assert_eq!(json_body(r).await["code"], "schema_conflict");
    assert_eq!(day_counts(&app, 1).await, [None]);
    part(&app, load_id, 1, &day(0), day_body(&day(0), 1, 3, "x")).await;
    let r = publish(&app, load_id).await;
    assert_eq!(r.status(), 200);
    assert_eq!(day_counts(&app, 1).await, [Some(3)]);
}

#[tokio::test]
async fn a_load_is_seen_and_driven_only_as_its_tables_grants_allow() {
    let app = spawn_app().await;
    app.declare_orders().await;
    let token = |name: &str, scopes: Value, tables: Value| json!({"name": name, "scopes": scopes, "tables": tables});
    let (_, reader) = make_token(
        &app.client,
        &app.base,
        &token("reader", json!(["read"]), json!(["orders"])),
    )
    .await;
    let (_, writer) = make_token(
        &app.client,
        &app.base,
        &token("writer", json!(["read", "write"]), json!(["orders"])),
    )
    .await;
    let (_, stranger) = make_token(
        &app.client,
        &app.base,
        &token("other", json!(["read", "write"]), json!(["sales"])),
    )
    .await;
    let (reader, writer, stranger) = (
        client_with_token(&reader),
        client_with_token(&writer),
        client_with_token(&stranger),
    );
    let request =
        json!({"table": "orders", "target": {"partitions": [day(0)]}, "audits": {"min_rows": 5}});
    let post = |client: &reqwest::Client| {
        client
            .post(app.url("/loads"))
            .header("idempotency-key", "grants")
            .json(&request)
            .send()
    };
    assert_eq!(post(&reader).await.unwrap().status(), 403);
    let r = post(&writer).await.unwrap();
    assert_eq!(r.status(), 201);
    let load_id = json_body(r).await["load_id"].as_str().unwrap().to_string();
    let view = format!("/loads/{load_id}");
    assert_eq!(
        reader.get(app.url(&view)).send().await.unwrap().status(),
        200
    );
    assert_eq!(
        stranger.get(app.url(&view)).send().await.unwrap().status(),
        404
    );
    let publish = format!("/loads/{load_id}/publish");
    assert_eq!(
        reader
            .post(app.url(&publish))
            .send()
            .await
            .unwrap()
            .status(),
        403
    );
    assert_eq!(
        stranger
            .post(app.url(&publish))
            .send()
            .await
            .unwrap()
            .status(),
        404
    );
    part(&app, &load_id, 1, &day(0), day_body(&day(0), 1, 2, "x")).await;
    let r = writer.post(app.url(&publish)).send().await.unwrap();
    assert_eq!(r.status(), 422);
    assert_eq!(json_body(r).await["report"]["passed"], false);
    // Past a failed audit only an admin may publish, and says why.
    let force = json!({"force": true, "reason": "a short day, known at the source"});
    let r = writer
        .post(app.url(&publish))
        .json(&force)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 403);
    let r = app
        .client
        .post(app.url(&publish))
        .json(&force)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let receipt = json_body(r).await;
    assert_eq!(
        receipt["forced"]["reason"],
        "a short day, known at the source"
    );
    assert_eq!(day_counts(&app, 1).await, [Some(2)]);
    let ledger: Value =
        json_body(app.get(&format!("/loads?table=orders&ds={}", day(0))).await).await;
    let entry = ledger
        .as_array()
        .unwrap()
        .iter()
        .find(|l| l["load_id"] == load_id.as_str())
        .expect("the forced publish is in the ledger");
    assert_eq!(
        entry["error"]["forced"]["reason"],
        "a short day, known at the source"
    );
}

#[tokio::test]
async fn a_range_that_is_not_the_tables_is_refused_with_its_own_code_and_words() {
    let app = spawn_app().await;
    app.declare_orders().await;
    let r = app
        .declare(
            "customers",
            r#"{"columns": {"id": "bigint", "name": "text"}, "partition_by": null, "primary_key": ["id"]}"#,
        )
        .await;
    assert!(r.status().is_success());
    let body = day_body(&day(0), 1, 1, "paid");
    for (path, status, code, words) in [
        (
            "/partitions/orders?from=2026-10-19&to=2026-10-12",
            400,
            "invalid_range",
            "starts at 2026-10-19, after its end 2026-10-12",
        ),
        (
            "/partitions/orders?from=2026-10-12&to=2026-13-01",
            400,
            "invalid_ds",
            "\"2026-13-01\" is not a partition of table \"orders\"",
        ),
        (
            "/partitions/orders?from=2026-10-12&to=2029-10-12",
            400,
            "invalid_range",
            "at most 1000 partitions",
        ),
        (
            "/partitions/customers?from=2026-10-12&to=2026-10-13",
            409,
            "not_partitioned",
            "has no partitions; PUT /tables/customers/rows replaces it whole",
        ),
    ] {
        let r = ndjson_put(&app, path, body.clone()).await;
        assert_eq!(r.status(), status, "{path}");
        let problem = json_body(r).await;
        assert_eq!(problem["code"], code, "{path}: {problem}");
        let detail = problem["detail"].as_str().unwrap();
        assert!(detail.contains(words), "{path}: {detail}");
    }
    for (target, code) in [
        (
            json!({"range": {"from": day(3), "to": day(0)}}),
            "invalid_range",
        ),
        (json!({"partitions": []}), "invalid_range"),
        (json!({"days": [day(0)]}), "invalid_request"),
    ] {
        let request = json!({"table": "orders", "target": target});
        let r = open(&app, &format!("open-{target}"), &request).await;
        assert_eq!(r.status(), 400, "{target}");
        assert_eq!(json_body(r).await["code"], code, "{target}");
    }
    assert_eq!(day_counts(&app, 8).await, vec![None; 8], "nothing written");
}
