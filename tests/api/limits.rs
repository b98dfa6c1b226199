//! Limits and timeouts: a slow, idle or greedy client gets a clear 4xx or
//! 503, and holds nothing once it has.

use std::time::{Duration, Instant};

use idem::config::Settings;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::helpers::*;
use crate::support::*;

const DAY: &str = "/partitions/orders/2026-10-12";

#[tokio::test]
async fn a_client_that_sends_no_headers_is_disconnected_after_the_header_timeout() {
    let app = spawn_app_with(Settings {
        header_timeout_secs: 1,
        ..Default::default()
    })
    .await;
    let address = app.base.trim_start_matches("http://");
    let mut idle = tokio::net::TcpStream::connect(address).await.unwrap();
    idle.write_all(b"PUT /partitions/orders/2026-10-12 HTTP/1.1\r\nHost: x\r\n")
        .await
        .unwrap();
    let started = Instant::now();
    let mut answer = Vec::new();
    let read = tokio::time::timeout(Duration::from_secs(10), idle.read_to_end(&mut answer)).await;
    assert!(read.is_ok(), "the server closed the connection");
    assert!(started.elapsed() < Duration::from_secs(5));
    assert_eq!(app.get("/healthz").await.status(), 200);
}

#[tokio::test]
async fn a_body_that_stops_arriving_is_refused_with_408_and_releases_its_hold() {
    let app = spawn_app_with(Settings {
        body_idle_timeout_secs: 1,
        ..Default::default()
    })
    .await;
    app.declare_orders().await;
    let Trickle { body, answer } = app.trickle(reqwest::Method::PUT, DAY, None);
    body.send(Ok(ndjson(&[order(1, "paid", "2026-10-12T01:00:00Z")])))
        .await
        .unwrap();
    // Nothing more is sent, and the body is not ended either.
    let answer = tokio::time::timeout(Duration::from_secs(10), answer)
        .await
        .expect("answered within the idle timeout and some")
        .unwrap()
        .unwrap();
    assert_eq!(answer.status(), 408);
    assert_eq!(json_body(answer).await["code"], "body_timeout");
    drop(body);
    assert_eq!(app.get(DAY).await.status(), 404);
    // Its connection, its stage and its locks are gone: the same PUT works.
    let r = app
        .put_ndjson(DAY, &[order(1, "paid", "2026-10-12T01:00:00Z")])
        .await;
    assert_eq!(r.status(), 200);
    let stages: i64 =
        sqlx::query_scalar("select count(*) from pg_tables where schemaname = 'idem_staging'")
            .fetch_one(&app.db)
            .await
            .unwrap();
    assert_eq!(stages, 0);
}

