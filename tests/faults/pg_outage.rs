//! Postgres stopped for a few seconds under load (a fast shutdown, then a
//! start): clients see 2xx or 503 with `Retry-After`, never a 500 and never
//! a hang; idem recovers without a restart; every acknowledged write is
//! there exactly once.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use chrono::NaiveDate;

use crate::scenario::*;
use crate::support::*;

const BATCH_ROWS: i64 = 100;
const WORKERS: usize = 6;
/// `/readyz` waits a second for the database; the rest is slack for a busy
/// machine.
const READYZ_WITHIN: Duration = Duration::from_secs(3);

/// Where the load was when a request was sent.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Phase {
    Before,
    Outage,
    After,
}

/// Answers by status and code ("503 busy"; 0: no answer), and the slowest.
type Answers = (BTreeMap<String, usize>, Duration);

#[derive(Default)]
struct Seen {
    /// (phase, what) -> answers by status and code (0: no answer), and the
    /// slowest
    statuses: BTreeMap<(Phase, &'static str), Answers>,
    /// Answers that are neither 2xx nor 503 with Retry-After, and requests
    /// without an answer: what, status, body.
    findings: Vec<String>,
    slowest: Duration,
}

/// A write the load sends: a batch of rows or a whole day.
#[derive(Clone, Debug)]
enum Write {
    Post { key: String, batch: String },
    Put { ds: String },
}

struct Load {
    idem_base: String,
    client: reqwest::Client,
    phase: Arc<Mutex<Phase>>,
    stop: Arc<AtomicBool>,
    seen: Arc<Mutex<Seen>>,
    sequence: Arc<AtomicUsize>,
}

impl Load {
    fn phase(&self) -> Phase {
        *self.phase.lock().unwrap()
    }

    /// Sends one request and files its answer; the status (0: none) and
    /// whether it said when to retry.
    async fn send(&self, what: &'static str, request: reqwest::RequestBuilder) -> (u16, bool) {
        let phase = self.phase();
        let started = Instant::now();
        let answer = request.send().await;
        let (status, retry_after, body) = match answer {
            Ok(r) => {
                let status = r.status().as_u16();
                let retry_after = r.headers().contains_key("retry-after");
                let body = r.text().await.unwrap_or_default();
                (status, retry_after, body)
            }
            Err(e) => (
                0,
                false,
                format!("no answer: {e} (after {:?})", started.elapsed()),
            ),
        };
        let took = started.elapsed();
        let mut seen = self.seen.lock().unwrap();
        seen.slowest = seen.slowest.max(took);
        let code = serde_json::from_str::<serde_json::Value>(&body)
            .ok()
            .and_then(|v| v["code"].as_str().map(|c| format!(" {c}")))
            .unwrap_or_default();
        let (statuses, slowest) = seen.statuses.entry((phase, what)).or_default();
        *statuses.entry(format!("{status}{code}")).or_default() += 1;
        *slowest = (*slowest).max(took);
        let expected = (200..300).contains(&status)
            || (status == 404 && what.starts_with("GET day"))
            || (status == 503 && retry_after);
        if !expected {
            seen.findings
                .push(format!("{what} during {phase:?}: {status} {body}"));
        }
        // A readiness probe is answered within a second, database or not.
        if what.contains("/readyz") && took > READYZ_WITHIN {
            seen.findings
                .push(format!("{what} during {phase:?} took {took:?}"));
        }
        (status, retry_after)
    }

