//! Clients behind a reverse proxy: every one of them reaches idem from the
//! proxy's address. With the proxy trusted (`IDEM_TRUSTED_PROXIES`), each
//! forwarded client holds its own share of `IDEM_MAX_CONNECTIONS_PER_CLIENT`
//! (requests in flight), the proxy's connections are not capped as one
//! client's, and the access log names the forwarded client. Untrusted, the
//! forwarding headers change nothing: anyone can send them.

use std::time::Duration;

use tokio::io::AsyncWriteExt;

use crate::scenario::*;
use crate::support::*;

const SHARE: usize = 4;
const HOLDER: &str = "203.0.113.7";
const OTHER: &str = "198.51.100.9";

/// A PUT from `client` (as the proxy forwards it) whose body stalls after
/// a few bytes: it holds its place until the task is aborted, which
/// closes its connection.
fn stalled_put(idem: &Idem, client: &'static str) -> tokio::task::JoinHandle<()> {
    let addr = idem.addr.clone();
    tokio::spawn(async move {
        let mut stream = tokio::net::TcpStream::connect(&addr).await.unwrap();
        let head = format!(
            "PUT /partitions/orders/2026-10-12 HTTP/1.1\r\nhost: {addr}\r\n\
             authorization: Bearer {ADMIN_TOKEN}\r\ncontent-type: application/x-ndjson\r\n\
             x-forwarded-for: {client}\r\ncontent-length: 1000\r\n\r\n{{\"order_id\""
        );
        stream.write_all(head.as_bytes()).await.unwrap();
        std::future::pending::<()>().await;
    })
}

/// `GET /tables` from `client`, as the proxy forwards it.
async fn tables_from(idem: &Idem, client: &str) -> RawAnswer {
    let headers = [("x-forwarded-for", client)];
    raw_request(
        &idem.addr,
        "GET",
        "/tables",
        &headers,
        RawBody::Whole(Vec::new()),
        CLIENT_DEADLINE,
    )
    .await
    .expect("an answer")
}

/// Starts idem (`trusted`: the proxy's address trusted) with its share of
/// connections small and bodies slow to time out, `orders` declared.
async fn behind_a_proxy(pg: &Postgres, name: &str, trusted: bool) -> Idem {
    let share = SHARE.to_string();
    let mut env = vec![
        ("IDEM_MAX_CONNECTIONS_PER_CLIENT", share.as_str()),
        ("IDEM_BODY_IDLE_TIMEOUT_SECS", "60"),
    ];
    if trusted {
        env.push(("IDEM_TRUSTED_PROXIES", "127.0.0.1/32,::1"));
    }
    let idem = Idem::start(&pg.url, name, &env).await;
    declare(&client(), &idem, "orders", ORDERS).await;
    // The declaring client's connection closes with it, a moment later:
    // then the peer holds no connection.
    settle().await;
    idem
}

/// Lets the stalled requests reach the server before the next one.
async fn settle() {
    tokio::time::sleep(Duration::from_millis(500)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn behind_a_trusted_proxy_each_forwarded_client_has_its_own_share() {
    let pg = Postgres::start().await;
    let idem = behind_a_proxy(&pg, "trusted-proxy", true).await;
    let held: Vec<_> = (0..SHARE).map(|_| stalled_put(&idem, HOLDER)).collect();
    settle().await;

    let over = tables_from(&idem, HOLDER).await;
    let other = tables_from(&idem, OTHER).await;
    report!(
        "trusted proxy: {HOLDER} holds {SHARE} requests, its next answered {} {}; \
         {OTHER} answered {} (the proxy's address holds {} connections)",
        over.status,
        over.code(),
        other.status,
        SHARE + 2
    );
    assert_eq!(
        (over.status, over.code().as_str()),
        (429, "too_many_connections")
    );
    assert!(over.header("retry-after").is_some(), "{over:?}");
    assert_eq!(
        other.status, 200,
        "another client behind the proxy is served"
    );

    for task in held {
        task.abort();
    }
    settle().await;
    let again = tables_from(&idem, HOLDER).await;
    assert_eq!(
        again.status, 200,
        "its requests ended, the client is served again"
    );

    for client in [HOLDER, OTHER] {
        assert!(
            logged_client(&idem, client).await,
            "the access log names {client}"
        );
    }
}

/// Whether an access log line names `client` (the log is written a moment
/// after the answer).
async fn logged_client(idem: &Idem, client: &str) -> bool {
    let field = format!("\"client\":\"{client}\"");
    for _ in 0..50 {
        let log = std::fs::read_to_string(&idem.log).unwrap_or_default();
        if log
            .lines()
            .any(|l| l.contains("answered") && l.contains(&field))
        {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    false
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forwarding_headers_from_an_untrusted_peer_change_nothing() {
    let pg = Postgres::start().await;
    let idem = behind_a_proxy(&pg, "untrusted-proxy", false).await;
    let held: Vec<_> = (0..SHARE).map(|_| stalled_put(&idem, HOLDER)).collect();
    settle().await;

    // Another address claimed in a header is still the peer's connection.
    let spoofed = tables_from(&idem, OTHER).await;
    report!(
        "untrusted proxy: the peer holds {SHARE} connections; one more claiming to be {OTHER} answered {} {}",
        spoofed.status,
        spoofed.code()
    );
    assert_eq!(
        (spoofed.status, spoofed.code().as_str()),
        (429, "too_many_connections")
    );
    for task in held {
        task.abort();
    }
    settle().await;
    assert_eq!(tables_from(&idem, OTHER).await.status, 200);
    assert!(
        logged_client(&idem, "127.0.0.1").await,
        "the peer is the client"
    );
    assert!(
        !logged_client(&idem, OTHER).await,
        "an untrusted header names no client in the log"
    );
}
