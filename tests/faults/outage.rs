//! A load through outages of the database, or of a part of it: six
//! clients writing (batches of rows with idempotency keys, whole days) and
//! a prober reading a day and asking `/readyz`, while a target is stopped
//! and started again. Every answer must be 2xx or 503 with `Retry-After`,
//! never a 500 and never a hang; idem must recover without a restart; every
//! acknowledged write must be there exactly once. `pg_outage` stops the
//! whole Postgres; the Citus suite stops one worker at a time.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use chrono::NaiveDate;

use crate::scenario::*;
use crate::support::*;

/// What an outage stops and starts again, round by round.
pub(crate) trait Outage {
    /// What round `round` stops, for the report ("Postgres (fast)").
    fn describe(&self, round: usize) -> String;
    async fn stop(&self, round: usize);
    async fn start_again(&self, round: usize);
}

impl Outage for Postgres {
    fn describe(&self, _round: usize) -> String {
        "Postgres (fast shutdown)".into()
    }

    async fn stop(&self, _round: usize) {
        Postgres::stop(self).await;
    }

    async fn start_again(&self, _round: usize) {
        Postgres::start_again(self).await;
    }
}

const BATCH_ROWS: i64 = 100;
const WORKERS: usize = 6;
/// `/readyz` waits a second for the database; the rest is slack for a busy
/// machine.
const READYZ_WITHIN: Duration = Duration::from_secs(3);

/// Where the load was when a request was sent.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Phase {
    Before,
    Outage,
    After,
}

/// Answers by status and code ("503 busy"; 0: no answer), and the slowest.
type Answers = (BTreeMap<String, usize>, Duration);

#[derive(Default)]
pub struct Seen {
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
pub enum Write {
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
            self.read_and_probe(["GET day (prober)", "GET /readyz (prober)"])
                .await;
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        Vec::new()
    }

    /// A read of a day and a readiness probe, each under its label.
    async fn read_and_probe(&self, [read_label, probe_label]: [&'static str; 2]) {
        let read = self
            .client
            .get(format!("{}/partitions/orders/2026-01-03", self.idem_base));
        self.send(read_label, read).await;
        let probe = self.client.get(format!("{}/readyz", self.idem_base));
        self.send(probe_label, probe).await;
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
            self.read_and_probe(["GET day", "GET /readyz"]).await;
        }
        done
    }
}

/// The tables the load writes, declared on `idem`.
pub async fn declare_tables(client: &reqwest::Client, idem: &Idem) {
    declare(client, idem, "events", EVENTS).await;
    declare(client, idem, "orders", ORDERS).await;
}

/// What a load through outages saw.
pub struct Run {
    writes: Vec<(Write, bool)>,
    seen: Seen,
    /// Each outage, stop to start, and what it stopped.
    outages: Vec<(String, Duration)>,
    pid: u32,
}

/// Runs the load on `idem` (its tables declared) through one outage of
/// `target` per entry of `outages` (seconds down), with 2 s of load before
/// the first and 3 s after each.
pub async fn load_through<O: Outage>(idem: &Idem, target: &O, outages: &[u64]) -> Run {
    let client = client();
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

    let mut down = Vec::new();
    tokio::time::sleep(Duration::from_secs(2)).await;
    for (round, outage) in outages.iter().enumerate() {
        *phase.lock().unwrap() = Phase::Outage;
        let stopping = Instant::now();
        target.stop(round).await;
        tokio::time::sleep(Duration::from_secs(*outage)).await;
        target.start_again(round).await;
        down.push((target.describe(round), stopping.elapsed()));
        *phase.lock().unwrap() = Phase::After;
        tokio::time::sleep(Duration::from_secs(3)).await;
    }
    stop.store(true, Ordering::SeqCst);
    let mut writes = Vec::new();
    for w in workers {
        writes.extend(join(w).await);
    }
    let seen = std::mem::take(&mut *seen.lock().unwrap());
    Run {
        writes,
        seen,
        outages: down,
        pid: idem.pid(),
    }
}