    /// Sends `write` until it is acknowledged (true) or the load gives up
    /// on it: an answer that is not "retry later", or 60 s past the stop.
    async fn until_acknowledged(&self, write: &Write) -> bool {
        let give_up = Instant::now() + Duration::from_secs(120);
        loop {
            let (what, request) = match write {
                Write::Post { key, batch } => (
                    "POST /rows",
                    self.client
                        .post(format!("{}/rows?table=events", self.idem_base))
                        .header("content-type", "application/x-ndjson")
                        .header("idempotency-key", key.as_str())
                        .body(
                            (0..BATCH_ROWS)
                                .map(|n| event_line(batch, n, "2026-10-12"))
                                .collect::<String>(),
                        ),
                ),
                Write::Put { ds } => (
                    "PUT /partitions",
                    self.client
                        .put(format!("{}/partitions/orders/{ds}", self.idem_base))
                        .header("content-type", "application/x-ndjson")
                        .body(
                            (1..=BATCH_ROWS)
                                .map(|id| order_line(id, ds, "paid"))
                                .collect::<String>(),
                        ),
                ),
            };
            match self.send(what, request).await {
                (200..=299, _) => return true,
                (503, true) if Instant::now() < give_up => {
                    tokio::time::sleep(Duration::from_millis(500)).await;
                }
                _ => return false,
            }
        }
    }

