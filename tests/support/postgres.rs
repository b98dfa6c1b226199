//! The Postgres the tests run on: a server of a suite's own in a temporary
//! folder (the fault suite stops and starts it), and a fresh database of a
//! test's own on the server `DATABASE_URL` names, dropped with its guard.

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::str::FromStr;
use std::time::Duration;

use sqlx::postgres::PgConnectOptions;
use sqlx::{Connection, PgConnection};
use tokio::process::Command;

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
    /// Settings beyond `PG_OPTS` (`-c name=value …`).
    extra_opts: String,
}

impl Postgres {
    pub async fn start() -> Postgres {
        Postgres::start_with("").await
    }

    /// A server with `extra_opts` (`-c name=value …`) besides the usual
    /// ones: a CDC source needs `wal_level=logical`.
    pub async fn start_with(extra_opts: &str) -> Postgres {
        let dir = tempfile::Builder::new()
            .prefix("idem-faults-pg.")
            .tempdir_in("/tmp")
            .expect("a temporary folder for Postgres");
        let port = free_port();
        let pg = Postgres {
            dir,
            port,
            url: format!("postgres://postgres@127.0.0.1:{port}/idem"),
            extra_opts: extra_opts.to_string(),
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
            "PG_EXTRA_OPTS='{PG_OPTS} {}' PG_DATABASE=idem pg_start \"$1\" \"$2\"",
            self.extra_opts
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

fn base_options() -> PgConnectOptions {
    let url = std::env::var("DATABASE_URL")
        .expect("DATABASE_URL is not set: run the tests with scripts/test, which starts Postgres");
    PgConnectOptions::from_str(&url).expect("DATABASE_URL is a Postgres URL")
}

/// A database of the test's own on the test server, dropped with the guard.
pub async fn fresh_database() -> (PgConnectOptions, TestDatabase) {
    let (options, _url, database) = fresh_database_url().await;
    (options, database)
}

/// A fresh database, with its URL (for starting idem as a process), dropped
/// with the guard.
pub async fn fresh_database_url() -> (PgConnectOptions, String, TestDatabase) {
    let base = base_options();
    let name = format!("idem_test_{}", uuid::Uuid::now_v7().simple());
    let url = std::env::var("DATABASE_URL").unwrap();
    let (without_query, query) = url
        .split_once('?')
        .map_or((url.as_str(), None), |(u, q)| (u, Some(q)));
    let server = without_query
        .rsplit_once('/')
        .map_or(without_query, |(server, _)| server);
    let url = match query {
        Some(q) => format!("{server}/{name}?{q}"),
        None => format!("{server}/{name}"),
    };
    let maintenance = base.clone().database("postgres");
    let mut admin = PgConnection::connect_with(&maintenance)
        .await
        .expect("connect to the test server");
    sqlx::query(&format!("create database {name}"))
        .execute(&mut admin)
        .await
        .expect("create the test database");
    let workers = citus_workers();
    let database = TestDatabase {
        maintenance,
        workers: workers.clone(),
        name: name.clone(),
    };
    if !workers.is_empty() {
        spread_over_citus(&base.clone().database(&name), &workers, &name).await;
    }
    (base.database(&name), url, database)
}

/// The maintenance databases of the workers of the Citus cluster the tests
/// run on (`IDEM_CITUS_WORKER_URLS`, set by `scripts/citus.sh`); none on a
/// plain Postgres.
fn citus_workers() -> Vec<PgConnectOptions> {
    let Ok(urls) = std::env::var("IDEM_CITUS_WORKER_URLS") else {
        return Vec::new();
    };
    urls.split(',')
        .filter(|url| !url.is_empty())
        .map(|url| PgConnectOptions::from_str(url).expect("a worker's URL"))
        .collect()
}

/// A test database made on a Citus cluster as an operator makes one: the
/// database on every worker, the extension in each, and the workers
/// registered on the coordinator.
async fn spread_over_citus(
    coordinator: &PgConnectOptions,
    workers: &[PgConnectOptions],
    name: &str,
) {
    for worker in workers {
        let mut admin = PgConnection::connect_with(worker)
            .await
            .expect("connect to a Citus worker");
        sqlx::query(&format!("create database {name}"))
            .execute(&mut admin)
            .await
            .expect("create the test database on a worker");
        let mut db = PgConnection::connect_with(&worker.clone().database(name))
            .await
            .expect("connect to the test database on a worker");
        sqlx::query("create extension citus")
            .execute(&mut db)
            .await
            .expect("Citus in the worker's test database");
    }
    let mut db = PgConnection::connect_with(coordinator)
        .await
        .expect("connect to the test database on the coordinator");
    sqlx::query("create extension citus")
        .execute(&mut db)
        .await
        .expect("Citus in the coordinator's test database");
    let port = i32::from(coordinator.get_port());
    sqlx::query("select citus_set_coordinator_host($1, $2)")
        .bind(coordinator.get_host())
        .bind(port)
        .execute(&mut db)
        .await
        .expect("the coordinator registered");
    for worker in workers {
        register_worker(&mut db, worker).await;
    }
}

/// `citus_add_node`, tried again a few times: under a whole suite's load a
/// node's connection back to the coordinator fails now and then ("failure
/// on connection marked as essential"), which is the cluster's, not idem's.
async fn register_worker(db: &mut PgConnection, worker: &PgConnectOptions) {
    let mut attempts = 0;
    loop {
        attempts += 1;
        let added = sqlx::query("select citus_add_node($1, $2)")
            .bind(worker.get_host())
            .bind(i32::from(worker.get_port()))
            .execute(&mut *db)
            .await;
        match added {
            Ok(_) => return,
            Err(e) if attempts < 5 => {
                eprintln!("citus: registering a worker failed ({e}); trying again");
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
            Err(e) => panic!("a worker registered: {e}"),
        }
    }
}

/// Drops its test database when dropped, at the end of the test (also when
/// it fails), terminating the connections still open on it (`with (force)`:
/// the test's servers and idem processes may still hold some).
pub struct TestDatabase {
    maintenance: PgConnectOptions,
    /// The Citus workers it was made on too (none on a plain Postgres).
    workers: Vec<PgConnectOptions>,
    name: String,
}

impl Drop for TestDatabase {
    fn drop(&mut self) {
        // The coordinator's first: its sessions hold the workers' open.
        let servers: Vec<PgConnectOptions> = std::iter::once(self.maintenance.clone())
            .chain(self.workers.iter().cloned())
            .collect();
        let sql = format!("drop database if exists {} with (force)", self.name);
        // Drop is sync and runs on the test's runtime, which cannot block on
        // a future: a thread of its own runs the statement on a runtime of its own.
        let dropped = std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .map_err(|e| e.to_string())?;
            runtime
                .block_on(async {
                    for server in &servers {
                        let mut admin = PgConnection::connect_with(server).await?;
                        // On a Citus node a session may open on the database
                        // between `force`'s termination and the drop (the
                        // coordinator's connections to a worker, Citus's
                        // maintenance daemon): the drop is tried again.
                        let mut attempt = 0;
                        loop {
                            match sqlx::query(&sql).execute(&mut admin).await {
                                Err(sqlx::Error::Database(db))
                                    if db.code().as_deref() == Some("55006") && attempt < 10 =>
                                {
                                    attempt += 1;
                                    tokio::time::sleep(Duration::from_millis(300)).await;
                                }
                                other => {
                                    other?;
                                    break;
                                }
                            }
                        }
                        admin.close().await?;
                    }
                    Ok::<(), sqlx::Error>(())
                })
                .map_err(|e| e.to_string())
        })
        .join()
        .unwrap_or_else(|_| Err("the thread dropping it panicked".to_string()));
        if let Err(e) = dropped {
            let message = format!("could not drop the test database {}: {e}", self.name);
            // A second panic while the test unwinds would abort the whole run.
            if std::thread::panicking() {
                eprintln!("{message}");
            } else {
                panic!("{message}");
            }
        }
    }
}
