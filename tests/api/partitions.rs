use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use serde_json::{json, Value};

use crate::helpers::*;
use crate::support::*;

const DAY: &str = "/partitions/orders/2026-10-12";

#[tokio::test]
async fn put_of_orders_1_2_2_twice_leaves_two_rows_and_the_second_changes_nothing() {
    let app = spawn_app().await;
    app.declare_orders().await;
    let body = [
        order(1, "paid", "2026-10-12T01:00:00Z"),
        order(2, "paid", "2026-10-12T02:00:00Z"),
        order(2, "paid", "2026-10-12T02:00:00Z"),
    ];

    let first = app.put_ndjson(DAY, &body).await;
    assert_eq!(first.status(), 200);
    let etag = first.headers()["etag"].to_str().unwrap().to_string();
    let first = json_body(first).await;
    assert_eq!(first["rows_received"], 3);
    assert_eq!(first["rows_written"], 2);
    assert_eq!(first["duplicates"], 1);
    assert_eq!(first["changed"], true);
    assert_eq!(first["replayed"], false);
    assert_eq!(
        etag,
        format!("\"{}\"", first["content_sha256"].as_str().unwrap())
    );
    assert_eq!(app.count("orders", "2026-10-12").await, 2);

    let second = json_body(app.put_ndjson(DAY, &body).await).await;
    assert_eq!(second["changed"], false);
    assert_eq!(second["rows_written"], 0);
    assert_eq!(second["row_count"], 2);
    assert_eq!(second["duplicates"], 1);
    assert_eq!(second["content_sha256"], first["content_sha256"]);
    assert_eq!(app.count("orders", "2026-10-12").await, 2);
    // Not rewritten: the rows still carry the first load's id.
    let load_ids: Vec<uuid::Uuid> =
        sqlx::query_scalar("select distinct _load_id from idem_data.orders")
            .fetch_all(&app.db)
            .await
            .unwrap();
    assert_eq!(
        load_ids,
        [first["load_id"]
            .as_str()
            .unwrap()
            .parse::<uuid::Uuid>()
            .unwrap()]
    );
}

#[tokio::test]
async fn put_of_same_rows_in_other_order_changes_nothing_and_one_changed_row_replaces_the_day() {
    let app = spawn_app().await;
    app.declare_orders().await;
    let rows: Vec<Value> = (1..=50)
        .map(|i| order(i, "paid", "2026-10-12T01:00:00Z"))
        .collect();
    let first = json_body(app.put_ndjson(DAY, &rows).await).await;
    let mut reversed = rows.clone();
    reversed.reverse();
    let again = json_body(app.put_ndjson(DAY, &reversed).await).await;
    assert_eq!(again["changed"], false);
    assert_eq!(again["content_sha256"], first["content_sha256"]);

    let mut changed = rows.clone();
    changed[10]["status"] = json!("refunded");
    let third = json_body(app.put_ndjson(DAY, &changed).await).await;
    assert_eq!(third["changed"], true);
    assert_ne!(third["content_sha256"], first["content_sha256"]);
    let stored = app.rows("orders", "2026-10-12").await;
    assert_eq!(stored.len(), 50);
    let refunded: Vec<&Value> = stored
        .iter()
        .filter(|r| r["status"] == "refunded")
        .collect();
    assert_eq!(refunded.len(), 1);
    assert_eq!(refunded[0]["order_id"], 11);
}

#[tokio::test]
async fn duplicates_of_a_key_collapse_to_the_largest_cursor_whatever_the_order() {
    let app = spawn_app().await;
    app.declare_orders().await;
    let old = order(1, "created", "2026-10-12T01:00:00Z");
    let new = order(1, "shipped", "2026-10-12T09:00:00Z");
    let tie_a = order(2, "a", "2026-10-12T05:00:00Z");
    let tie_b = order(2, "b", "2026-10-12T05:00:00Z");
    let one = json_body(
        app.put_ndjson(
            DAY,
            &[new.clone(), old.clone(), tie_a.clone(), tie_b.clone()],
        )
        .await,
    )
    .await;
    assert_eq!(one["duplicates"], 2);
    let rows = app.rows("orders", "2026-10-12").await;
    assert_eq!(rows[0]["status"], "shipped");
    let other = json_body(app.put_ndjson(DAY, &[tie_b, old, tie_a, new]).await).await;
    assert_eq!(
        other["changed"], false,
        "the same rows in another order are the same partition"
    );
    assert_eq!(app.rows("orders", "2026-10-12").await, rows);
}

