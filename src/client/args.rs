//! The client commands' flags.

use std::path::PathBuf;
use std::time::Duration;

use clap::Args;

use super::retry::RetryPolicy;

/// Where the server is, and how hard to try it.
#[derive(Clone, Debug, Args)]
pub struct ServerArgs {
    /// The idem server.
    #[arg(long, env = "IDEM_URL", default_value = "http://127.0.0.1:8080")]
    pub url: String,
    /// A bearer token, when the server asks for one.
    #[arg(long, env = "IDEM_TOKEN", hide_env_values = true)]
    pub token: Option<String>,
    /// Most attempts of one load, the first included.
    #[arg(long, default_value_t = 8, value_parser = clap::value_parser!(u16).range(1..))]
    pub max_attempts: u16,
    /// Most seconds from a load's first attempt to its last.
    #[arg(long, default_value_t = 300)]
    pub max_time: u64,
    /// Only errors on stderr.
    #[arg(long, short)]
    pub quiet: bool,
}

impl ServerArgs {
    pub fn retry_policy(&self) -> RetryPolicy {
        RetryPolicy {
            max_attempts: usize::from(self.max_attempts),
            max_elapsed: Duration::from_secs(self.max_time),
            ..RetryPolicy::default()
        }
    }

    /// `path` on the server.
    pub fn endpoint(&self, path: &str) -> String {
        format!("{}{path}", self.url.trim_end_matches('/'))
    }
}

/// `idem put TABLE DS FILE`.
#[derive(Clone, Debug, Args)]
pub struct PutArgs {
    pub table: String,
    /// The partition: `YYYY-MM-DD` (or the table's grain's form).
    pub ds: String,
    /// `.ndjson`, `.jsonl`, `.json` or `.csv`, each optionally `.gz`; `-`
    /// for stdin (with `--format`).
    pub file: PathBuf,
    /// The body's format when the file's name does not say it (stdin):
    /// `ndjson`, `json` or `csv`, with `.gz` when gzipped (`csv.gz`).
    #[arg(long)]
    pub format: Option<String>,
    #[command(flatten)]
    pub server: ServerArgs,
}

/// `idem post TABLE FILE`.
#[derive(Clone, Debug, Args)]
pub struct PostArgs {
    pub table: String,
    /// `.ndjson`, `.jsonl` or `.csv`, each optionally `.gz`; `-` for stdin
    /// (with `--format`).
    pub file: PathBuf,
    /// The body's format when the file's name does not say it (stdin).
    #[arg(long)]
    pub format: Option<String>,
    /// `merge`, `patch`, `append` or `insert_missing` (the table's default
    /// when not given).
    #[arg(long)]
    pub mode: Option<String>,
    /// Rows a POST carries.
    #[arg(long, default_value_t = 1000, value_parser = clap::value_parser!(u32).range(1..))]
    pub batch_rows: u32,
    #[command(flatten)]
    pub server: ServerArgs,
}
