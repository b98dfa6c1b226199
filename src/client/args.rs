//! The client commands' flags.

use std::path::PathBuf;
use std::time::Duration;

use clap::{ArgGroup, Args, Subcommand};

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

/// `idem put TABLE DS FILE` or `idem put TABLE --whole FILE`.
#[derive(Clone, Debug, Args)]
pub struct PutArgs {
    pub table: String,
    /// The partition: `YYYY-MM-DD` (or the table's grain's form).
    #[arg(required_unless_present = "whole", conflicts_with = "whole")]
    pub ds: Option<String>,
    /// `.ndjson`, `.jsonl`, `.json` or `.csv`, each optionally `.gz`; `-`
    /// for stdin (with `--format`).
    #[arg(required_unless_present = "whole", conflicts_with = "whole")]
    pub file: Option<PathBuf>,
    /// Replace the whole table (every partition, or a table without
    /// partitions) with FILE's rows, in one transaction
    /// (`PUT /tables/{table}/rows`): a full refresh.
    #[arg(long, value_name = "FILE")]
    pub whole: Option<PathBuf>,
    /// Stage and audit only (`?dry_run=true`): the receipt says what a put
    /// would change; nothing is published. Sent without an Idempotency-Key.
    #[arg(long)]
    pub dry_run: bool,
    /// Audits for this write only (`?audit=`), a JSON object such as
    /// '{"max_change_ratio":0.5}'; they override the table's same audits.
    /// A failed audit exits 1 with its report.
    #[arg(long, value_name = "JSON", value_parser = audits_json)]
    pub audit: Option<String>,
    /// The body's format when the file's name does not say it (stdin):
    /// `ndjson`, `json` or `csv`, with `.gz` when gzipped (`csv.gz`).
    #[arg(long)]
    pub format: Option<String>,
    #[command(flatten)]
    pub bad_rows: BadRowsArg,
    #[command(flatten)]
    pub create: CreateArg,
    /// Replace the partition (or the table) only while its ETag is this
    /// one (`If-Match`; the server answers 412 otherwise, exit 1).
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

/// `--no-create`: a write to a table nobody declared is refused.
#[derive(Clone, Copy, Debug, Default, Args)]
pub struct CreateArg {
    /// Refuse to write to a table nobody declared (`?create=false`: the
    /// server answers 404 `table_not_found`, exit 1) rather than make one
    /// from the file, as a misspelt table name would. Without it, a write
    /// that made its table says so on stderr.
    #[arg(long)]
    pub no_create: bool,
}

impl CreateArg {
    /// The query pair it adds to a write's URL.
    pub fn query(self) -> Option<(&'static str, &'static str)> {
        self.no_create.then_some(("create", "false"))
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
    /// `merge`, `patch`, `append`, `insert_missing` or `versions` (the
    /// table's `write_mode` when not given).
    #[arg(long, value_parser = ["merge", "patch", "append", "insert_missing", "versions"])]
    pub mode: Option<String>,
    /// Rows a POST carries.
    #[arg(long, default_value_t = 1000, value_parser = clap::value_parser!(u32).range(1..))]
    pub batch_rows: u32,
    /// Send on this channel (`?channel=`): the server commits each batch's
    /// offset with its rows, so a rerun on the grown file sends only the
    /// records after the committed offset. Needs --offset-from-line.
    #[arg(long, value_name = "NAME", requires = "offset_from_line")]
    pub channel: Option<String>,
    /// With --channel: a batch's offset is the number of its last record
    /// (an NDJSON line, a CSV record after the header, from 1); the
    /// records up to the channel's committed offset are skipped. Batches
    /// go without an Idempotency-Key: the offset is the idempotency.
    #[arg(long, requires = "channel")]
    pub offset_from_line: bool,
    #[command(flatten)]
    pub bad_rows: BadRowsArg,
    #[command(flatten)]
    pub create: CreateArg,
    #[command(flatten)]
    pub server: ServerArgs,
}

/// `idem channels [NAME [--reset]]`.
#[derive(Clone, Debug, Args)]
pub struct ChannelsArgs {
    /// One channel, as JSON (all of the caller's as a table when absent).
    pub name: Option<String>,
    /// Forget NAME's committed offset (`DELETE /channels/{name}`, an admin
    /// token): the next `idem post --channel NAME` sends every record.
    #[arg(long, requires = "name")]
    pub reset: bool,
    #[command(flatten)]
    pub list: ListArgs,
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
    /// Partitions (with --atomic: parts) sent at once; 1 by default, 4
    /// with --atomic.
    #[arg(long, value_parser = clap::value_parser!(u16).range(1..=64))]
    pub parallel: Option<u16>,
    /// The whole range as one load: each day's file a part, published in
    /// one transaction (all days change or none); a day without a file
    /// ends empty. Prints the load's receipt; a failed audit exits 1 with
    /// its report.
    #[arg(long, conflicts_with = "bad_rows")]
    pub atomic: bool,
    /// With --atomic, the load's Idempotency-Key (by default one made from
    /// the range and the files' content: a rerun resumes the same load).
    #[arg(long, requires = "atomic")]
    pub key: Option<String>,
    /// Audits for each PUT (`?audit=`), or with --atomic for the load, a JSON object such as
    /// '{"max_change_ratio":0.5}'; they override the table's same audits.
    /// A failed audit exits 1 with its report.
    #[arg(long, value_name = "JSON", value_parser = audits_json)]
    pub audit: Option<String>,
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
    // With --atomic it changes nothing: a load never makes a table.
    #[command(flatten)]
    pub create: CreateArg,
    #[command(flatten)]
    pub server: ServerArgs,
}

/// How `idem get` writes a partition.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum RowsFormat {
    Ndjson,
    Csv,
    Parquet,
    Arrow,
}

/// `idem get TABLE DS` or `idem get TABLE --whole`.
#[derive(Clone, Debug, Args)]
pub struct GetArgs {
    pub table: String,
    #[arg(required_unless_present = "whole", conflicts_with = "whole")]
    pub ds: Option<String>,
    /// The whole table (`GET /tables/{table}/rows`): every partition, or a
    /// table without partitions; what `idem put --whole` takes back.
    #[arg(long)]
    pub whole: bool,
    /// Write to this file (whole or not at all) instead of stdout.
    #[arg(long, short)]
    pub output: Option<PathBuf>,
    /// The rows' format; without it, the one the output's name says
    /// (`day.parquet`, `day.csv`, `day.arrow`), else NDJSON.
    #[arg(long, value_enum)]
    pub format: Option<RowsFormat>,
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

/// `idem watch TABLE`.
#[derive(Clone, Debug, Args)]
pub struct WatchArgs {
    pub table: String,
    /// Start after this position (an event id `idem watch` said to resume
    /// from); without it, from now.
    #[arg(long)]
    pub after: Option<i64>,
    #[command(flatten)]
    pub server: ServerArgs,
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

/// `--audit`'s value: a JSON object, kept as its compact text.
fn audits_json(text: &str) -> Result<String, String> {
    match serde_json::from_str::<serde_json::Value>(text) {
        Ok(audits @ serde_json::Value::Object(_)) => Ok(audits.to_string()),
        _ => Err("not a JSON object, e.g. '{\"min_rows\":1000}'".to_string()),
    }
}

/// `idem load STEP`: a load that outlives a request, step by step.
#[derive(Clone, Debug, Args)]
pub struct LoadArgs {
    #[command(subcommand)]
    pub step: LoadStep,
}

/// The steps of a load.
#[derive(Clone, Debug, Subcommand)]
pub enum LoadStep {
    /// Open a load of TABLE (`POST /loads`): its id on stdout, its view as
    /// JSON on stderr (on stdout with --json). The same command again
    /// opens the same load.
    Open(LoadOpenArgs),
    /// Stage FILE as part N of the load (`PUT /loads/ID/parts/N`); a
    /// part sent again replaces part N.
    Part(LoadPartArgs),
    /// Publish the load: audits, then every target partition in one
    /// transaction. A failed audit exits 1 with its report.
    Publish(LoadPublishArgs),
    /// The load's view: status, parts, rows per partition, last audit.
    Status(LoadIdArgs),
    /// Run the load's audits on its staged rows (changes nothing); exits 1
    /// when one fails.
    Audit(LoadIdArgs),
    /// Abandon the load: its staged rows are dropped.
    Abandon(LoadIdArgs),
}

/// `idem load open TABLE (--partitions DS,… | --from DS --to DS | --whole)`.
#[derive(Clone, Debug, Args)]
#[command(group(ArgGroup::new("target").required(true).args(["partitions", "from", "whole"])))]
pub struct LoadOpenArgs {
    pub table: String,
    /// The partitions the load replaces, comma-separated (or the flag
    /// given again).
    #[arg(long, value_delimiter = ',')]
    pub partitions: Vec<String>,
    /// The first partition of the range the load replaces.
    #[arg(long, requires = "to")]
    pub from: Option<String>,
    /// The last partition of the range, included.
    #[arg(long, requires = "from")]
    pub to: Option<String>,
    /// The load replaces the whole table.
    #[arg(long)]
    pub whole: bool,
    /// The load's audits, a JSON object (e.g. '{"min_rows":1000}'); they
    /// override the table's same audits.
    #[arg(long, value_name = "JSON", value_parser = audits_json)]
    pub audit: Option<String>,
    /// The Idempotency-Key (by default one made from the arguments).
    #[arg(long)]
    pub key: Option<String>,
    /// The view as JSON on stdout instead of the id.
    #[arg(long)]
    pub json: bool,
    #[command(flatten)]
    pub server: ServerArgs,
}

/// `idem load part LOAD_ID N FILE`.
#[derive(Clone, Debug, Args)]
pub struct LoadPartArgs {
    pub load_id: String,
    /// The part's number, 1 to 10000.
    #[arg(value_parser = clap::value_parser!(u16).range(1..=10000))]
    pub n: u16,
    /// As for `idem put`; `-` for stdin (with `--format`).
    pub file: PathBuf,
    /// The partition of rows that have no partition value.
    #[arg(long)]
    pub ds: Option<String>,
    /// The body's format when the file's name does not say it (stdin).
    #[arg(long)]
    pub format: Option<String>,
    #[command(flatten)]
    pub server: ServerArgs,
}

/// `idem load publish LOAD_ID [--force --reason TEXT]`.
#[derive(Clone, Debug, Args)]
pub struct LoadPublishArgs {
    pub load_id: String,
    /// Publish despite failed audits (an admin token), recorded with
    /// --reason in the ledger.
    #[arg(long, requires = "reason")]
    pub force: bool,
    /// Why the load is forced.
    #[arg(long, requires = "force")]
    pub reason: Option<String>,
    #[command(flatten)]
    pub server: ServerArgs,
}

/// `idem load status|audit|abandon LOAD_ID`.
#[derive(Clone, Debug, Args)]
pub struct LoadIdArgs {
    pub load_id: String,
    #[command(flatten)]
    pub server: ServerArgs,
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;