#[tokio::test]
async fn a_bad_row_is_refused_with_its_line_and_column_and_leaves_the_partition_untouched() {
    let app = spawn_app().await;
    app.declare_orders().await;
    let good = [order(1, "paid", "2026-10-12T01:00:00Z")];
    let first = json_body(app.put_ndjson(DAY, &good).await).await;

    let mut wrong_type = order(2, "paid", "2026-10-12T01:00:00Z");
    wrong_type["amount"] = json!("lots");
    let mut wrong_ds = order(3, "paid", "2026-10-12T01:00:00Z");
    wrong_ds["ds"] = json!("2026-10-13");
    let body = [
        order(5, "paid", "2026-10-12T01:00:00Z"),
        wrong_type,
        wrong_ds,
    ];
    let r = app.put_ndjson(DAY, &body).await;
    assert_eq!(r.status(), 422);
    assert_eq!(r.headers()["content-type"], "application/problem+json");
    let problem = json_body(r).await;
    assert_eq!(problem["code"], "bad_rows");
    assert_eq!(problem["rejected"], 2);
    assert_eq!(problem["errors"][0]["line"], 2);
    assert_eq!(problem["errors"][0]["column"], "amount");
    assert_eq!(problem["errors"][1]["line"], 3);
    assert_eq!(problem["errors"][1]["column"], "ds");

    let rows = app.rows("orders", "2026-10-12").await;
    assert_eq!(rows.len(), 1);
    assert_eq!(rows[0]["order_id"], 1);
    let partition = json_body(app.get("/partitions/orders").await).await;
    assert_eq!(partition[0]["content_sha256"], first["content_sha256"]);
    let stages: i64 =
        sqlx::query_scalar("select count(*) from pg_tables where schemaname = 'idem_staging'")
            .fetch_one(&app.db)
            .await
            .unwrap();
    assert_eq!(stages, 0, "a refused load leaves no stage behind");
    let loads = json_body(app.get("/loads?table=orders").await).await;
    assert_eq!(loads[0]["status"], "rejected");
    assert_eq!(loads[0]["rejected"], 2);
}

#[tokio::test]
async fn a_reader_during_twenty_swaps_only_ever_sees_one_of_the_two_full_days() {
    let app = Arc::new(spawn_app().await);
    app.declare_orders().await;
    let a: Vec<Value> = (1..=300)
        .map(|i| order(i, "a", "2026-10-12T01:00:00Z"))
        .collect();
    let b: Vec<Value> = (1..=200)
        .map(|i| order(i, "b", "2026-10-12T01:00:00Z"))
        .collect();
    assert_eq!(app.put_ndjson(DAY, &a).await.status(), 200);

    let done = Arc::new(AtomicBool::new(false));
    let reader = {
        let (app, done) = (app.clone(), done.clone());
        tokio::spawn(async move {
            let mut reads = 0;
            while !done.load(Ordering::Relaxed) {
                let rows = app.rows("orders", "2026-10-12").await;
                let statuses: std::collections::BTreeSet<&str> =
                    rows.iter().map(|r| r["status"].as_str().unwrap()).collect();
                let whole_a = rows.len() == 300 && statuses.len() == 1 && statuses.contains("a");
                let whole_b = rows.len() == 200 && statuses.len() == 1 && statuses.contains("b");
                assert!(
                    whole_a || whole_b,
                    "saw {} rows with statuses {statuses:?}",
                    rows.len()
                );
                reads += 1;
            }
            reads
        })
    };
    for i in 0..20 {
        let body = if i % 2 == 0 { &b } else { &a };
        let r = app.put_ndjson(DAY, body).await;
        assert_eq!(r.status(), 200);
        assert_eq!(json_body(r).await["changed"], true);
    }
    done.store(true, Ordering::Relaxed);
    let reads = reader.await.unwrap();
    assert!(reads > 5, "the reader only read {reads} times");
}

