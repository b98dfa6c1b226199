//! `idem` as a child process: `idem serve` on a free port, its output kept
//! in a log file or piped to the test, killed when dropped; and the client
//! commands run to their end or killed on the way.

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Output, Stdio};
use std::time::{Duration, Instant};

use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader, Lines};
use tokio::process::{Child, ChildStderr, Command};

use super::ADMIN_TOKEN;

/// Where idem's logs go: one file per process, kept after the run.
pub fn log_path(name: &str) -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("idem-logs");
    std::fs::create_dir_all(&dir).expect("a folder for the logs");
    dir.join(format!("{name}.log"))
}

/// `idem serve` as a child process on a free port; killed when dropped.
pub struct Idem {
    /// `http://127.0.0.1:PORT`
    pub base: String,
    /// `127.0.0.1:PORT`
    pub addr: String,
    /// Its log (JSON lines) when started with `start`; otherwise what it
    /// wrote on stdout after its `serving` line.
    pub log: PathBuf,
    child: Child,
}

/// `idem serve --listen 127.0.0.1:0` on `database_url` with `env` on top of
/// a clean environment (no `IDEM_*`, `DATABASE_URL` or `RUST_LOG` of the
/// caller's, but `IDEM_DISTRIBUTION_DEFAULT` from
/// `IDEM_TEST_DISTRIBUTION_DEFAULT`), as the admin of `ADMIN_TOKEN`.
fn serve_command(database_url: &str, env: &[(&str, &str)]) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_idem"));
    command
        .args(["serve", "--listen", "127.0.0.1:0"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .kill_on_drop(true);
    for (key, _) in std::env::vars() {
        if key.starts_with("IDEM_") || key == "DATABASE_URL" || key == "RUST_LOG" {
            command.env_remove(key);
        }
    }
    command
        .env("DATABASE_URL", database_url)
        .env("IDEM_ADMIN_TOKEN", ADMIN_TOKEN);
    // The suites' runs on a Citus cluster distribute every table they make
    // (scripts/test sets it there).
    if let Ok(default) = std::env::var("IDEM_TEST_DISTRIBUTION_DEFAULT") {
        command.env("IDEM_DISTRIBUTION_DEFAULT", default);
    }
    for (key, value) in env {
        command.env(key, value);
    }
    command
}

impl Idem {
    /// Starts idem with its log in JSON lines in `log_path(name)`
    /// (`failures_logged` finds the causes of 5xx answers there), and waits
    /// for its `idem serving on http://ADDR` line.
    pub async fn start(database_url: &str, name: &str, env: &[(&str, &str)]) -> Idem {
        let log = log_path(name);
        let log_file = std::fs::File::create(&log).expect("create the log file");
        let mut command = serve_command(database_url, env);
        command
            .env("IDEM_LOG_FORMAT", "json")
            .stderr(Stdio::from(log_file.try_clone().expect("the log file")));
        Idem::launch(command, name, log, log_file).await
    }

    /// Starts idem with its log, in `format`, piped to the test; the process
    /// and its log's lines.
    pub async fn start_piped(
        database_url: &str,
        name: &str,
        format: &str,
        env: &[(&str, &str)],
    ) -> (Idem, Lines<BufReader<ChildStderr>>) {
        let log = log_path(name);
        let log_file = std::fs::File::create(&log).expect("create the log file");
        let mut command = serve_command(database_url, env);
        command
            .env("IDEM_LOG_FORMAT", format)
            .stderr(Stdio::piped());
        let mut idem = Idem::launch(command, name, log, log_file).await;
        let stderr = idem.child.stderr.take().expect("piped stderr");
        (idem, BufReader::new(stderr).lines())
    }

    /// Spawns `command` and waits for its `serving` line; anything more on
    /// stdout goes to `log_file` until the process ends, so that it never
    /// blocks on a full pipe.
    async fn launch(
        mut command: Command,
        name: &str,
        log: PathBuf,
        mut log_file: std::fs::File,
    ) -> Idem {
        let mut child = command.spawn().expect("start idem");
        let mut lines = BufReader::new(child.stdout.take().expect("piped stdout")).lines();
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

    /// The CPU time the process has spent so far, user and system
    /// (`/proc/PID/stat`, in the kernel's 100 ticks a second).
    pub fn cpu_time(&self) -> Duration {
        let stat = std::fs::read_to_string(format!("/proc/{}/stat", self.pid()))
            .expect("read /proc/PID/stat");
        // The fields after the command's name, which is in parentheses
        // and may hold spaces: utime and stime are the 12th and 13th.
        let after_name = &stat[stat.rfind(')').expect("a command name") + 2..];
        let ticks: u64 = after_name
            .split(' ')
            .skip(11)
            .take(2)
            .map(|t| t.parse::<u64>().expect("a tick count"))
            .sum();
        Duration::from_millis(ticks * 10)
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

/// Runs the `idem` binary with `args` (none of the caller's `IDEM_URL` or
/// `IDEM_TOKEN`), `stdin` on its standard input, to its end.
pub async fn idem(args: &[&str], stdin: &[u8]) -> Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_idem"))
        .args(args)
        .env_remove("IDEM_URL")
        .env_remove("IDEM_TOKEN")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut input = child.stdin.take().unwrap();
    input.write_all(stdin).await.unwrap();
    drop(input);
    child.wait_with_output().await.unwrap()
}

/// What `idem serve` on `database_url` said when it stopped at start-up,
/// as it must, within a minute, on a database it refuses.
pub async fn refused_serve(database_url: &str) -> String {
    let run = serve_command(database_url, &[]).output();
    let out = tokio::time::timeout(Duration::from_secs(60), run)
        .await
        .expect("idem stops within a minute")
        .expect("run idem");
    let said = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(!out.status.success(), "idem must not serve: {said}");
    said
}

/// `idem` with `args`, running, its output thrown away.
pub fn spawn_idem(args: &[impl AsRef<std::ffi::OsStr>]) -> Child {
    Command::new(env!("CARGO_BIN_EXE_idem"))
        .args(args)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .unwrap()
}

/// SIGKILL, as a crash or an operator would, and waits for the end.
pub async fn kill(mut child: Child) {
    child.start_kill().unwrap();
    let _ = child.wait().await;
}