    /// The commands under test, as `idem` parses them.
    #[derive(Parser)]
    struct Cli {
        #[command(subcommand)]
        command: Command,
    }

    #[derive(Subcommand)]
    enum Command {
        Put(PutArgs),
        Post(PostArgs),
        Backfill(BackfillArgs),
        Get(GetArgs),
        Channels(ChannelsArgs),
    }

    fn parse(args: &[&str]) -> Result<Command, clap::Error> {
        Ok(Cli::try_parse_from([&["idem"], args].concat())?.command)
    }

    #[test]
    fn put_takes_a_day_and_a_file_or_the_whole_table_and_never_both() {
        let Ok(Command::Put(day)) = parse(&["put", "orders", "2026-10-12", "d.csv"]) else {
            panic!("a day's put")
        };
        assert_eq!(day.ds.as_deref(), Some("2026-10-12"));
        assert!(!day.dry_run && day.whole.is_none());
        let Ok(Command::Put(whole)) = parse(&["put", "customers", "--whole", "c.csv", "--dry-run"])
        else {
            panic!("a whole put")
        };
        assert_eq!(whole.whole.as_deref(), Some(std::path::Path::new("c.csv")));
        assert!(whole.dry_run && whole.ds.is_none());
        assert!(parse(&["put", "orders", "2026-10-12"]).is_err(), "no file");
        assert!(
            matches!(parse(&["get", "customers", "--whole"]), Ok(Command::Get(get)) if get.whole)
        );
        assert!(parse(&["get", "orders", "2026-10-12", "--whole"]).is_err());
        assert!(parse(&["get", "orders"]).is_err(), "a day or --whole");
        assert!(parse(&["put", "orders", "2026-10-12", "d.csv", "--whole", "c.csv"]).is_err());
    }

