//! Settings from flags and the environment, validated once at start.

use std::net::SocketAddr;
use std::path::PathBuf;

use clap::{Args, Parser, Subcommand, ValueEnum};

#[derive(Debug, Parser)]
#[command(
    name = "idem",
    version,
    about = "Lands data in Postgres idempotently, over HTTP"
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Apply migrations, then serve HTTP until SIGTERM or SIGINT.
    Serve(ServeArgs),
    /// Apply the database migrations and exit.
    Migrate(DatabaseArgs),
}

#[derive(Clone, Debug, Args)]
pub struct DatabaseArgs {
    /// Postgres connection URL.
    #[arg(long, env = "DATABASE_URL", hide_env_values = true)]
    pub database_url: Secret,
    /// Most connections idem holds to Postgres (default: 4 per CPU core; more
    /// only makes Postgres's processes fight over the same cores).
    #[arg(long, env = "IDEM_POOL_SIZE", default_value_t = default_pool_size(), value_parser = clap::value_parser!(u32).range(2..))]
    pub pool_size: u32,
}

fn default_pool_size() -> u32 {
    let cores = std::thread::available_parallelism()
        .map_or(2, |n| u32::try_from(n.get()).unwrap_or(u32::MAX));
    cores.saturating_mul(4).max(4)
}

#[derive(Clone, Debug, Args)]
pub struct ServeArgs {
    #[command(flatten)]
    pub database: DatabaseArgs,
    /// Address to listen on; port 0 picks a free port (printed at start).
    #[arg(long, env = "IDEM_LISTEN", default_value = "127.0.0.1:8080")]
    pub listen: SocketAddr,
    #[command(flatten)]
    pub settings: Settings,
    /// Log lines as text or JSON.
    #[arg(long, env = "IDEM_LOG_FORMAT", value_enum, default_value_t = LogFormat::Text)]
    pub log_format: LogFormat,
    /// Seconds to let requests in flight finish after SIGTERM/SIGINT.
    #[arg(long, env = "IDEM_SHUTDOWN_GRACE_SECS", default_value_t = 30)]
    pub shutdown_grace_secs: u64,
}

/// What the request handlers need to know.
#[derive(Clone, Debug, Args)]
pub struct Settings {
    /// Largest request body, in bytes, both as sent and after gunzip.
    #[arg(long, env = "IDEM_MAX_BODY_BYTES", default_value_t = 16 * 1024 * 1024 * 1024)]
    pub max_body_bytes: u64,
    /// Create an undeclared table on its first write, with column types
    /// inferred from the body.
    #[arg(long, env = "IDEM_AUTO_CREATE_TABLES", default_value_t = true, action = clap::ArgAction::Set)]
    pub auto_create_tables: bool,
    /// Folder for spool files (a re-sent partition is spooled while its hash
    /// is checked); the system's temporary folder when unset.
    #[arg(long, env = "IDEM_SPOOL_DIR")]
    pub spool_dir: Option<PathBuf>,
    /// How long a request waits for another one with the same
    /// Idempotency-Key to finish before answering 409 with Retry-After, in
    /// milliseconds.
    #[arg(long, env = "IDEM_IDEMPOTENCY_WAIT_MS", default_value_t = 10_000)]
    pub idempotency_wait_ms: u64,
    /// How long a completed Idempotency-Key is kept (and replayed), in seconds.
    #[arg(long, env = "IDEM_IDEMPOTENCY_RETENTION_SECS", default_value_t = 72 * 3600)]
    pub idempotency_retention_secs: u64,
}

impl Settings {
    pub fn idempotency_wait(&self) -> std::time::Duration {
        std::time::Duration::from_millis(self.idempotency_wait_ms)
    }

    pub fn idempotency_retention(&self) -> std::time::Duration {
        std::time::Duration::from_secs(self.idempotency_retention_secs)
    }
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            max_body_bytes: 16 * 1024 * 1024 * 1024,
            auto_create_tables: true,
            spool_dir: None,
            idempotency_wait_ms: 10_000,
            idempotency_retention_secs: 72 * 3600,
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum LogFormat {
    Text,
    Json,
}

/// A value that never prints (a database URL holds a password).
#[derive(Clone)]
pub struct Secret(String);

impl Secret {
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Secret(***)")
    }
}

impl std::str::FromStr for Secret {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        if s.starts_with("postgres://") || s.starts_with("postgresql://") {
            Ok(Secret(s.to_string()))
        } else {
            Err("expected a postgres:// URL".into())
        }
    }
}