#[tokio::test]
async fn concurrent_puts_of_one_partition_leave_exactly_one_of_the_bodies() {
    let app = Arc::new(spawn_app().await);
    app.declare_orders().await;
    let bodies: Vec<Vec<Value>> = (0..4)
        .map(|k| {
            (1..=100 + k * 10)
                .map(|i| order(i, &format!("v{k}"), "2026-10-12T01:00:00Z"))
                .collect()
        })
        .collect();
    let tasks: Vec<_> = bodies
        .iter()
        .cloned()
        .map(|body| {
            let app = app.clone();
            tokio::spawn(async move { app.put_ndjson(DAY, &body).await.status() })
        })
        .collect();
    for t in tasks {
        assert_eq!(t.await.unwrap(), 200);
    }
    let rows = app.rows("orders", "2026-10-12").await;
    let statuses: std::collections::BTreeSet<String> = rows
        .iter()
        .map(|r| r["status"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(statuses.len(), 1);
    let k: usize = statuses.iter().next().unwrap()[1..].parse().unwrap();
    assert_eq!(rows.len(), bodies[k].len());
}

#[tokio::test]
async fn csv_with_quoted_commas_quotes_newlines_and_unicode_round_trips() {
    let app = spawn_app().await;
    app.declare_orders().await;
    let csv = "order_id,ds,customer_id,status,amount,updated_at,note\r\n\
               1,2026-10-12,7,paid,10.50,2026-10-12T01:00:00Z,\"comma, \"\"quote\"\"\nnewline\"\r\n\
               2,2026-10-12,8,paid,1,2026-10-12T01:00:00Z,Grüße 東京 🚀\r\n\
               3,,9,paid,,2026-10-12T01:00:00Z,\r\n";
    let r = app.put(DAY, "text/csv", csv).await;
    assert_eq!(r.status(), 200, "{}", r.text().await.unwrap());
    let mut rows = app.rows("orders", "2026-10-12").await;
    rows.sort_by_key(|r| r["order_id"].as_i64());
    assert_eq!(rows[0]["note"], "comma, \"quote\"\nnewline");
    assert_eq!(rows[1]["note"], "Grüße 東京 🚀");
    assert_eq!(rows[2]["note"], Value::Null);
    assert_eq!(rows[2]["amount"], Value::Null);
    assert_eq!(rows[2]["ds"], "2026-10-12");

    // Read back as CSV and sent again: the same content.
    let r = app
        .client
        .get(app.url(DAY))
        .header("accept", "text/csv")
        .send()
        .await
        .unwrap();
    assert_eq!(r.headers()["content-type"], "text/csv; charset=utf-8");
    let exported = r.text().await.unwrap();
    assert!(exported.starts_with("order_id,ds,customer_id,status,amount,updated_at,note\n"));
    let again = json_body(app.put(DAY, "text/csv", exported).await).await;
    assert_eq!(again["changed"], false, "{again}");
}

#[tokio::test]
async fn a_csv_header_with_an_unknown_column_is_refused_at_line_one() {
    let app = spawn_app().await;
    app.declare_orders().await;
    let r = app.put(DAY, "text/csv", "order_id,colour\n1,red\n").await;
    assert_eq!(r.status(), 422);
    let problem = json_body(r).await;
    assert_eq!(problem["code"], "malformed_body");
    assert_eq!(problem["errors"][0]["line"], 1);
    assert_eq!(problem["errors"][0]["column"], "colour");
}

#[tokio::test]
async fn gzip_bodies_and_json_arrays_are_read_like_ndjson() {
    let app = spawn_app().await;
    app.declare_orders().await;
    let rows: Vec<Value> = (1..=20)
        .map(|i| order(i, "paid", "2026-10-12T01:00:00Z"))
        .collect();
    let plain = json_body(app.put_ndjson(DAY, &rows).await).await;
    let r = app
        .client
        .put(app.url(DAY))
        .header("content-type", "application/x-ndjson")
        .header("content-encoding", "gzip")
        .body(gzip(ndjson(&rows).as_bytes()))
        .send()
        .await
        .unwrap();
    let zipped = json_body(r).await;
    assert_eq!(zipped["rows_received"], 20);
    assert_eq!(zipped["content_sha256"], plain["content_sha256"]);
    let array = serde_json::to_string_pretty(&rows).unwrap();
    let as_array = json_body(app.put(DAY, "application/json", array).await).await;
    assert_eq!(as_array["content_sha256"], plain["content_sha256"]);
    assert_eq!(as_array["changed"], false);
}

#[tokio::test]
async fn an_empty_body_is_an_empty_partition() {
    let app = spawn_app().await;
    app.declare_orders().await;
    app.put_ndjson(DAY, &[order(1, "paid", "2026-10-12T01:00:00Z")])
        .await;
    let r = json_body(app.put(DAY, "application/x-ndjson", "").await).await;
    assert_eq!(r["rows_written"], 0);
    assert_eq!(r["changed"], true);
    assert_eq!(app.count("orders", "2026-10-12").await, 0);
    let head = app.client.head(app.url(DAY)).send().await.unwrap();
    assert_eq!(head.status(), 200);
    assert_eq!(head.headers()["idem-row-count"], "0");
    assert_eq!(app.put(DAY, "text/csv", "").await.status(), 200);
}

#[tokio::test]
async fn conditional_puts_answer_412_when_the_condition_fails() {
    let app = spawn_app().await;
    app.declare_orders().await;
    let v1 = [order(1, "paid", "2026-10-12T01:00:00Z")];
    let v2 = [order(1, "shipped", "2026-10-12T02:00:00Z")];
    let r = app
        .client
        .put(app.url(DAY))
        .header("content-type", "application/x-ndjson")
        .header("if-none-match", "*")
        .body(ndjson(&v1))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let etag = r.headers()["etag"].to_str().unwrap().to_string();
    let r = app
        .client
        .put(app.url(DAY))
        .header("content-type", "application/x-ndjson")
        .header("if-none-match", "*")
        .body(ndjson(&v2))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 412);
    assert_eq!(json_body(r).await["code"], "precondition_failed");
    let r = app
        .client
        .put(app.url(DAY))
        .header("content-type", "application/x-ndjson")
        .header("if-match", "\"0000\"")
        .body(ndjson(&v2))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 412);
    assert_eq!(app.rows("orders", "2026-10-12").await[0]["status"], "paid");
    let r = app
        .client
        .put(app.url(DAY))
        .header("content-type", "application/x-ndjson")
        .header("if-match", &etag)
        .body(ndjson(&v2))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(
        app.rows("orders", "2026-10-12").await[0]["status"],
        "shipped"
    );
}

