//! Postgres stopped for a few seconds under load (a fast shutdown, then a
//! start): clients see 2xx or 503 with `Retry-After`, never a 500 and never
//! a hang; idem recovers without a restart; every acknowledged write is
//! there exactly once (the load and its checks: `outage`).

use std::time::{Duration, Instant};

use crate::outage;
use crate::scenario::*;
use crate::support::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_stopped_under_load_answers_503_never_500_and_recovers() {
    // A short outage, and one longer than idem's wait for a connection (10 s).
    let outages: &[u64] = if long() { &[3, 12, 5, 40, 1] } else { &[3, 12] };
    let pg = Postgres::start().await;
    let mut idem = Idem::start(&pg.url, "pg-outage", &[]).await;
    outage::declare_tables(&client(), &idem).await;
    let run = outage::load_through(&idem, &pg, outages).await;
    outage::check_recovered("Postgres stopped under load", &mut idem, &pg.url, run).await;
}

/// Once the database is known to be away (here `/readyz` found it so), a
/// write is answered `503 database_unavailable` at once, not after the
/// pool's wait for a connection; the answers are logged as warnings, and
/// writes succeed again once Postgres is back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writes_while_the_database_is_known_away_answer_503_within_two_seconds() {
    const WRITES: i64 = 16;
    const PROMPT: Duration = Duration::from_secs(2);
    let pg = Postgres::start().await;
    let client = client();
    let idem = Idem::start(&pg.url, "known-away", &[]).await;
    declare(&client, &idem, "events", EVENTS).await;
    declare(&client, &idem, "orders", ORDERS).await;
    let write = |n: i64| {
        if n % 2 == 0 {
            client
                .put(idem.url(&format!("/partitions/orders/2026-01-{:02}", 1 + n % 28)))
                .header("content-type", "application/x-ndjson")
                .body(order_line(n, &format!("2026-01-{:02}", 1 + n % 28), "paid"))
        } else {
            client
                .post(idem.url("/rows?table=events"))
                .header("content-type", "application/x-ndjson")
                .header("idempotency-key", format!("away-{n}"))
                .body(event_line("away", n, "2026-10-12"))
        }
    };
    assert_eq!(write(0).send().await.unwrap().status(), 200);

    pg.stop().await;
    let noticed = Instant::now();
    while readyz(&client, &idem).await != 503 {
        assert!(
            noticed.elapsed() < Duration::from_secs(10),
            "/readyz never said 503"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let mut answers = Vec::new();
    for n in 1..=WRITES {
        let started = Instant::now();
        let r = write(n).send().await.unwrap();
        let retry_after = r.headers().contains_key("retry-after");
        let status = r.status().as_u16();
        let body: serde_json::Value = r.json().await.unwrap_or_default();
        answers.push((
            status,
            body["code"].as_str().unwrap_or("").to_string(),
            retry_after,
            started.elapsed(),
        ));
    }
    pg.start_again().await;
    let back = Instant::now();
    let recovered = loop {
        let status = write(WRITES + 1)
            .send()
            .await
            .map_or(0, |r| r.status().as_u16());
        if status == 200 || back.elapsed() > Duration::from_secs(30) {
            break status;
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    };
    let slowest = answers.iter().map(|a| a.3).max().unwrap_or_default();
    let logged = idem.failures_logged();
    let errors = logged
        .iter()
        .filter(|l| l.contains("\"level\":\"ERROR\""))
        .count();
    report!(
        "database known away: {WRITES} writes after /readyz said 503: {:?}; slowest {slowest:.1?} \
         (limit {PROMPT:?}); {} failures logged, {errors} of them at ERROR; after the restart \
         a write answered {recovered} within {:.1?}",
        answers
            .iter()
            .map(|a| format!("{} {}", a.0, a.1))
            .collect::<std::collections::BTreeSet<_>>(),
        logged.len(),
        back.elapsed()
    );
    for (status, code, retry_after, took) in &answers {
        assert_eq!((*status, code.as_str()), (503, "database_unavailable"));
        assert!(retry_after, "a 503 says when to retry");
        assert!(*took < PROMPT, "a write took {took:?} to be refused");
    }
    assert_eq!(errors, 0, "503s logged at ERROR: {logged:#?}");
    assert_eq!(recovered, 200, "a write once Postgres is back");
}
