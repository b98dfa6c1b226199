//! What every scenario needs: the quick and long profiles, a seeded random
//! source, a Postgres of the suite's own, `idem serve` processes, and HTTP
//! clients that never wait without a deadline.

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use sqlx::postgres::{PgPool, PgPoolOptions};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::process::{Child, Command};

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

/// The longest any client request may take; a request still unanswered then
/// is a hang, and a finding.
pub const CLIENT_DEADLINE: Duration = Duration::from_secs(30);

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

fn script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/pg.sh")
}

/// Durability is pointless for a throwaway server (idem is what gets killed,
/// and Postgres only ever stops cleanly here).
const PG_OPTS: &str = "-c fsync=off -c synchronous_commit=off -c full_page_writes=off";

/// A Postgres of the scenario's own, in a temporary folder, started with
/// `scripts/pg.sh` (as the `postgres` user when we are root). Stopped and
/// removed when dropped, also when the test fails.
pub struct Postgres {
    // Dropped after `drop` has stopped the server.
    dir: tempfile::TempDir,
    pub port: u16,
    /// The URL of its `idem` database.
    pub url: String,
}

impl Postgres {
    pub async fn start() -> Postgres {
        let dir = tempfile::Builder::new()
            .prefix("idem-faults-pg.")
            .tempdir_in("/tmp")
            .expect("a temporary folder for Postgres");
        let port = free_port();
        let pg = Postgres {
            dir,
            port,
            url: format!("postgres://postgres@127.0.0.1:{port}/idem"),
        };
        pg.start_again().await;
        pg
    }

    fn dir(&self) -> String {
        self.dir.path().display().to_string()
    }

    /// Starts the server (initdb the first time); returns once it accepts
    /// connections and the `idem` database exists.
    pub async fn start_again(&self) {
        let started = pg_script(&format!(
            "PG_EXTRA_OPTS='{PG_OPTS}' PG_DATABASE=idem pg_start \"$1\" \"$2\"",
        ))
        .arg(self.dir())
        .arg(self.port.to_string())
        .output();
        let out = tokio::time::timeout(Duration::from_secs(180), started)
            .await
            .expect("Postgres starts within 3 minutes")
            .expect("run scripts/pg.sh");
        assert!(
            out.status.success(),
            "pg_start failed: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }

    /// A fast shutdown (sessions are ended, the server stops), waited for.
    pub async fn stop(&self) {
        let stopped = pg_script("pg_stop \"$1\"").arg(self.dir()).output();
        let out = tokio::time::timeout(Duration::from_secs(120), stopped)
            .await
            .expect("Postgres stops within 2 minutes")
            .expect("run scripts/pg.sh");
        assert!(out.status.success(), "pg_stop failed");
    }
}

/// `bash -c '. scripts/pg.sh; COMMAND' _ ARGS...`
fn pg_script(command: &str) -> Command {
    let mut c = Command::new("bash");
    c.arg("-c")
        .arg(format!(". '{}'; {command}", script().display()))
        .arg("_")
        .stdin(Stdio::null())
        .kill_on_drop(true);
    c
}

impl Drop for Postgres {
    fn drop(&mut self) {
        let stopped = std::process::Command::new("bash")
            .arg("-c")
            .arg(format!(". '{}'; pg_stop \"$1\"", script().display()))
            .arg("_")
            .arg(self.dir())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
        if !stopped.is_ok_and(|s| s.success()) {
            let _ = writeln!(
                std::io::stderr(),
                "faults: could not stop the Postgres in {}",
                self.dir()
            );
        }
    }
}

/// A TCP port nobody listens on, chosen by the kernel.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("bind a free port")
        .port()
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

/// Where idem's logs go: one file per process, kept after the run.
pub fn log_path(name: &str) -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("faults");
    std::fs::create_dir_all(&dir).expect("a folder for the logs");
    dir.join(format!("{name}.log"))
}

/// `idem serve` as a child process on a free port; killed when dropped.
pub struct Idem {
    /// `http://127.0.0.1:PORT`
    pub base: String,
    /// `127.0.0.1:PORT`
    pub addr: String,
    pub log: PathBuf,
    child: Child,
}

impl Idem {
    /// Starts `idem serve --listen 127.0.0.1:0` on `database_url` with `env`
    /// on top of a clean environment (no `IDEM_*` of the caller's), and
    /// waits for the `idem serving on http://ADDR` line.
    pub async fn start(database_url: &str, name: &str, env: &[(&str, &str)]) -> Idem {
        let log = log_path(name);
        let log_file = std::fs::File::create(&log).expect("create the log file");
        let mut command = Command::new(env!("CARGO_BIN_EXE_idem"));
        command
            .args(["serve", "--listen", "127.0.0.1:0"])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::from(log_file.try_clone().expect("the log file")))
            .kill_on_drop(true);
        for (key, _) in std::env::vars() {
            if key.starts_with("IDEM_") || key == "DATABASE_URL" || key == "RUST_LOG" {
                command.env_remove(key);
            }
        }
        // JSON lines: `failures_logged` finds the causes of 5xx answers.
        command
            .env("DATABASE_URL", database_url)
            .env("IDEM_ADMIN_TOKEN", ADMIN_TOKEN)
            .env("IDEM_LOG_FORMAT", "json");
        for (key, value) in env {
            command.env(key, value);
        }
        let mut child = command.spawn().expect("start idem");
        let mut lines = BufReader::new(child.stdout.take().expect("piped stdout")).lines();
        let mut log_file = log_file;
        let serving = tokio::time::timeout(Duration::from_secs(60), async {
            while let Some(line) = lines.next_line().await.ok().flatten() {
                if let Some(base) = line.strip_prefix("idem serving on ") {
                    return Some(base.to_string());
                }
                let _ = writeln!(log_file, "{line}");
            }
            None
        })
        .await;
        let Ok(Some(base)) = serving else {
            let _ = child.start_kill();
            panic!(
                "idem ({name}) did not start serving within 60 s; its log: {}\n{}",
                log.display(),
                std::fs::read_to_string(&log).unwrap_or_default()
            );
        };
        // idem logs to stderr (the log file); anything more on stdout is
        // copied there too until the process ends, so that it never blocks
        // on a full pipe.
        tokio::spawn(async move {
            while let Ok(Some(line)) = lines.next_line().await {
                let _ = writeln!(log_file, "{line}");
            }
        });
        Idem {
            addr: base.trim_start_matches("http://").to_string(),
            base,
            log,
            child,
        }
    }

