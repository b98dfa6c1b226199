//! A Citus cluster of a test's own (`scripts/citus.sh`): a coordinator and
//! two workers in a temporary folder, for a scenario that stops a worker,
//! which the suite's shared cluster cannot spare. Stopped and removed when
//! dropped, also when the test fails.

use std::process::Stdio;
use std::time::Duration;

use tokio::process::Command;

/// Settings beyond Citus's own (`citus_start_node`): durability is pointless
/// for a throwaway cluster; four shards a table, as the suite's cluster.
const NODE_OPTS: &str =
    "-c fsync=off -c synchronous_commit=off -c full_page_writes=off -c citus.shard_count=4";

/// How a worker is stopped.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Shutdown {
    /// `pg_ctl -m fast`: open transactions rolled back, a clean stop.
    Fast,
    /// `pg_ctl -m immediate`: as a crash; recovery when it starts again.
    Immediate,
}

pub struct OwnCluster {
    dir: tempfile::TempDir,
    port: u16,
    /// The coordinator's `idem` database, the workers registered.
    pub url: String,
}

impl OwnCluster {
    pub async fn start() -> OwnCluster {
        let dir = tempfile::Builder::new()
            .prefix("idem-citus.")
            .tempdir_in("/tmp")
            .expect("a temporary folder for the cluster");
        let out = run(
            "port=$(citus_free_port) && citus_start \"$1\" \"$port\" >&2 && echo \"$port\"",
            &[&dir.path().display().to_string()],
            Duration::from_secs(180),
        )
        .await;
        let port: u16 = String::from_utf8_lossy(&out)
            .trim()
            .parse()
            .expect("citus_start prints the coordinator's port");
        OwnCluster {
            dir,
            port,
            url: format!("postgres://postgres@127.0.0.1:{port}/idem?sslmode=disable"),
        }
    }

    /// The `idem` database of worker `n` (1 or 2): its shards, and the
    /// transactions prepared there.
    pub fn worker_url(&self, n: u16) -> String {
        format!(
            "postgres://postgres@127.0.0.1:{}/idem?sslmode=disable",
            self.port + n
        )
    }

    fn node_dir(&self, node: &str) -> String {
        self.dir.path().join(node).display().to_string()
    }

    pub async fn stop_worker(&self, n: u16, how: Shutdown) {
        let mode = match how {
            Shutdown::Fast => "fast",
            Shutdown::Immediate => "immediate",
        };
        let dir = self.node_dir(&format!("worker{n}"));
        run(
            "pg_stop \"$1\" \"$2\"",
            &[&dir, mode],
            Duration::from_secs(120),
        )
        .await;
    }

    pub async fn start_worker(&self, n: u16) {
        let dir = self.node_dir(&format!("worker{n}"));
        let port = (self.port + n).to_string();
        run(
            "citus_start_node \"$1\" \"$2\"",
            &[&dir, &port],
            Duration::from_secs(180),
        )
        .await;
    }
}

/// Runs `command` with `scripts/pg.sh` and `scripts/citus.sh` sourced and
/// `args` as `$1…`, the nodes' extra settings in `PG_EXTRA_OPTS`; its
/// standard output.
async fn run(command: &str, args: &[&str], within: Duration) -> Vec<u8> {
    let root = env!("CARGO_MANIFEST_DIR");
    let out = Command::new("bash")
        .arg("-c")
        .arg(format!(
            ". '{root}/scripts/pg.sh' && . '{root}/scripts/citus.sh' && {command}"
        ))
        .arg("_")
        .args(args)
        .current_dir(root)
        .env("PG_EXTRA_OPTS", NODE_OPTS)
        .stdin(Stdio::null())
        .kill_on_drop(true)
        .output();
    let out = tokio::time::timeout(within, out)
        .await
        .unwrap_or_else(|_| panic!("`{command}` ends within {within:?}"))
        .expect("run scripts/citus.sh");
    assert!(
        out.status.success(),
        "`{command}` failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out.stdout
}

impl Drop for OwnCluster {
    fn drop(&mut self) {
        let root = env!("CARGO_MANIFEST_DIR");
        let _ = std::process::Command::new("bash")
            .arg("-c")
            .arg(format!(
                ". '{root}/scripts/pg.sh' && . '{root}/scripts/citus.sh' && citus_stop \"$1\""
            ))
            .arg("_")
            .arg(self.dir.path())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
    }
}