/// An empty `If-Match` or `If-None-Match` names no entity tag: it is not
/// `*`, so it neither makes a PUT create-only nor answers a GET with 304.
#[tokio::test]
async fn an_empty_condition_header_is_not_a_star() {
    let app = spawn_app().await;
    app.declare_orders().await;
    let rows = [order(1, "paid", "2026-10-12T01:00:00Z")];
    let put_with = |name: &'static str| {
        app.client
            .put(app.url(DAY))
            .header("content-type", "application/x-ndjson")
            .header(name, "")
            .body(ndjson(&rows))
    };
    let r = put_with("if-match").send().await.unwrap();
    assert_eq!(r.status(), 412, "an empty If-Match matches no partition");
    assert_eq!(app.put_ndjson(DAY, &rows).await.status(), 200);
    let r = put_with("if-none-match").send().await.unwrap();
    assert_eq!(r.status(), 400, "a PUT takes If-None-Match: * only");
    assert_eq!(json_body(r).await["code"], "invalid_request");
    let r = put_with("if-match").send().await.unwrap();
    assert_eq!(r.status(), 412, "an empty If-Match matches no ETag");
    let r = app
        .client
        .get(app.url(DAY))
        .header("if-none-match", "")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
}

#[tokio::test]
async fn reading_back_gives_etag_row_count_and_304() {
    let app = spawn_app().await;
    app.declare_orders().await;
    let put = app
        .put_ndjson(DAY, &[order(1, "paid", "2026-10-12T01:00:00Z")])
        .await;
    let etag = put.headers()["etag"].clone();
    let r = app.get(DAY).await;
    assert_eq!(r.headers()["etag"], etag);
    assert_eq!(r.headers()["content-type"], "application/x-ndjson");
    let row: Value = serde_json::from_str(r.text().await.unwrap().trim()).unwrap();
    assert_eq!(
        row,
        json!({"order_id": 1, "ds": "2026-10-12", "customer_id": 7, "status": "paid",
                           "amount": 10.50, "updated_at": "2026-10-12T01:00:00+00:00", "note": null})
    );
    let r = app
        .client
        .get(app.url(DAY))
        .header("if-none-match", etag.clone())
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 304);
    let head = app.client.head(app.url(DAY)).send().await.unwrap();
    assert_eq!(head.headers()["etag"], etag);
    assert_eq!(head.headers()["idem-row-count"], "1");
    assert_eq!(app.get("/partitions/orders/2026-10-13").await.status(), 404);
    let list = json_body(app.get("/partitions/orders").await).await;
    assert_eq!(list.as_array().unwrap().len(), 1);
    assert_eq!(list[0]["ds"], "2026-10-12");
    assert_eq!(list[0]["rows"], 1);
}

