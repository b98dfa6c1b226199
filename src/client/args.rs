//! The client commands' flags.

use std::path::PathBuf;
use std::time::Duration;

use clap::Args;

use super::retry::RetryPolicy;
use super::Exit;

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
    /// No progress bar: plain log lines (as when stdout is not a terminal).
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

    /// The URL of `segments` (each percent-encoded as one path segment)
    /// under `--url`, with `query`; a `--url` that is not a URL is a usage
    /// error.
    pub fn endpoint(&self, segments: &[&str], query: &[(&str, &str)]) -> Result<String, Exit> {
        let mut url = reqwest::Url::parse(&self.url).map_err(|e| {
            eprintln!("idem: --url {:?} is not a URL: {e}", self.url);
            Exit::Usage
        })?;
        let Ok(mut path) = url.path_segments_mut() else {
            eprintln!("idem: --url {:?} cannot have a path", self.url);
            return Err(Exit::Usage);
        };
        path.pop_if_empty().extend(segments);
        drop(path);
        if !query.is_empty() {
            url.query_pairs_mut().extend_pairs(query);
        }
        Ok(url.into())
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
    pub bad_rows: BadRowsArg,
    /// Replace the partition only while its ETag is this one (`If-Match`;
    /// the server answers 412 otherwise, exit 1).
    #[arg(long, value_name = "ETAG")]
    pub if_match: Option<String>,
    #[command(flatten)]
    pub server: ServerArgs,
}

/// `--bad-rows`: the write's own bad-row policy.
#[derive(Clone, Debug, Default, Args)]
pub struct BadRowsArg {
    /// What the server does with a bad row, for this write only (`?bad_rows=`):
    /// `reject` refuses the request, `quarantine` writes the good rows and
    /// keeps the bad ones (see `idem rejects`). The table's policy when not
    /// given.
    #[arg(long, value_parser = ["reject", "quarantine"])]
    pub bad_rows: Option<String>,
}

impl BadRowsArg {
    /// The query pair it adds to a write's URL.
    pub fn query(&self) -> Option<(&'static str, &str)> {
        self.bad_rows.as_deref().map(|policy| ("bad_rows", policy))
    }
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
    #[arg(long, value_parser = ["merge", "patch", "append", "insert_missing"])]
    pub mode: Option<String>,
    /// Rows a POST carries.
    #[arg(long, default_value_t = 1000, value_parser = clap::value_parser!(u32).range(1..))]
    pub batch_rows: u32,
    #[command(flatten)]
    pub bad_rows: BadRowsArg,
    #[command(flatten)]
    pub server: ServerArgs,
}

/// `idem backfill TABLE --from DS --to DS --files PATTERN`.
#[derive(Clone, Debug, Args)]
pub struct BackfillArgs {
    pub table: String,
    /// The first partition (`YYYY-MM-DD`, `YYYY-MM-DDTHH` or `YYYY-MM`).
    #[arg(long)]
    pub from: String,
    /// The last partition, included, of the same form.
    #[arg(long)]
    pub to: String,
    /// Each partition's file, `{ds}` standing for the partition, e.g.
    /// `data/ds={ds}.csv`.
    #[arg(long)]
    pub files: String,
    /// Partitions loaded at once.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u16).range(1..=64))]
    pub parallel: u16,
    /// The files' format when their names do not say it.
    #[arg(long)]
    pub format: Option<String>,
    /// A partition without a file is a failure (exit 3), not just reported.
    #[arg(long)]
    pub require_files: bool,
    /// The closing table as JSON (one object a partition) on stdout.
    #[arg(long)]
    pub json: bool,
    #[command(flatten)]
    pub bad_rows: BadRowsArg,
    #[command(flatten)]
    pub server: ServerArgs,
}

/// How `idem get` writes a partition.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum RowsFormat {
    Ndjson,
    Csv,
}

/// `idem get TABLE DS`.
#[derive(Clone, Debug, Args)]
pub struct GetArgs {
    pub table: String,
    pub ds: String,
    /// Write to this file (whole or not at all) instead of stdout.
    #[arg(long, short)]
    pub output: Option<PathBuf>,
    #[arg(long, value_enum, default_value_t = RowsFormat::Ndjson)]
    pub format: RowsFormat,
    #[command(flatten)]
    pub server: ServerArgs,
}

/// The flags of the commands that list things.
#[derive(Clone, Debug, Args)]
pub struct ListArgs {
    /// JSON on stdout (an array, or the object), for scripts.
    #[arg(long)]
    pub json: bool,
    /// Most items listed (the newest first where the server orders so).
    #[arg(long, default_value_t = 1000, value_parser = clap::value_parser!(u32).range(1..))]
    pub limit: u32,
    #[command(flatten)]
    pub server: ServerArgs,
}

/// `idem partitions TABLE`.
#[derive(Clone, Debug, Args)]
pub struct PartitionsArgs {
    pub table: String,
    #[command(flatten)]
    pub list: ListArgs,
}

/// `idem loads [--table T] [--ds DS]`.
#[derive(Clone, Debug, Args)]
pub struct LoadsArgs {
    #[arg(long)]
    pub table: Option<String>,
    #[arg(long)]
    pub ds: Option<String>,
    #[command(flatten)]
    pub list: ListArgs,
}

/// `idem key KEY`.
#[derive(Clone, Debug, Args)]
pub struct KeyArgs {
    pub key: String,
    /// The key's whole record as JSON on stdout.
    #[arg(long)]
    pub json: bool,
    #[command(flatten)]
    pub server: ServerArgs,
}

/// `idem declare TABLE FILE.json`.
#[derive(Clone, Debug, Args)]
pub struct DeclareArgs {
    pub table: String,
    /// The declaration, as `PUT /tables/{table}` takes it (JSON); `-` for
    /// stdin.
    pub file: PathBuf,
    #[command(flatten)]
    pub server: ServerArgs,
}

/// `idem drop TABLE`.
#[derive(Clone, Debug, Args)]
pub struct DropArgs {
    pub table: String,
    #[command(flatten)]
    pub server: ServerArgs,
}

/// `idem rejects TABLE`.
#[derive(Clone, Debug, Args)]
pub struct RejectsArgs {
    pub table: String,
    /// Only the rejects in this state.
    #[arg(long, value_parser = ["pending", "replayed", "expired", "superseded"])]
    pub status: Option<String>,
    #[command(flatten)]
    pub list: ListArgs,
}

/// `idem replay TABLE`.
#[derive(Clone, Debug, Args)]
pub struct ReplayArgs {
    pub table: String,
    /// The Idempotency-Key of the first replay call (later calls of the
    /// same run add `:2`, `:3`, …). Without it, a key new to each run.
    #[arg(long)]
    pub key: Option<String>,
    #[command(flatten)]
    pub server: ServerArgs,
}