#[tokio::test]
async fn a_body_slower_than_its_minimum_rate_is_refused_with_408_after_its_grace() {
    let app = spawn_app_with(Settings {
        body_min_rate_bytes: 1000,
        body_min_rate_grace_secs: 2,
        ..Default::default()
    })
    .await;
    app.declare_orders().await;
    let Trickle { body, answer } = app.trickle(reqwest::Method::PUT, DAY, None);
    let started = Instant::now();
    // A byte every 100 ms: never idle, but 10 bytes a second.
    let trickling = tokio::spawn(async move {
        for byte in ndjson(&[order(1, "paid", "2026-10-12T01:00:00Z")]).bytes() {
            if body.send(Ok(char::from(byte).to_string())).await.is_err() {
                return;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        std::future::pending::<()>().await;
    });
    let answer = tokio::time::timeout(Duration::from_secs(10), answer)
        .await
        .expect("refused within the grace and some")
        .unwrap()
        .unwrap();
    let took = started.elapsed();
    trickling.abort();
    assert_eq!(answer.status(), 408);
    assert_eq!(json_body(answer).await["code"], "body_too_slow");
    assert!(took >= Duration::from_secs(2), "refused after {took:?}");
    assert_eq!(app.get(DAY).await.status(), 404);
}

#[tokio::test]
async fn writes_past_their_turns_get_503_busy_while_reads_still_answer() {
    let app = spawn_app_with(Settings {
        max_concurrent_loads: Some(1),
        load_wait_ms: 200,
        ..Default::default()
    })
    .await;
    app.declare_orders().await;
    let Trickle { body, answer } = crate::wire::hold_the_only_turn(&app).await;
    let second = app
        .put_ndjson(
            "/partitions/orders/2026-10-13",
            &[serde_json::json!({"order_id": 2})],
        )
        .await;
    assert_eq!(second.status(), 503);
    assert_eq!(second.headers()["retry-after"], "1");
    assert_eq!(json_body(second).await["code"], "busy");
    assert_eq!(app.get("/readyz").await.status(), 200);
    assert_eq!(app.get("/tables/orders").await.status(), 200);
    drop(body);
    let first = answer.await.unwrap().unwrap();
    assert_eq!(first.status(), 200);
}

#[tokio::test]
async fn post_bodies_have_their_own_smaller_limit() {
    let app = spawn_app_with(Settings {
        max_post_body_bytes: 500,
        ..Default::default()
    })
    .await;
    app.declare_orders().await;
    let rows: Vec<_> = (1..=20)
        .map(|i| order(i, "paid", "2026-10-12T01:00:00Z"))
        .collect();
    let post = app
        .client
        .post(app.url("/rows?table=orders"))
        .header("content-type", "application/x-ndjson")
        .header("idempotency-key", "big")
        .body(ndjson(&rows))
        .send()
        .await
        .unwrap();
    assert_eq!(post.status(), 413);
    assert_eq!(app.put_ndjson(DAY, &rows).await.status(), 200);
}

#[tokio::test]
async fn a_gzip_body_that_unpacks_past_its_ratio_is_refused() {
    let app = spawn_app().await;
    app.declare_orders().await;
    // 8 MiB of newlines: tiny on the wire, far past 100 times its size.
    let bomb = gzip(&vec![b'\n'; 8 << 20]);
    let r = app
        .client
        .put(app.url(DAY))
        .header("content-type", "application/x-ndjson")
        .header("content-encoding", "gzip")
        .body(bomb)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 413);
    let problem = json_body(r).await;
    assert_eq!(problem["code"], "payload_too_large");
    assert!(problem["detail"]
        .as_str()
        .unwrap()
        .contains("times its size"));
    assert_eq!(app.get(DAY).await.status(), 404);
}

#[tokio::test]
async fn lists_come_in_pages_linked_by_a_cursor() {
    let app = spawn_app().await;
    app.declare_orders().await;
    for day in ["2026-10-11", "2026-10-12", "2026-10-13"] {
        let row = serde_json::json!({"order_id": 1, "ds": day});
        let r = app
            .put_ndjson(&format!("/partitions/orders/{day}"), &[row])
            .await;
        assert_eq!(r.status(), 200);
    }
    let pages = list_pages(&app, "/partitions/orders?limit=2").await;
    let days: Vec<Vec<&str>> = pages
        .iter()
        .map(|p| p.iter().map(|i| i["ds"].as_str().unwrap()).collect())
        .collect();
    assert_eq!(days, [vec!["2026-10-11", "2026-10-12"], vec!["2026-10-13"]]);

    let pages = list_pages(&app, "/loads?table=orders&limit=2").await;
    let loads: Vec<&str> = pages
        .iter()
        .flatten()
        .map(|l| l["load_id"].as_str().unwrap())
        .collect();
    assert_eq!(loads.len(), 3);
    assert!(
        loads.windows(2).all(|w| w[0] > w[1]),
        "newest first: {loads:?}"
    );

    app.declare("other", ORDERS).await;
    let pages = list_pages(&app, "/tables?limit=1").await;
    assert_eq!(pages.iter().flatten().count(), 2);
    for limit in ["0", "-1", "1001", "100000"] {
        let r = app.get(&format!("/loads?limit={limit}")).await;
        assert_eq!(r.status(), 400, "limit={limit}");
        let problem = json_body(r).await;
        assert_eq!(problem["code"], "invalid_request");
        assert!(problem["detail"].as_str().unwrap().contains("limit"));
    }
    assert_eq!(app.get("/loads?limit=1000").await.status(), 200);
    let r = app.get("/loads?cursor=not-a-uuid").await;
    assert_eq!(r.status(), 400);
}

#[tokio::test]
async fn a_huge_record_costs_no_more_than_the_record_limit_and_is_named() {
    let app = spawn_app_with(Settings {
        max_record_bytes: 64 * 1024,
        ..Default::default()
    })
    .await;
    app.declare_orders().await;
    let huge_note = "n".repeat(1 << 20);
    let ndjson_body = format!(
        "{}\n{{\"order_id\":2,\"note\":\"{huge_note}\"}}\n",
        serde_json::json!({"order_id": 1})
    );
    let r = app.put(DAY, "application/x-ndjson", ndjson_body).await;
    assert_eq!(r.status(), 422);
    let problem = json_body(r).await;
    assert_eq!(problem["errors"][0]["line"], 2);
    assert!(problem["errors"][0]["message"]
        .as_str()
        .unwrap()
        .contains("larger than the limit of 65536 bytes"));

    let csv_body = format!("order_id,note\n1,a\n2,{huge_note}\n");
    let r = app.put(DAY, "text/csv", csv_body).await;
    assert_eq!(r.status(), 413);
    let problem = json_body(r).await;
    assert_eq!(problem["code"], "record_too_large");
    assert_eq!(app.get(DAY).await.status(), 404);

    let r = app
        .put(
            DAY,
            "application/x-ndjson",
            "{\"order_id\":1,\"ds\":\"0000-01-01\"}\n",
        )
        .await;
    assert_eq!(r.status(), 422);
}

#[tokio::test]
async fn a_client_past_its_connections_gets_429_and_others_are_served() {
    let app = spawn_app_with(Settings {
        max_connections_per_client: 2,
        ..Default::default()
    })
    .await;
    let address = app.base.trim_start_matches("http://").to_string();
    let first = tokio::net::TcpStream::connect(&address).await.unwrap();
    let second = tokio::net::TcpStream::connect(&address).await.unwrap();
    let mut third = tokio::net::TcpStream::connect(&address).await.unwrap();
    let mut answer = String::new();
    tokio::time::timeout(Duration::from_secs(5), third.read_to_string(&mut answer))
        .await
        .expect("answered at once")
        .unwrap();
    assert!(answer.starts_with("HTTP/1.1 429"), "{answer}");
    assert!(answer.contains("\"code\":\"too_many_connections\""));
    drop((first, second));
    // Once its connections close, the client is served again.
    let mut served = false;
    for _ in 0..50 {
        if app.get("/healthz").await.status() == 200 {
            served = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(served);
}