    /// A prober: reads a day and asks `/readyz` every 100 ms until told to
    /// stop, to see what reads get while the database is away.
    async fn probe(self) -> Vec<(Write, bool)> {
        while !self.stop.load(Ordering::SeqCst) {
            let read = self
                .client
                .get(format!("{}/partitions/orders/2026-01-03", self.idem_base));
            self.send("GET day (prober)", read).await;
            let probe = self.client.get(format!("{}/readyz", self.idem_base));
            self.send("GET /readyz (prober)", probe).await;
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        Vec::new()
    }

    /// One client: writes, with a read and a readiness probe between them,
    /// until told to stop. Returns its writes and whether each was
    /// acknowledged.
    async fn run(self) -> Vec<(Write, bool)> {
        let mut done = Vec::new();
        while !self.stop.load(Ordering::SeqCst) {
            let n = self.sequence.fetch_add(1, Ordering::SeqCst);
            let write = if n % 3 == 2 {
                let ds = NaiveDate::from_ymd_opt(2026, 1, 1).unwrap() + chrono::Days::new(n as u64);
                Write::Put { ds: ds.to_string() }
            } else {
                Write::Post {
                    key: format!("outage-{n}"),
                    batch: format!("w{n}"),
                }
            };
            let acknowledged = self.until_acknowledged(&write).await;
            done.push((write, acknowledged));
            let read = self
                .client
                .get(format!("{}/partitions/orders/2026-01-03", self.idem_base));
            self.send("GET day", read).await;
            let probe = self.client.get(format!("{}/readyz", self.idem_base));
            self.send("GET /readyz", probe).await;
        }
        done
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_stopped_under_load_answers_503_never_500_and_recovers() {
    // A short outage, and one longer than idem's wait for a connection (10 s).
    let outages: &[u64] = if long() { &[3, 12, 5, 40, 1] } else { &[3, 12] };
    let pg = Postgres::start().await;
    let db_url = pg.url.clone();
    let client = client();
    let mut idem = Idem::start(&pg.url, "pg-outage", &[]).await;
    let pid = idem.pid();
    declare(&client, &idem, "events", EVENTS).await;
    declare(&client, &idem, "orders", ORDERS).await;

    let phase = Arc::new(Mutex::new(Phase::Before));
    let stop = Arc::new(AtomicBool::new(false));
    let seen = Arc::new(Mutex::new(Seen::default()));
    let sequence = Arc::new(AtomicUsize::new(0));
    let workers: Vec<_> = (0..=WORKERS)
        .map(|i| {
            let load = Load {
                idem_base: idem.base.clone(),
                client: client.clone(),
                phase: phase.clone(),
                stop: stop.clone(),
                seen: seen.clone(),
                sequence: sequence.clone(),
            };
            if i == WORKERS {
                tokio::spawn(load.probe())
            } else {
                tokio::spawn(load.run())
            }
        })
        .collect();

    let mut down_for = Vec::new();
    tokio::time::sleep(Duration::from_secs(2)).await;
    for outage in outages {
        *phase.lock().unwrap() = Phase::Outage;
        let stopping = Instant::now();
        pg.stop().await;
        tokio::time::sleep(Duration::from_secs(*outage)).await;
        pg.start_again().await;
        down_for.push(stopping.elapsed());
        *phase.lock().unwrap() = Phase::After;
        tokio::time::sleep(Duration::from_secs(3)).await;
    }
    stop.store(true, Ordering::SeqCst);
    let mut writes = Vec::new();
    for w in workers {
        writes.extend(join(w).await);
    }

    // Recovered without a restart: the same process, ready, and writing.
    assert!(idem.alive(), "idem exited");
    assert_eq!(idem.pid(), pid);
    let ready = wait_ready(&client, &idem, Duration::from_secs(30)).await;
    assert!(
        ready.is_some(),
        "/readyz is not 200 30 s after Postgres is back"
    );
    let r = client
        .post(idem.url("/rows?table=events"))
        .header("content-type", "application/x-ndjson")
        .header("idempotency-key", "after-the-outage")
        .body(event_line("after", 1, "2026-10-12"))
        .send()
        .await
        .expect("a write after the outage");
    assert_eq!(r.status(), 200, "a write after the outage");

    // Every acknowledged write is there exactly once; every other one is
    // there in full or not at all.
    let db = db(&db_url).await;
    let batches: BTreeMap<String, i64> = sqlx::query_as::<_, (String, i64)>(
        "select batch, count(*) from idem_data.events group by 1",
    )
    .fetch_all(&db)
    .await
    .unwrap()
    .into_iter()
    .collect();
    let days: BTreeMap<String, i64> = sqlx::query_as::<_, (String, i64)>(
        "select ds::text, count(*) from idem_data.orders group by 1",
    )
    .fetch_all(&db)
    .await
    .unwrap()
    .into_iter()
    .collect();
    let (mut acknowledged, mut given_up, mut given_up_written) = (0, 0, 0);
    for (write, acked) in &writes {
        let rows = match write {
            Write::Post { batch, .. } => batches.get(batch).copied().unwrap_or(0),
            Write::Put { ds } => days.get(ds).copied().unwrap_or(0),
        };
        if *acked {
            acknowledged += 1;
            assert_eq!(rows, BATCH_ROWS, "{write:?} was acknowledged");
        } else {
            given_up += 1;
            assert!(rows == 0 || rows == BATCH_ROWS, "{write:?}: {rows} rows");
            given_up_written += usize::from(rows > 0);
        }
    }

    let seen = seen.lock().unwrap();
    let causes = idem.failures_logged();
    for finding in &seen.findings {
        report!("Postgres outage: FINDING {finding}");
    }
    // The causes idem logged for its 5xx answers: every 503 has one too,
    // so they are shown only when something unexpected was seen.
    if !seen.findings.is_empty() {
        for cause in &causes {
            report!("Postgres outage: logged cause {cause}");
        }
    }
    let mut table = String::new();
    for ((phase, what), (statuses, slowest)) in &seen.statuses {
        table.push_str(&format!(
            "\n    {phase:?} {what}: {statuses:?}, slowest {slowest:.1?}"
        ));
    }
    report!(
        "Postgres stopped under load: {WORKERS} writing clients and a prober, {} outage(s) of \
         {down_for:.1?} (fast shutdown, then start), answers by phase (when sent) and status \
         (0 = none):{table}\n    \
         {acknowledged} writes acknowledged, each present exactly once; {given_up} given up \
         ({given_up_written} of them written in full, none in part); slowest answer {:?} \
         (client deadline {CLIENT_DEADLINE:?}); {} answers other than 2xx or 503 with \
         Retry-After, or /readyz slower than {READYZ_WITHIN:?} ({} 5xx causes logged); \
         recovered without a restart (same pid), readyz 200 (within {:?} of the load's end), \
         a write succeeds",
        outages.len(),
        seen.slowest,
        seen.findings.len(),
        causes.len(),
        ready.unwrap()
    );
    assert!(
        seen.findings.is_empty(),
        "answers other than 2xx or 503 with Retry-After, none, or a slow /readyz: {:#?}",
        seen.findings
    );
    assert_eq!(given_up, 0, "writes given up although Postgres came back");
    drop(idem);
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