    #[test]
    fn post_takes_versions_and_a_channel_only_with_its_offset_rule() {
        let Ok(Command::Post(post)) = parse(&["post", "t", "f.ndjson", "--mode", "versions"])
        else {
            panic!("a versions post")
        };
        assert_eq!(post.mode.as_deref(), Some("versions"));
        let channel = ["post", "t", "f.ndjson", "--channel", "feed"];
        assert!(
            parse(&channel).is_err(),
            "--channel needs --offset-from-line"
        );
        assert!(parse(&["post", "t", "f.ndjson", "--offset-from-line"]).is_err());
        let Ok(Command::Post(post)) = parse(&[&channel[..], &["--offset-from-line"]].concat())
        else {
            panic!("a channel post")
        };
        assert_eq!(post.channel.as_deref(), Some("feed"));
        assert!(matches!(
            parse(&["channels", "feed", "--reset"]),
            Ok(Command::Channels(c)) if c.reset && c.name.as_deref() == Some("feed")
        ));
        assert!(
            parse(&["channels", "--reset"]).is_err(),
            "--reset needs a name"
        );
    }

    #[test]
    fn backfill_atomic_keeps_the_range_form_and_its_own_key() {
        let base = [
            "backfill",
            "orders",
            "--from",
            "2026-10-01",
            "--to",
            "2026-10-07",
        ];
        let with = |more: &[&str]| parse(&[&base[..], &["--files", "d/{ds}.csv"], more].concat());
        let Ok(Command::Backfill(atomic)) = with(&["--atomic", "--key", "k1"]) else {
            panic!("an atomic backfill")
        };
        assert!(atomic.atomic && atomic.parallel.is_none());
        assert_eq!(atomic.key.as_deref(), Some("k1"));
        assert!(with(&["--key", "k1"]).is_err(), "--key needs --atomic");
        assert!(with(&["--atomic", "--bad-rows", "quarantine"]).is_err());
        assert!(with(&["--atomic", "--parallel", "0"]).is_err());
    }
}
