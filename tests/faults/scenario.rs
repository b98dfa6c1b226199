//! What only the fault suite needs: its quick and long profiles, a seeded
//! random source, a report line that the harness does not capture, and the
//! looks behind the API its scenarios take (a partition, the stages, a
//! small pool). The Postgres, the `idem serve` processes and the clients
//! are the shared ones, in `tests/support/`.

use std::time::Duration;

use sqlx::postgres::{PgPool, PgPoolOptions};

use crate::support::{fresh_database_url, Idem, Postgres, TestDatabase};

/// Prints a line of the suite's report even when the test harness captures
/// output (it captures `print!`, not writes to the stream itself), so that
/// `scripts/test` shows what each scenario did.
macro_rules! report {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stderr().lock(), "faults: {}", format!($($arg)*));
    }};
}
pub(crate) use report;

/// `IDEM_FAULTS=long`: more rounds, more kills, more cases.
pub fn long() -> bool {
    std::env::var("IDEM_FAULTS").is_ok_and(|v| v.eq_ignore_ascii_case("long"))
}

/// `quick` in the quick profile, `long` in the long one.
pub fn rounds(quick: usize, long_rounds: usize) -> usize {
    if long() {
        long_rounds
    } else {
        quick
    }
}

/// SplitMix64: small, seeded, and the same moments for the same seed.
pub struct Rng(u64);

impl Rng {
    /// A scenario's random source: `IDEM_FAULTS_SEED` when set, otherwise a
    /// fixed seed in the quick profile (a CI run is reproducible) and the
    /// clock in the long one (each long run explores new moments). The seed
    /// is printed either way.
    pub fn for_scenario(name: &str) -> Rng {
        let seed = match std::env::var("IDEM_FAULTS_SEED") {
            Ok(s) => s.parse().expect("IDEM_FAULTS_SEED is a number"),
            Err(_) if long() => std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(1, |d| d.as_nanos() as u64),
            Err(_) => 20_261_130,
        };
        report!("{name}: seed {seed} (IDEM_FAULTS_SEED={seed} replays it)");
        Rng(seed
            ^ name
                .bytes()
                .fold(0u64, |h, b| h.rotate_left(5) ^ u64::from(b)))
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in `0..n` (n > 0).
    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n
    }

    /// A duration uniform in `lo..=hi`.
    pub fn between(&mut self, lo: Duration, hi: Duration) -> Duration {
        let span = hi.saturating_sub(lo).as_micros() as u64;
        lo + Duration::from_micros(self.below(span + 1))
    }
}

/// A small pool on a scenario's database, for looking behind the API.
pub async fn db(url: &str) -> PgPool {
    PgPoolOptions::new()
        .max_connections(2)
        .acquire_timeout(Duration::from_secs(10))
        .connect(url)
        .await
        .expect("connect to the scenario's Postgres")
}

pub async fn declare(client: &reqwest::Client, idem: &Idem, table: &str, declaration: &str) {
    let r = client
        .put(idem.url(&format!("/tables/{table}")))
        .header("content-type", "application/json")
        .body(declaration.to_string())
        .send()
        .await
        .expect("declare a table");
    let status = r.status();
    assert!(
        status.is_success(),
        "declaring {table}: {status} {}",
        r.text().await.unwrap_or_default()
    );
}

/// A partition read through the API: its NDJSON lines, sorted, and its ETag.
pub struct Read {
    pub status: u16,
    pub lines: Vec<String>,
    pub etag: Option<String>,
}

pub async fn read_partition(client: &reqwest::Client, idem: &Idem, table: &str, ds: &str) -> Read {
    let r = client
        .get(idem.url(&format!("/partitions/{table}/{ds}")))
        .send()
        .await
        .expect("read a partition");
    let status = r.status().as_u16();
    let etag = r
        .headers()
        .get("etag")
        .and_then(|v| v.to_str().ok())
        .map(|v| v.trim_matches('"').to_string());
    let text = r.text().await.expect("read a partition's body");
    let mut lines: Vec<String> = text.lines().map(str::to_string).collect();
    lines.sort_unstable();
    Read {
        status,
        lines,
        etag,
    }
}

/// Stages in `idem_staging`.
pub async fn stages(db: &PgPool) -> i64 {
    sqlx::query_scalar("select count(*) from pg_tables where schemaname = 'idem_staging'")
        .fetch_one(db)
        .await
        .expect("count stages")
}

/// Bytes as MB, for the report.
pub fn mb(bytes: u64) -> String {
    format!("{:.1} MB", bytes as f64 / 1e6)
}

/// A spawned task's result; its panic, with its message, when it panicked.
pub async fn join<T>(task: tokio::task::JoinHandle<T>) -> T {
    match task.await {
        Ok(value) => value,
        Err(e) if e.is_panic() => std::panic::resume_unwind(e.into_panic()),
        Err(e) => panic!("a task was cancelled: {e}"),
    }
}

/// The database of a scenario that stops no Postgres: on a Citus cluster
/// (when the Citus suite runs it, `IDEM_CITUS_WORKER_URLS` set), a
/// database of its own made on every node; otherwise a Postgres of its own.
pub enum ScenarioDatabase {
    Own(Postgres),
    OnCluster {
        url: String,
        _dropped: Box<TestDatabase>,
    },
}

impl ScenarioDatabase {
    pub async fn start() -> ScenarioDatabase {
        if std::env::var_os("IDEM_CITUS_WORKER_URLS").is_some() {
            let (_options, url, dropped) = fresh_database_url().await;
            return ScenarioDatabase::OnCluster {
                url,
                _dropped: Box::new(dropped),
            };
        }
        ScenarioDatabase::Own(Postgres::start().await)
    }

    pub fn url(&self) -> &str {
        match self {
            ScenarioDatabase::Own(pg) => &pg.url,
            ScenarioDatabase::OnCluster { url, .. } => url,
        }
    }
}