#[tokio::test]
async fn delete_drops_the_partition_and_answers_204_again_when_gone() {
    let app = spawn_app().await;
    app.declare_orders().await;
    app.put_ndjson(DAY, &[order(1, "paid", "2026-10-12T01:00:00Z")])
        .await;
    let r = app.client.delete(app.url(DAY)).send().await.unwrap();
    assert_eq!(r.status(), 204);
    assert_eq!(app.get(DAY).await.status(), 404);
    assert_eq!(app.count("orders", "2026-10-12").await, 0);
    let r = app.client.delete(app.url(DAY)).send().await.unwrap();
    assert_eq!(r.status(), 204);
    // And the day can be loaded again.
    assert_eq!(
        app.put_ndjson(DAY, &[order(1, "paid", "2026-10-12T01:00:00Z")])
            .await
            .status(),
        200
    );
}

#[tokio::test]
async fn each_load_is_in_the_ledger() {
    let app = spawn_app().await;
    app.declare_orders().await;
    let receipt = json_body(
        app.put_ndjson(DAY, &[order(1, "paid", "2026-10-12T01:00:00Z")])
            .await,
    )
    .await;
    let load = json_body(
        app.get(&format!("/loads/{}", receipt["load_id"].as_str().unwrap()))
            .await,
    )
    .await;
    assert_eq!(load["status"], "published");
    assert_eq!(load["table"], "orders");
    assert_eq!(load["ds"], "2026-10-12");
    assert_eq!(load["rows_written"], 1);
    assert_eq!(load["content_sha256"], receipt["content_sha256"]);
    assert_eq!(
        app.get(&format!("/loads/{}", uuid::Uuid::now_v7()))
            .await
            .status(),
        404
    );
}

#[tokio::test]
async fn requests_that_are_wrong_get_their_own_4xx() {
    let settings = idem::config::Settings {
        max_put_body_bytes: 1000,
        max_post_body_bytes: 1000,
        ..Default::default()
    };
    let app = spawn_app_with(settings).await;
    app.declare_orders().await;
    let cases = [
        (
            "/partitions/orders/2026-13-01",
            "application/x-ndjson",
            400,
            "invalid_ds",
        ),
        (
            "/partitions/orders/12-10-2026",
            "application/x-ndjson",
            400,
            "invalid_ds",
        ),
        (
            "/partitions/Orders/2026-10-12",
            "application/x-ndjson",
            400,
            "invalid_name",
        ),
        (DAY, "application/xml", 415, "unsupported_media_type"),
    ];
    for (path, content_type, status, code) in cases {
        let r = app.put(path, content_type, "{}\n").await;
        assert_eq!(r.status(), status, "{path} {content_type}");
        assert_eq!(json_body(r).await["code"], code);
    }
    let big: Vec<Value> = (1..=50)
        .map(|i| order(i, "paid", "2026-10-12T01:00:00Z"))
        .collect();
    let r = app.put_ndjson(DAY, &big).await;
    assert_eq!(r.status(), 413);
    assert_eq!(json_body(r).await["code"], "payload_too_large");
    // A gzip body small on the wire but large unpacked is refused the same way.
    let r = app
        .client
        .put(app.url(DAY))
        .header("content-type", "application/x-ndjson")
        .header("content-encoding", "gzip")
        .body(gzip(ndjson(&big).as_bytes()))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 413);
    let r = app
        .put(DAY, "application/json", "[{\"order_id\": 1},")
        .await;
    assert_eq!(r.status(), 422);
    assert_eq!(json_body(r).await["code"], "malformed_body");
    assert_eq!(
        app.get("/partitions/orders").await.text().await.unwrap(),
        "[]\n"
    );
}

#[tokio::test]
async fn stages_left_by_a_dead_process_are_swept_and_live_ones_are_kept() {
    let app = spawn_app().await;
    sqlx::query("create table idem_staging.s_orphan (x int)")
        .execute(&app.db)
        .await
        .unwrap();
    sqlx::query("create table idem_staging.s_alive (x int)")
        .execute(&app.db)
        .await
        .unwrap();
    // A live owner holds its stage's advisory lock on its own session.
    let mut owner = app.db.acquire().await.unwrap();
    sqlx::query("select pg_advisory_lock($1)")
        .bind(idem::store::locks::stage_lock_key("s_alive"))
        .execute(&mut *owner)
        .await
        .unwrap();
    // A second process starting on the same database sweeps.
    let _second = spawn_app_on(app.options.clone(), Default::default()).await;
    let left: Vec<String> = sqlx::query_scalar(
        "select tablename::text from pg_tables where schemaname = 'idem_staging' order by 1",
    )
    .fetch_all(&app.db)
    .await
    .unwrap();
    assert_eq!(left, ["s_alive"]);
}

