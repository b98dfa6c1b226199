//! Clients that hold on without sending: connections that never send a
//! byte, and bodies trickled a byte a second by one token while another
//! token writes and reads. Nobody is locked out: the silent connections
//! are closed, the trickled bodies hold no turn to write and are refused
//! as too slow, and the other token is served at once.

use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::scenario::*;
use crate::support::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connections_that_never_send_a_byte_are_closed_after_the_header_timeout() {
    const SILENT: usize = 100;
    const HEADER_TIMEOUT: Duration = Duration::from_secs(2);
    let pg = Postgres::start().await;
    let idem = Idem::start(
        &pg.url,
        "silent-connections",
        &[("IDEM_HEADER_TIMEOUT_SECS", "2")],
    )
    .await;
    let started = Instant::now();
    let mut waits = Vec::new();
    for _ in 0..SILENT {
        let mut stream = tokio::net::TcpStream::connect(&idem.addr).await.unwrap();
        waits.push(tokio::spawn(async move {
            let mut buf = [0u8; 64];
            // Closed: the end of the stream, or a reset.
            let read = tokio::time::timeout(Duration::from_secs(20), stream.read(&mut buf)).await;
            (
                read.is_ok_and(|r| r.map_or(true, |n| n == 0)),
                started.elapsed(),
            )
        }));
    }
    let mut open = 0;
    let mut last = Duration::ZERO;
    for wait in waits {
        let (closed, at) = join(wait).await;
        open += usize::from(!closed);
        last = last.max(at);
    }
    report!(
        "silent connections: {SILENT} connections that send nothing, header timeout \
         {HEADER_TIMEOUT:?}: {open} still open after 20 s; the last closed after {last:.1?}"
    );
    assert_eq!(open, 0, "connections that never sent a byte are still open");
    assert!(
        last < HEADER_TIMEOUT + Duration::from_secs(4),
        "closed only after {last:?}"
    );
    assert_eq!(readyz(&client(), &idem).await, 200);
}

/// A token for `read` and `write` on `tables`, made by the admin.
async fn scoped_token(client: &reqwest::Client, idem: &Idem, name: &str, tables: &str) -> String {
    let request =
        serde_json::json!({"name": name, "scopes": ["read", "write"], "tables": [tables]});
    make_token(client, &idem.base, &request).await.1
}

/// A request whose body is sent a byte a second; its status and code, and
/// when it was answered.
async fn trickled(
    addr: String,
    token: String,
    method: &str,
    path: String,
    extra: &str,
) -> (u16, String, Duration) {
    let started = Instant::now();
    let body = "{\"id\":1,\"note\":\"sent a byte a second, for as long as idem lets it\"}\n";
    let head = format!(
        "{method} {path} HTTP/1.1\r\nhost: {addr}\r\nconnection: close\r\n\
         authorization: Bearer {token}\r\ncontent-type: application/x-ndjson\r\n\
         content-length: {}\r\n{extra}\r\n",
        body.len()
    );
    let stream = tokio::net::TcpStream::connect(&addr).await.unwrap();
    let (mut reader, mut writer) = stream.into_split();
    let sending = tokio::spawn(async move {
        writer.write_all(head.as_bytes()).await?;
        for byte in body.bytes() {
            tokio::time::sleep(Duration::from_secs(1)).await;
            writer.write_all(&[byte]).await?;
        }
        std::future::pending::<()>().await;
        Ok::<_, std::io::Error>(())
    });
    let mut answer = Vec::new();
    let read = tokio::time::timeout(CLIENT_DEADLINE * 2, reader.read_to_end(&mut answer)).await;
    sending.abort();
    if read.is_err() {
        return (0, "no answer".into(), started.elapsed());
    }
    let text = String::from_utf8_lossy(&answer).to_string();
    let status = text
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    let code = text
        .split("\r\n\r\n")
        .nth(1)
        .and_then(|b| serde_json::from_str::<serde_json::Value>(b).ok())
        .and_then(|v| v["code"].as_str().map(str::to_string))
        .unwrap_or_default();
    (status, code, started.elapsed())
}

