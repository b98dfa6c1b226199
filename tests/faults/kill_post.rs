//! `kill -9` during `POST /rows`, clients retrying each batch under its key
//! until it is acknowledged: every batch is written exactly once, and the
//! ledger holds exactly one completed load per key.
//! The Citus suite runs it too, on the cluster's coordinator.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::watch;

use crate::scenario::*;
use crate::support::*;

const DAY: &str = "2026-10-12";
const BATCH_ROWS: i64 = 500;

fn batch_body(batch: usize) -> String {
    let name = format!("b{batch}");
    (0..BATCH_ROWS).map(|n| event_line(&name, n, DAY)).collect()
}

/// How one batch went, as its client saw it.
#[derive(Default)]
struct Sent {
    attempts: usize,
    /// Attempts that got no answer (the process died under them, or was
    /// not there yet).
    unanswered: usize,
    /// The acknowledgement was a replay (an earlier attempt had committed,
    /// but its answer was lost with the process).
    replayed: bool,
    /// Other answers on the way: status and code.
    refusals: Vec<String>,
}

/// Idempotency keys stored (each one a committed write).
async fn keys(db: &sqlx::PgPool) -> i64 {
    sqlx::query_scalar("select count(*) from idem.idempotency_keys")
        .fetch_one(db)
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_9_during_post_with_retrying_clients_writes_each_batch_once() {
    let kills = rounds(10, 50);
    // Clients go on until the last kill is done (and at most this many batches).
    let max_batches = rounds(400, 2_000);
    let mut rng = Rng::for_scenario("kill -9 during POST");
    let pg = ScenarioDatabase::start().await;
    let db = db(pg.url()).await;
    let client = client();
    let mut idem = Idem::start(pg.url(), "kill-post-0", &[]).await;
    declare(&client, &idem, "events", EVENTS).await;

    // The clients read the current address on every attempt.
    let (base_tx, base_rx) = watch::channel(idem.base.clone());
    let next = Arc::new(AtomicUsize::new(0));
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let in_flight = Arc::new(AtomicUsize::new(0));
    let deadline = Instant::now() + Duration::from_secs(if long() { 600 } else { 120 });
    let mut workers = Vec::new();
    for _ in 0..4 {
        let (client, base_rx, next, in_flight, stop) = (
            client.clone(),
            base_rx.clone(),
            next.clone(),
            in_flight.clone(),
            stop.clone(),
        );
        workers.push(tokio::spawn(async move {
            let mut done: Vec<(usize, Sent)> = Vec::new();
            loop {
                if stop.load(Ordering::SeqCst) {
                    return done;
                }
                let batch = next.fetch_add(1, Ordering::SeqCst);
                if batch >= max_batches {
                    return done;
                }
                let body = batch_body(batch);
                let mut sent = Sent::default();
                loop {
                    assert!(
                        Instant::now() < deadline && sent.attempts < 500,
                        "batch {batch} not acknowledged after {} attempts",
                        sent.attempts
                    );
                    sent.attempts += 1;
                    let base = base_rx.borrow().clone();
                    in_flight.fetch_add(1, Ordering::SeqCst);
                    let answer = client
                        .post(format!("{base}/rows?table=events"))
                        .header("content-type", "application/x-ndjson")
                        .header("idempotency-key", format!("batch-{batch}"))
                        .body(body.clone())
                        .send()
                        .await;
                    in_flight.fetch_sub(1, Ordering::SeqCst);
                    let r = match answer {
                        Ok(r) => r,
                        Err(_) => {
                            sent.unanswered += 1;
                            tokio::time::sleep(Duration::from_millis(50)).await;
                            continue;
                        }
                    };
                    let status = r.status().as_u16();
                    let replayed = r
                        .headers()
                        .get("idempotent-replayed")
                        .is_some_and(|v| v == "true");
                    let retry_after = r.headers().contains_key("retry-after");
                    let text = r.text().await.unwrap_or_default();
                    if (200..300).contains(&status) {
                        sent.replayed = replayed;
                        break;
                    }
                    // Only "wait and retry" answers are expected here.
                    assert!(
                        (status == 503 || status == 409) && retry_after,
                        "batch {batch}: {status} {text}"
                    );
                    sent.refusals.push(status.to_string());
                    tokio::time::sleep(Duration::from_millis(200)).await;
                }
                done.push((batch, sent));
            }
        }));
    }

    // The killer: waits for requests in flight, then kills the process
    // after a random while, or the moment a write commits (its key is
    // stored), before its answer is out; starts a new process.
    let mut kills_done = 0;
    let (mut kills_with_requests, mut kills_at_commit) = (0, 0);
    while kills_done < kills && next.load(Ordering::SeqCst) < max_batches {
        let waiting = Instant::now();
        while in_flight.load(Ordering::SeqCst) == 0 && waiting.elapsed() < Duration::from_secs(5) {
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
        if kills_done % 2 == 0 {
            tokio::time::sleep(rng.between(Duration::from_millis(20), Duration::from_millis(300)))
                .await;
        } else {
            let stored = keys(&db).await;
            let waiting = Instant::now();
            while keys(&db).await == stored && waiting.elapsed() < Duration::from_secs(5) {
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
            kills_at_commit += 1;
        }
        if in_flight.load(Ordering::SeqCst) > 0 {
            kills_with_requests += 1;
        }
        idem.kill9().await;
        kills_done += 1;
        idem = Idem::start(pg.url(), &format!("kill-post-{kills_done}"), &[]).await;
        base_tx.send_replace(idem.base.clone());
        tokio::time::sleep(rng.between(Duration::ZERO, Duration::from_millis(200))).await;
    }
    stop.store(true, Ordering::SeqCst);
    let mut sent: BTreeMap<usize, Sent> = BTreeMap::new();
    for w in workers {
        sent.extend(join(w).await);
    }
    let batches = sent.len();
    assert_eq!(
        batches,
        next.load(Ordering::SeqCst).min(max_batches),
        "every batch acknowledged"
    );

    // Every batch exactly once: its rows, each once.
    let counts: Vec<(String, i64, i64)> = sqlx::query_as(
        "select batch, count(*), count(distinct n) from idem_data.events group by batch",
    )
    .fetch_all(&db)
    .await
    .unwrap();
    let counts: BTreeMap<String, (i64, i64)> =
        counts.into_iter().map(|(b, c, d)| (b, (c, d))).collect();
    for batch in 0..batches {
        assert_eq!(
            counts.get(&format!("b{batch}")),
            Some(&(BATCH_ROWS, BATCH_ROWS)),
            "batch {batch}: rows and distinct rows"
        );
    }
    assert_eq!(counts.len(), batches, "no rows of other batches");

    // Exactly one completed load per key in the ledger.
    let ledger: Vec<(Option<String>, i64, i64)> = sqlx::query_as(
        "select idempotency_key,
                count(*) filter (where status in ('published', 'unchanged')),
                count(*) filter (where status not in ('published', 'unchanged'))
           from idem.loads where table_name = 'events' group by 1",
    )
    .fetch_all(&db)
    .await
    .unwrap();
    let mut other_loads = 0;
    for (key, completed, other) in &ledger {
        assert_eq!(*completed, 1, "completed loads of key {key:?}");
        other_loads += other;
    }
    assert_eq!(ledger.len(), batches, "a ledger entry for every key");
    let keys = keys(&db).await;
    assert_eq!(keys, batches as i64, "one stored key per batch");
    assert_eq!(readyz(&client, &idem).await, 200);

    let attempts: usize = sent.values().map(|s| s.attempts).sum();
    let unanswered: usize = sent.values().map(|s| s.unanswered).sum();
    let replayed = sent.values().filter(|s| s.replayed).count();
    let refusals: usize = sent.values().map(|s| s.refusals.len()).sum();
    report!(
        "kill -9 during POST: {batches} batches of {BATCH_ROWS} rows by 4 retrying clients, \
         {kills_done} kills ({kills_with_requests} with requests in flight, {kills_at_commit} \
         aimed at a commit), {attempts} attempts \
         ({unanswered} unanswered, {refusals} answered 409/503 with Retry-After), \
         {replayed} acknowledged by a replay of a write whose answer was lost; \
         every batch present exactly once ({BATCH_ROWS} rows each), exactly one completed \
         load per key in idem.loads ({other_loads} failed/rejected entries besides), \
         {keys} keys stored, readyz 200"
    );
    drop(idem);
}