#[tokio::test]
async fn every_type_lands_as_postgres_itself_would_read_the_text() {
    let app = spawn_app().await;
    let declaration = r#"{"columns": {"id": "integer", "big": "bigint", "n": "numeric", "f": "double precision",
        "b": "boolean", "d": "date", "t": "timestamptz", "j": "jsonb", "u": "uuid", "s": "text"},
        "primary_key": ["id"]}"#;
    assert_eq!(app.declare("types", declaration).await.status(), 201);
    let numerics = [
        "0",
        "-0.0015",
        "1e3",
        "123456789.000100",
        "-12.5e-2",
        "99999999999999999999.5",
        "0.00",
        "NaN",
        "7",
    ];
    let rows: Vec<Value> = numerics
        .iter()
        .enumerate()
        .map(|(i, n)| {
            json!({"id": i, "big": -9_000_000_000_000_i64 - i as i64, "n": n, "f": 0.1 + i as f64,
                   "b": i % 2 == 0, "d": "1999-12-31", "t": "1970-01-01T00:00:00.123456+01:00",
                   "j": {"z": [1, "x"], "a": null}, "u": "A0EEBC99-9C0B-4EF8-BB6D-6BB9BD380A11",
                   "s": "tab\there \\ backslash"})
        })
        .collect();
    let r = app.put_ndjson("/partitions/types/2026-10-12", &rows).await;
    assert_eq!(r.status(), 200, "{}", r.text().await.unwrap());
    for (i, n) in numerics.iter().enumerate() {
        let (stored, parsed): (String, String) =
            sqlx::query_as("select n::text, $2::numeric::text from idem_data.types where id = $1")
                .bind(i as i32)
                .bind(n)
                .fetch_one(&app.db)
                .await
                .unwrap();
        assert_eq!(stored, parsed, "numeric {n}");
    }
    let (big, f, b, d, t, j, u, s): (i64, f64, bool, String, String, String, String, String) = sqlx::query_as(
        "select big, f, b, d::text, (t at time zone 'UTC')::text, j::text, u::text, s from idem_data.types where id = 3",
    )
    .fetch_one(&app.db)
    .await
    .unwrap();
    assert_eq!(big, -9_000_000_000_003);
    assert_eq!(f, 3.1);
    assert!(!b);
    assert_eq!(d, "1999-12-31");
    assert_eq!(t, "1969-12-31 23:00:00.123456");
    assert_eq!(j, r#"{"a": null, "z": [1, "x"]}"#);
    assert_eq!(u, "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11");
    assert_eq!(s, "tab\there \\ backslash");
}

#[tokio::test]
async fn a_table_changed_while_a_day_is_staged_refuses_the_swap() {
    let app = spawn_app().await;
    app.declare_orders().await;
    let Trickle {
        body: tx,
        answer: put,
    } = app.trickle(reqwest::Method::PUT, DAY, None);
    // More than a write reads before it takes its turn, so that it stages.
    let rows: Vec<Value> = (2..=1000)
        .map(|id| order(id, "paid", "2026-10-12T01:00:00Z"))
        .collect();
    tx.send(Ok(ndjson(&rows))).await.unwrap();
    // Wait until the rows are being staged (COPY running)...
    let mut copying = false;
    for _ in 0..100 {
        copying = sqlx::query_scalar::<_, bool>(
            "select exists (select 1 from pg_stat_activity
                             where datname = current_database() and query ilike 'copy idem_staging.%')",
        )
        .fetch_one(&app.db)
        .await
        .unwrap();
        if copying {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    assert!(copying, "the PUT is staging");
    // ...then the table gains a column.
    let wider = ORDERS.replace(r#""note": "text""#, r#""note": "text", "channel": "text""#);
    assert_eq!(app.declare("orders", &wider).await.status(), 200);
    drop(tx);
    let answer = put.await.unwrap().unwrap();
    assert_eq!(answer.status(), 409);
    assert_eq!(json_body(answer).await["code"], "schema_conflict");
    assert_eq!(app.get(DAY).await.status(), 404, "nothing was swapped in");
    // Sent again, it lands.
    let again = app
        .put_ndjson(DAY, &[order(2, "paid", "2026-10-12T01:00:00Z")])
        .await;
    assert_eq!(again.status(), 200);
}