    pub fn url(&self, path: &str) -> String {
        format!("{}{}", self.base, path)
    }

    pub fn pid(&self) -> u32 {
        self.child.id().expect("idem is running")
    }

    /// Whether the process is still running (not exited, not killed).
    pub fn alive(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    /// `kill -9`, and waits for the process to be gone.
    pub async fn kill9(mut self) {
        let _ = self.child.start_kill();
        let _ = tokio::time::timeout(Duration::from_secs(10), self.child.wait()).await;
    }

    /// The process's peak resident set (`VmHWM`), in bytes.
    pub fn peak_rss(&self) -> u64 {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.pid()))
            .expect("read /proc/PID/status");
        status
            .lines()
            .find_map(|l| l.strip_prefix("VmHWM:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
            .expect("VmHWM in /proc/PID/status")
            * 1024
    }

    /// The log lines of requests that failed with a 5xx (their causes).
    pub fn failures_logged(&self) -> Vec<String> {
        std::fs::read_to_string(&self.log)
            .unwrap_or_default()
            .lines()
            .filter(|l| l.contains("request failed"))
            .map(str::to_string)
            .collect()
    }

    /// `failures_logged` once it holds at least `count` lines, or after a
    /// few seconds: the log is written by a thread of its own, behind the
    /// answers.
    pub async fn failures_logged_at_least(&self, count: usize) -> Vec<String> {
        let deadline = Instant::now() + Duration::from_secs(5);
        loop {
            let failures = self.failures_logged();
            if failures.len() >= count || Instant::now() >= deadline {
                return failures;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

/// The bootstrap admin token every idem process of the suite starts with.
pub const ADMIN_TOKEN: &str = "faults-admin-token-0123456789abcdef-0123456789";

/// An HTTP client for 127.0.0.1 only (no proxy), with a deadline on every
/// request.
pub fn client() -> reqwest::Client {
    let mut headers = reqwest::header::HeaderMap::new();
    let bearer = format!("Bearer {ADMIN_TOKEN}")
        .parse()
        .expect("a header value");
    headers.insert(reqwest::header::AUTHORIZATION, bearer);
    reqwest::Client::builder()
        .default_headers(headers)
        .no_proxy()
        .timeout(CLIENT_DEADLINE)
        .connect_timeout(Duration::from_secs(5))
        .build()
        .expect("an HTTP client")
}

pub const ORDERS: &str = r#"{"columns": {"order_id": "bigint", "ds": "date", "customer_id": "bigint",
  "status": "text", "amount": "numeric", "updated_at": "timestamptz", "note": "text"},
  "partition_by": "ds", "primary_key": ["order_id"], "cursor": "updated_at"}"#;

/// A table without a key: every row a write sends is a row of its own, so a
/// batch written twice would show as twice its rows.
pub const EVENTS: &str = r#"{"columns": {"batch": "text", "n": "bigint", "ds": "date",
  "payload": "text"}, "partition_by": "ds"}"#;

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

/// One orders row as an NDJSON line.
pub fn order_line(id: i64, ds: &str, status: &str) -> String {
    format!(
        "{{\"order_id\":{id},\"ds\":\"{ds}\",\"customer_id\":{},\"status\":\"{status}\",\"amount\":\"{}.{:02}\",\"updated_at\":\"{ds}T01:02:03Z\",\"note\":\"row {id} of {status}\"}}\n",
        id % 97,
        id % 1000,
        id % 100
    )
}

/// One events row as an NDJSON line.
pub fn event_line(batch: &str, n: i64, ds: &str) -> String {
    format!("{{\"batch\":\"{batch}\",\"n\":{n},\"ds\":\"{ds}\",\"payload\":\"{batch}/{n}\"}}\n")
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

/// `GET /readyz`'s status (0 when there was no answer).
pub async fn readyz(client: &reqwest::Client, idem: &Idem) -> u16 {
    match client.get(idem.url("/readyz")).send().await {
        Ok(r) => r.status().as_u16(),
        Err(_) => 0,
    }
}

/// Polls `/readyz` until it answers 200, at most `within`; how long it took.
pub async fn wait_ready(
    client: &reqwest::Client,
    idem: &Idem,
    within: Duration,
) -> Option<Duration> {
    let started = Instant::now();
    while started.elapsed() < within {
        if readyz(client, idem).await == 200 {
            return Some(started.elapsed());
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    None
}

/// Stages in `idem_staging`.
pub async fn stages(db: &PgPool) -> i64 {
    sqlx::query_scalar("select count(*) from pg_tables where schemaname = 'idem_staging'")
        .fetch_one(db)
        .await
        .expect("count stages")
}

/// An answer read off the wire by `raw_request`.
#[derive(Debug)]
pub struct RawAnswer {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: String,
    pub elapsed: Duration,
}

impl RawAnswer {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    /// The problem's `code`, when the body is one.
    pub fn code(&self) -> String {
        serde_json::from_str::<serde_json::Value>(&self.body)
            .ok()
            .and_then(|v| v["code"].as_str().map(str::to_string))
            .unwrap_or_default()
    }
}

/// How a raw request sends its body.
pub enum RawBody {
    /// All of it, with its `Content-Length`.
    Whole(Vec<u8>),
    /// These bytes, then nothing more, the connection kept open, although
    /// `Content-Length` promises `declared` bytes.
    Stall { sent: Vec<u8>, declared: u64 },
}

/// One HTTP/1.1 request over a connection of its own, written by hand: the
/// body is written while the answer is read, so an answer that comes before
/// the body is all sent (a refusal) is still read, whatever happens to the
/// rest of the body. Fails when there is no answer within `deadline`.
pub async fn raw_request(
    addr: &str,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: RawBody,
    deadline: Duration,
) -> Result<RawAnswer, String> {
    let started = Instant::now();
    let stream = tokio::net::TcpStream::connect(addr)
        .await
        .map_err(|e| format!("connect: {e}"))?;
    let (mut reader, mut writer) = stream.into_split();
    let declared = match &body {
        RawBody::Whole(b) => b.len() as u64,
        RawBody::Stall { declared, .. } => *declared,
    };
    let mut head = format!(
        "{method} {path} HTTP/1.1\r\nhost: {addr}\r\nconnection: close\r\nauthorization: Bearer {ADMIN_TOKEN}\r\ncontent-length: {declared}\r\n"
    );
    for (k, v) in headers {
        head.push_str(&format!("{k}: {v}\r\n"));
    }
    head.push_str("\r\n");
    let sending = tokio::spawn(async move {
        writer.write_all(head.as_bytes()).await?;
        match body {
            RawBody::Whole(b) => {
                for chunk in b.chunks(64 * 1024) {
                    writer.write_all(chunk).await?;
                }
            }
            RawBody::Stall { sent, .. } => {
                writer.write_all(&sent).await?;
                writer.flush().await?;
                // Nothing more; the connection stays open until aborted.
                std::future::pending::<()>().await;
            }
        }
        writer.flush().await?;
        // Keep the write half open until the answer is read.
        std::future::pending::<()>().await;
        Ok::<_, std::io::Error>(())
    });
    let answer = tokio::time::timeout(deadline, read_answer(&mut reader)).await;
    sending.abort();
    let (status, headers, body) = answer
        .map_err(|_| format!("no answer within {deadline:?}"))?
        .map_err(|e| format!("reading the answer: {e}"))?;
    Ok(RawAnswer {
        status,
        headers,
        body,
        elapsed: started.elapsed(),
    })
}

pub type Answer = (u16, Vec<(String, String)>, String);

pub async fn read_answer(reader: &mut tokio::net::tcp::OwnedReadHalf) -> std::io::Result<Answer> {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 16 * 1024];
    let head_end = loop {
        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break i;
        }
        let n = reader.read(&mut chunk).await?;
        if n == 0 {
            return Err(std::io::Error::other(format!(
                "connection closed before an answer ({} bytes)",
                buf.len()
            )));
        }
        buf.extend_from_slice(&chunk[..n]);
    };
    let head = String::from_utf8_lossy(&buf[..head_end]).to_string();
    let mut lines = head.split("\r\n");
    let status: u16 = lines
        .next()
        .and_then(|l| l.split(' ').nth(1))
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| std::io::Error::other(format!("not an HTTP answer: {head}")))?;
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_string()))
        .collect();
    let length = headers
        .iter()
        .find(|(k, _)| k == "content-length")
        .and_then(|(_, v)| v.parse::<usize>().ok());
    let mut body = buf[head_end + 4..].to_vec();
    loop {
        if length.is_some_and(|l| body.len() >= l) {
            break;
        }
        let n = reader.read(&mut chunk).await?;
        if n == 0 {
            break;
        }
        body.extend_from_slice(&chunk[..n]);
    }
    Ok((status, headers, String::from_utf8_lossy(&body).to_string()))
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
