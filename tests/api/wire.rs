//! What reaches the wire and the log as it is: a HEAD's headers read off
//! the socket, two `Authorization` headers, and the level a 503 is logged at.

use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::helpers::*;
use crate::support::*;

const DAY: &str = "/partitions/orders/2026-10-12";

/// One request over a connection of its own, written and read by hand
/// (a client library may add or drop headers); the answer's head.
async fn raw_head(app: &TestApp, request: &str) -> String {
    let address = app.base.trim_start_matches("http://");
    let mut stream = tokio::net::TcpStream::connect(address).await.unwrap();
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut answer = Vec::new();
    tokio::time::timeout(Duration::from_secs(10), stream.read_to_end(&mut answer))
        .await
        .expect("an answer, then the connection closed")
        .unwrap();
    let answer = String::from_utf8_lossy(&answer).to_string();
    answer
        .split("\r\n\r\n")
        .next()
        .unwrap()
        .to_ascii_lowercase()
}

#[tokio::test]
async fn a_head_of_a_partition_claims_no_length_its_get_does_not_have() {
    let app = spawn_app().await;
    app.declare_orders().await;
    let rows: Vec<_> = (1..=50)
        .map(|id| order(id, "paid", "2026-10-12T01:00:00Z"))
        .collect();
    assert_eq!(app.put_ndjson(DAY, &rows).await.status(), 200);
    let request = |method: &str| {
        format!(
            "{method} {DAY} HTTP/1.1\r\nhost: x\r\nauthorization: Bearer {ADMIN_TOKEN}\r\n\
             connection: close\r\n\r\n"
        )
    };
    let get = raw_head(&app, &request("GET")).await;
    let head = raw_head(&app, &request("HEAD")).await;
    assert!(head.starts_with("http/1.1 200"), "{head}");
    assert!(head.contains("idem-row-count: 50"), "{head}");
    let length = |head: &str| {
        head.lines()
            .find_map(|l| l.strip_prefix("content-length:"))
            .map(|v| v.trim().to_string())
    };
    // The GET streams its rows (chunked): a HEAD says no length, or the same.
    assert_eq!(length(&head), length(&get), "HEAD:\n{head}\nGET:\n{get}");
    assert_ne!(length(&head).as_deref(), Some("0"), "{head}");
}

#[tokio::test]
async fn two_authorization_headers_are_refused_with_400_whichever_is_valid() {
    let app = spawn_app().await;
    let plain = reqwest::Client::new();
    let admin = format!("Bearer {ADMIN_TOKEN}");
    for second in [admin.as_str(), "Bearer not-a-token"] {
        let r = plain
            .get(app.url("/tables"))
            .header("authorization", admin.as_str())
            .header("authorization", second)
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 400, "second header {second:?}");
        assert_eq!(json_body(r).await["code"], "invalid_authorization");
    }
    let one = plain.get(app.url("/tables")).header("authorization", admin);
    assert_eq!(one.send().await.unwrap().status(), 200);
}

/// A PUT that takes the process's only turn to write and keeps it: its
/// body's start arrives (more than a write reads before its turn), the
/// rest never does until `body` is dropped.
pub async fn hold_the_only_turn(app: &TestApp) -> Trickle {
    let trickle = app.trickle(reqwest::Method::PUT, DAY, None);
    let rows: Vec<_> = (1..=1000)
        .map(|id| order(id, "paid", "2026-10-12T01:00:00Z"))
        .collect();
    trickle.body.send(Ok(ndjson(&rows))).await.unwrap();
    for _ in 0..250 {
        let claims: i64 = sqlx::query_scalar(
            "select count(*) from pg_locks
              where locktype = 'advisory' and granted
                and database = (select oid from pg_database where datname = current_database())",
        )
        .fetch_one(&app.db)
        .await
        .unwrap();
        if claims > 0 {
            return trickle;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("the slow write never took its turn");
}
