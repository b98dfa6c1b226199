//! Three idem processes on one database: many requests with one
//! Idempotency-Key write once (the others replay, or 409 with Retry-After),
//! and PUTs racing on one day leave exactly one of their bodies. The Citus
//! suite runs it too, on the cluster's coordinator.

use std::collections::BTreeMap;

use crate::scenario::*;
use crate::support::*;

const DAY: &str = "2026-10-12";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_processes_race_on_one_key_and_on_one_day() {
    let key_rounds = rounds(3, 12);
    let put_rounds = rounds(3, 12);
    const SAME_KEY: usize = 24;
    const PUTS: usize = 6;
    let pg = ScenarioDatabase::start().await;
    let db = db(pg.url()).await;
    let client = client();
    // The third process waits only briefly for a key in flight, so that
    // both answers to a racing request (a replay, a 409) are seen.
    let processes = [
        Idem::start(pg.url(), "race-a", &[]).await,
        Idem::start(pg.url(), "race-b", &[]).await,
        Idem::start(pg.url(), "race-c", &[("IDEM_IDEMPOTENCY_WAIT_MS", "20")]).await,
    ];
    declare(&client, &processes[0], "events", EVENTS).await;
    declare(&client, &processes[1], "orders", ORDERS).await;

    // Same-key POSTs: an append table, so a second write would be seen.
    let mut answers: BTreeMap<String, usize> = BTreeMap::new();
    for round in 0..key_rounds {
        let key = format!("race-{round}");
        let body: String = (0..2_000).map(|n| event_line(&key, n, DAY)).collect();
        let tasks: Vec<_> = (0..SAME_KEY)
            .map(|i| {
                let request = client
                    .post(processes[i % 3].url("/rows?table=events"))
                    .header("content-type", "application/x-ndjson")
                    .header("idempotency-key", key.as_str())
                    .body(body.clone());
                tokio::spawn(async move {
                    let r = request.send().await.expect("an answer");
                    let status = r.status().as_u16();
                    let replayed = r.headers().get("idempotent-replayed").cloned();
                    let retry_after = r.headers().contains_key("retry-after");
                    let text = r.text().await.unwrap_or_default();
                    (status, replayed, retry_after, text)
                })
            })
            .collect();
        let mut first_writes = 0;
        for t in tasks {
            let (status, replayed, retry_after, text) = join(t).await;
            let kind = match (status, replayed.as_ref().map(|v| v.to_str().unwrap_or(""))) {
                (200, Some("false")) => {
                    first_writes += 1;
                    "200 write"
                }
                (200, Some("true")) => "200 replay",
                (409, _) if retry_after => "409 in flight, Retry-After",
                _ => panic!("round {round}: unexpected answer {status} {replayed:?} {text}"),
            };
            *answers.entry(kind.to_string()).or_default() += 1;
        }
        assert_eq!(first_writes, 1, "round {round}: writes under one key");
        let rows: i64 =
            sqlx::query_scalar("select count(*) from idem_data.events where batch = $1")
                .bind(&key)
                .fetch_one(&db)
                .await
                .unwrap();
        assert_eq!(rows, 2_000, "round {round}: the key's rows, once");
        let completed: i64 = sqlx::query_scalar(
            "select count(*) from idem.loads where idempotency_key = $1 and status in ('published', 'unchanged')",
        )
        .bind(&key)
        .fetch_one(&db)
        .await
        .unwrap();
        assert_eq!(completed, 1, "round {round}: completed loads of the key");
    }
    report!(
        "three processes, one key: {key_rounds} rounds of {SAME_KEY} concurrent POSTs with one \
         Idempotency-Key over 3 processes: {answers:?}; exactly one write per key (2,000 rows \
         once, one completed load)"
    );

    // Same-day PUTs: each body has its own rows and values.
    let mut winners = BTreeMap::new();
    for round in 0..put_rounds {
        let bodies: Vec<String> = (0..PUTS)
            .map(|k| {
                let first = 1 + 100 * k as i64;
                (first..first + 3_000 + 10 * k as i64)
                    .map(|id| order_line(id, DAY, &format!("r{round}b{k}")))
                    .collect()
            })
            .collect();
        let tasks: Vec<_> = bodies
            .iter()
            .enumerate()
            .map(|(k, body)| {
                let request = client
                    .put(processes[k % 3].url(&format!("/partitions/orders/{DAY}")))
                    .header("content-type", "application/x-ndjson")
                    .body(body.clone());
                tokio::spawn(async move {
                    let r = request.send().await.expect("an answer");
                    let status = r.status().as_u16();
                    let text = r.text().await.unwrap_or_default();
                    (status, text)
                })
            })
            .collect();
        let mut hashes = Vec::new();
        for t in tasks {
            let (status, text) = join(t).await;
            assert_eq!(status, 200, "round {round}: {text}");
            let answer: serde_json::Value = serde_json::from_str(&text).unwrap();
            hashes.push(answer["content_sha256"].as_str().unwrap().to_string());
        }
        // The day is exactly one body: its rows, all of them, no others.
        let read = read_partition(&client, &processes[round % 3], "orders", DAY).await;
        assert_eq!(read.status, 200);
        let mut statuses: Vec<&str> = read
            .lines
            .iter()
            .map(|l| {
                let status = l.split("\"status\":\"").nth(1).unwrap();
                &status[..status.find('"').unwrap()]
            })
            .collect();
        statuses.dedup();
        statuses.sort_unstable();
        statuses.dedup();
        assert_eq!(
            statuses.len(),
            1,
            "round {round}: rows of several bodies: {statuses:?}"
        );
        let k: usize = statuses[0].rsplit('b').next().unwrap().parse().unwrap();
        assert_eq!(
            read.lines.len(),
            3_000 + 10 * k,
            "round {round}: all of body {k}"
        );
        assert_eq!(
            read.etag.as_deref(),
            Some(hashes[k].as_str()),
            "round {round}: ETag"
        );
        *winners.entry(k).or_insert(0) += 1;
    }
    report!(
        "three processes, one day: {put_rounds} rounds of {PUTS} concurrent PUTs of different \
         bodies over 3 processes, all 200; the day always exactly one body (all its rows, no \
         other's, its ETag); winning body by index: {winners:?}"
    );
    drop(processes);
}