/// Checks what `run` saw and what the database at `db_url` holds after it,
/// and reports it under `title`: only 2xx or 503 with Retry-After; idem the
/// same process, ready and writing; every acknowledged write there exactly
/// once, every other one in full or not at all, none given up.
pub async fn check_recovered(title: &str, idem: &mut Idem, db_url: &str, run: Run) {
    let client = client();
    assert!(idem.alive(), "idem exited");
    assert_eq!(idem.pid(), run.pid);
    let ready = wait_ready(&client, idem, Duration::from_secs(30)).await;
    assert!(ready.is_some(), "/readyz is not 200 30 s after the outage");
    let r = client
        .post(idem.url("/rows?table=events"))
        .header("content-type", "application/x-ndjson")
        .header("idempotency-key", "after-the-outage")
        .body(event_line("after", 1, "2026-10-12"))
        .send()
        .await
        .expect("a write after the outage");
    assert_eq!(r.status(), 200, "a write after the outage");
    let stored = Stored::read(db_url).await;
    let (mut acknowledged, mut given_up, mut given_up_written) = (0, 0, 0);
    for (write, acked) in &run.writes {
        let rows = stored.rows_of(write);
        if *acked {
            acknowledged += 1;
            assert_eq!(rows, BATCH_ROWS, "{write:?} was acknowledged");
        } else {
            given_up += 1;
            assert!(rows == 0 || rows == BATCH_ROWS, "{write:?}: {rows} rows");
            given_up_written += usize::from(rows > 0);
        }
    }
    let seen = &run.seen;
    let causes = idem.failures_logged();
    for finding in &seen.findings {
        report!("{title}: FINDING {finding}");
    }
    // The causes idem logged for its 5xx answers: every 503 has one too,
    // so they are shown only when something unexpected was seen.
    if !seen.findings.is_empty() {
        for cause in &causes {
            report!("{title}: logged cause {cause}");
        }
    }
    let mut table = String::new();
    for ((phase, what), (statuses, slowest)) in &seen.statuses {
        table.push_str(&format!(
            "\n    {phase:?} {what}: {statuses:?}, slowest {slowest:.1?}"
        ));
    }
    report!(
        "{title}: {WORKERS} writing clients and a prober, {} outage(s) ({:.1?}), answers by \
         phase (when sent) and status (0 = none):{table}\n    \
         {acknowledged} writes acknowledged, each present exactly once; {given_up} given up \
         ({given_up_written} of them written in full, none in part); slowest answer {:?} \
         (client deadline {CLIENT_DEADLINE:?}); {} answers other than 2xx or 503 with \
         Retry-After, or /readyz slower than {READYZ_WITHIN:?} ({} 5xx causes logged); \
         recovered without a restart (same pid), readyz 200 (within {:?} of the load's end), \
         a write succeeds",
        run.outages.len(),
        run.outages,
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
    assert_eq!(
        given_up, 0,
        "writes given up although the database came back"
    );
}

/// The rows of each batch and each day, as stored.
struct Stored {
    batches: BTreeMap<String, i64>,
    days: BTreeMap<String, i64>,
}

impl Stored {
    async fn read(db_url: &str) -> Stored {
        let db = db(db_url).await;
        let count = |sql: &'static str| {
            let db = db.clone();
            async move {
                sqlx::query_as::<_, (String, i64)>(sql)
                    .fetch_all(&db)
                    .await
                    .unwrap()
                    .into_iter()
                    .collect::<BTreeMap<_, _>>()
            }
        };
        Stored {
            batches: count("select batch, count(*) from idem_data.events group by 1").await,
            days: count("select ds::text, count(*) from idem_data.orders group by 1").await,
        }
    }

    fn rows_of(&self, write: &Write) -> i64 {
        let rows = match write {
            Write::Post { batch, .. } => self.batches.get(batch),
            Write::Put { ds } => self.days.get(ds),
        };
        rows.copied().unwrap_or(0)
    }
}