/// The other token's PUTs, POSTs and GETs to `fast_orders`, one request
/// after another for `during`: what each was, its status, how long it took.
async fn serve_other(
    idem: &Idem,
    token: &str,
    during: Duration,
) -> Vec<(&'static str, u16, Duration)> {
    let mut headers = reqwest::header::HeaderMap::new();
    headers.insert("authorization", format!("Bearer {token}").parse().unwrap());
    let other = reqwest::Client::builder()
        .default_headers(headers)
        .timeout(CLIENT_DEADLINE)
        .build()
        .unwrap();
    let mut served = Vec::new();
    let until = Instant::now() + during;
    let mut n = 0i64;
    while Instant::now() < until {
        n += 1;
        let ds = format!("2026-10-{:02}", 1 + n % 28);
        let rows: String = (1..=20).map(|id| order_line(id, &ds, "paid")).collect();
        let requests = [
            (
                "PUT",
                other
                    .put(idem.url(&format!("/partitions/fast_orders/{ds}")))
                    .header("content-type", "application/x-ndjson")
                    .body(rows),
            ),
            (
                "POST",
                other
                    .post(idem.url("/rows?table=fast_orders"))
                    .header("content-type", "application/x-ndjson")
                    .header("idempotency-key", format!("fast-{n}"))
                    .body(order_line(1000 + n, &ds, "new")),
            ),
            (
                "GET",
                other.get(idem.url(&format!("/partitions/fast_orders/{ds}"))),
            ),
        ];
        for (what, request) in requests {
            let started = Instant::now();
            let status = request.send().await.map_or(0, |r| r.status().as_u16());
            served.push((what, status, started.elapsed()));
        }
    }
    served
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bodies_trickled_by_one_token_leave_the_turns_to_write_to_the_others() {
    const SLOW: usize = 24;
    const GRACE_SECS: u64 = 12;
    const PROMPT: Duration = Duration::from_secs(3);
    let pg = Postgres::start().await;
    let grace = GRACE_SECS.to_string();
    let idem = Idem::start(
        &pg.url,
        "slow-clients",
        &[("IDEM_BODY_MIN_RATE_GRACE_SECS", grace.as_str())],
    )
    .await;
    let admin = client();
    let slow = scoped_token(&admin, &idem, "slow", "slow_*").await;
    let fast = scoped_token(&admin, &idem, "fast", "fast_*").await;
    declare(&admin, &idem, "fast_orders", ORDERS).await;

    // Each slow write goes to a table of its own, not declared.
    let mut trickling = Vec::new();
    for i in 0..SLOW {
        let (addr, token) = (idem.addr.clone(), slow.clone());
        let path = format!("/partitions/slow_put_{i}/2026-10-12");
        trickling.push(tokio::spawn(trickled(addr, token, "PUT", path, "")));
        let (addr, token) = (idem.addr.clone(), slow.clone());
        let path = format!("/rows?table=slow_rows_{i}");
        let key = format!("idempotency-key: slow-{i}\r\n");
        trickling.push(tokio::spawn(async move {
            trickled(addr, token, "POST", path, &key).await
        }));
    }
    tokio::time::sleep(Duration::from_secs(2)).await;

    // Meanwhile the other token writes and reads, one request after another.
    let served = serve_other(&idem, &fast, Duration::from_secs(GRACE_SECS - 4)).await;
    let mut refused = std::collections::BTreeMap::<String, usize>::new();
    let mut last_refusal = Duration::ZERO;
    for t in trickling {
        let (status, code, at) = join(t).await;
        *refused.entry(format!("{status} {code}")).or_default() += 1;
        last_refusal = last_refusal.max(at);
    }
    let failed: Vec<_> = served
        .iter()
        .filter(|(_, status, took)| !(200..300).contains(status) || *took > PROMPT)
        .collect();
    let slowest = served.iter().map(|s| s.2).max().unwrap_or_default();
    report!(
        "slow clients: {SLOW} PUTs and {SLOW} POSTs of one token trickled a byte a second, \
         while another token sent {} PUTs, POSTs and GETs: {} failed or took over {PROMPT:?} \
         (slowest {slowest:.1?}); the trickled ones answered {refused:?}, the last after \
         {last_refusal:.1?} (grace {GRACE_SECS} s)",
        served.len(),
        failed.len()
    );
    assert!(
        failed.is_empty(),
        "the other token was not served: {failed:?}"
    );
    assert_eq!(
        refused.get("408 body_too_slow"),
        Some(&(2 * SLOW)),
        "{refused:?}"
    );
    assert!(last_refusal < Duration::from_secs(GRACE_SECS + 10));
}

/// A write whose first `FAST_BYTES` arrive at once and the rest a line
/// every quarter second (well above the minimum rate, which the fast start
/// has long earned), until `until`: its answer, if one came by then.
async fn held(
    addr: String,
    token: String,
    method: &'static str,
    path: String,
    extra: String,
    until: Instant,
) -> Option<Answer> {
    const FAST_BYTES: usize = 80 * 1024;
    let line = |i: usize| {
        format!("{{\"id\":{i},\"note\":\"a load that keeps its turn for as long as it can\"}}\n")
    };
    let mut fast = String::new();
    let mut i = 0;
    while fast.len() < FAST_BYTES {
        i += 1;
        fast.push_str(&line(i));
    }
    let head = format!(
        "{method} {path} HTTP/1.1\r\nhost: {addr}\r\nconnection: close\r\n\
         authorization: Bearer {token}\r\ncontent-type: application/x-ndjson\r\n\
         content-length: {}\r\n{extra}\r\n",
        10 * 1024 * 1024
    );
    let stream = tokio::net::TcpStream::connect(&addr).await.unwrap();
    let (mut reader, mut writer) = stream.into_split();
    let sending = tokio::spawn(async move {
        writer.write_all(head.as_bytes()).await?;
        writer.write_all(fast.as_bytes()).await?;
        while Instant::now() < until {
            tokio::time::sleep(Duration::from_millis(250)).await;
            i += 1;
            writer.write_all(line(i).as_bytes()).await?;
        }
        Ok::<_, std::io::Error>(())
    });
    let answer = tokio::time::timeout_at(until.into(), read_answer(&mut reader)).await;
    sending.abort();
    answer.ok().map(|read| read.expect("an answer"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_token_holds_at_most_its_share_of_the_turns_to_write_and_the_others_find_one() {
    const SLOTS: usize = 4;
    const SHARE: usize = SLOTS / 2; // the default share
    const LOADS: usize = 8;
    const PROMPT: Duration = Duration::from_secs(3);
    let pg = Postgres::start().await;
    let idem = Idem::start(
        &pg.url,
        "shared-turns",
        &[
            ("IDEM_MAX_CONCURRENT_LOADS", "4"),
            ("IDEM_LOAD_WAIT_MS", "2000"),
            ("IDEM_BODY_MIN_RATE_BYTES", "1000"),
            ("IDEM_BODY_MIN_RATE_GRACE_SECS", "2"),
        ],
    )
    .await;
    let admin = client();
    let heavy = scoped_token(&admin, &idem, "heavy", "heavy_*").await;
    let other = scoped_token(&admin, &idem, "other", "fast_*").await;
    declare(&admin, &idem, "fast_orders", ORDERS).await;

    // The heavy token's loads: half PUTs, half POSTs too large to be batched,
    // each to a table of its own, each keeping its turn as long as it can.
    let until = Instant::now() + Duration::from_secs(12);
    let mut loads = Vec::new();
    for i in 0..LOADS {
        let (addr, token) = (idem.addr.clone(), heavy.clone());
        loads.push(tokio::spawn(if i % 2 == 0 {
            let path = format!("/partitions/heavy_put_{i}/2026-10-12");
            held(addr, token, "PUT", path, String::new(), until)
        } else {
            let path = format!("/rows?table=heavy_rows_{i}");
            let key = format!("idempotency-key: heavy-{i}\r\n");
            held(addr, token, "POST", path, key, until)
        }));
    }
    tokio::time::sleep(Duration::from_secs(1)).await;
    let served = serve_other(&idem, &other, Duration::from_secs(7)).await;

    let mut answered = std::collections::BTreeMap::<String, usize>::new();
    let mut holding = 0;
    let mut details = std::collections::BTreeSet::new();
    for load in loads {
        match join(load).await {
            None => holding += 1,
            Some((status, _, body)) => {
                let problem: serde_json::Value = serde_json::from_str(&body).unwrap_or_default();
                let code = problem["code"].as_str().unwrap_or_default();
                *answered.entry(format!("{status} {code}")).or_default() += 1;
                details.insert(problem["detail"].as_str().unwrap_or_default().to_string());
            }
        }
    }
    let failed: Vec<_> = served
        .iter()
        .filter(|(_, status, took)| !(200..300).contains(status) || *took > PROMPT)
        .collect();
    let slowest = served.iter().map(|s| s.2).max().unwrap_or_default();
    report!(
        "shared turns: {SLOTS} turns to write, {LOADS} loads of one token that keep their \
         turn: {holding} held one, the others answered {answered:?} ({details:?}); another \
         token sent {} PUTs, POSTs and GETs meanwhile: {} failed or took over {PROMPT:?} \
         (slowest {slowest:.1?})",
        served.len(),
        failed.len()
    );
    assert!(
        failed.is_empty(),
        "the other token was not served: {failed:?}"
    );
    assert_eq!(holding, SHARE, "loads of the heavy token holding a turn");
    assert_eq!(
        answered.get("503 busy"),
        Some(&(LOADS - SHARE)),
        "{answered:?}"
    );
    assert!(
        details.iter().all(|d| d.contains("share")),
        "the heavy token is told its share is taken: {details:?}"
    );
}
