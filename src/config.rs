//! Settings from flags and the environment, validated once at start.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, ValueEnum};

use crate::ingest::formats::DEFAULT_MAX_ROW_GROUP_BYTES;
use crate::schema::DistributionDefault;

#[derive(Clone, Debug, Args)]
pub struct DatabaseArgs {
    /// Postgres connection URL.
    #[arg(long, env = "DATABASE_URL", hide_env_values = true)]
    pub database_url: Secret,
    /// Most connections idem holds to Postgres (default: 4 per CPU core; more
    /// only makes Postgres's processes fight over the same cores).
    #[arg(long, env = "IDEM_POOL_SIZE", default_value_t = default_pool_size(), value_parser = clap::value_parser!(u32).range(2..))]
    pub pool_size: u32,
    /// Prepared statements each connection keeps (least recently used
    /// dropped first; default 100). A write to a user table runs a
    /// statement of that table's own, so writes spread over more tables
    /// than this prepare theirs again now and then (a round trip and a
    /// plan); each kept statement holds some 50 KB in its Postgres backend.
    #[arg(long, env = "IDEM_STATEMENT_CACHE", default_value_t = crate::store::STATEMENT_CACHE,
          value_parser = clap::value_parser!(u64).range(1..=100_000))]
    pub statement_cache: u64,
}

fn parse_distribution_default(text: &str) -> Result<DistributionDefault, String> {
    DistributionDefault::parse(text).ok_or_else(|| format!("{text:?} is not `local` or `key`"))
}

fn default_pool_size() -> u32 {
    let cores = u32::try_from(cpu_cores()).unwrap_or(u32::MAX);
    cores.saturating_mul(4).max(4)
}

/// The CPU cores this process may use (2 when the system does not say).
fn cpu_cores() -> usize {
    std::thread::available_parallelism().map_or(2, std::num::NonZeroUsize::get)
}

/// A thread a core, as tokio would choose. Fewer spend less CPU a request
/// (fewer wake-ups across threads) and leave cores to a Postgres on the
/// same machine, but serve less of what idem does alone: on 2 cores, one
/// thread took 1-row POSTs from 0.52 to 0.70 of pgbench and uncached
/// replays from 0.24 down to 0.16 (docs/performance/results.md, "History").
fn default_worker_threads() -> usize {
    cpu_cores()
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
    /// Where a table made without a `"distribution"` lives on a Citus
    /// database: `local` (on the coordinator) or `key` (keyed tables by
    /// their first key column, keyless ones by their row id, plain tables
    /// as reference tables). Without Citus, tables are local either way.
    #[arg(long, env = "IDEM_DISTRIBUTION_DEFAULT", default_value = "local",
          value_parser = parse_distribution_default)]
    pub distribution_default: DistributionDefault,
    /// Log lines as text or JSON.
    #[arg(long, env = "IDEM_LOG_FORMAT", value_enum, default_value_t = LogFormat::Text)]
    pub log_format: LogFormat,
    /// Threads that serve requests (the async runtime's workers; default:
    /// one a CPU core). Fewer spend less CPU a request and leave cores to a
    /// Postgres on the same machine.
    #[arg(long, env = "IDEM_WORKER_THREADS", default_value_t = default_worker_threads(),
          value_parser = clap::builder::TypedValueParser::map(clap::value_parser!(u16).range(1..), usize::from))]
    pub worker_threads: usize,
    /// Seconds to let requests in flight finish after SIGTERM/SIGINT.
    #[arg(long, env = "IDEM_SHUTDOWN_GRACE_SECS", default_value_t = 30)]
    pub shutdown_grace_secs: u64,
}

const MIB: u64 = 1024 * 1024;
const GIB: u64 = 1024 * MIB;

/// What the request handlers need to know: limits and timeouts that keep
/// one client from holding more than its share.
#[derive(Clone, Debug, Args)]
pub struct Settings {
    /// Largest PUT body (a whole partition), in bytes, both as sent and
    /// after gunzip (413 beyond).
    #[arg(long, env = "IDEM_MAX_PUT_BODY_BYTES", default_value_t = 4 * GIB)]
    pub max_put_body_bytes: u64,
    /// Largest POST body (a batch of rows), in bytes, as sent and after
    /// gunzip (413 beyond).
    #[arg(long, env = "IDEM_MAX_POST_BODY_BYTES", default_value_t = 256 * MIB)]
    pub max_post_body_bytes: u64,
    /// Largest record: one NDJSON line, one element of a JSON array, one CSV
    /// record, in bytes. A larger one is a bad row; reading it costs no more
    /// memory than this.
    #[arg(long, env = "IDEM_MAX_RECORD_BYTES", default_value_t = 4 * MIB)]
    pub max_record_bytes: u64,
    /// Largest row group of a Parquet body, in bytes uncompressed: what
    /// reading one row group may hold in memory. A body with a larger one
    /// is refused (413) before any row is written.
    #[arg(long, env = "IDEM_MAX_ROW_GROUP_BYTES", default_value_t = DEFAULT_MAX_ROW_GROUP_BYTES)]
    pub max_row_group_bytes: u64,
    /// Most bytes a gzip body may unpack to per byte sent (a body that
    /// unpacks to less than 1 MiB is never refused for it).
    #[arg(long, env = "IDEM_MAX_GZIP_RATIO", default_value_t = 100)]
    pub max_gzip_ratio: u64,
    /// Most bad rows a refusal lists (all are counted).
    #[arg(long, env = "IDEM_MAX_LISTED_ERRORS", default_value_t = 100)]
    pub max_listed_errors: usize,
    /// Connections one client address may hold open at once in this
    /// process; past it, a new connection is answered 429 and closed.
    #[arg(long, env = "IDEM_MAX_CONNECTIONS_PER_CLIENT", default_value_t = 256)]
    pub max_connections_per_client: usize,
    /// Seconds a client has to send a request's headers.
    #[arg(long, env = "IDEM_HEADER_TIMEOUT_SECS", default_value_t = 10)]
    pub header_timeout_secs: u64,
    /// Seconds a body may go without a byte before the write is refused
    /// (408) and everything it held is released.
    #[arg(long, env = "IDEM_BODY_IDLE_TIMEOUT_SECS", default_value_t = 30)]
    pub body_idle_timeout_secs: u64,
    /// Seconds a write's body may take in all (408 beyond).
    #[arg(long, env = "IDEM_BODY_DEADLINE_SECS", default_value_t = 1800)]
    pub body_deadline_secs: u64,
    /// The slowest a write's body may arrive, in bytes per second of idem's
    /// waiting for it, once past `body_min_rate_grace_secs` (408
    /// `body_too_slow` below it); 0 switches the check off.
    #[arg(long, env = "IDEM_BODY_MIN_RATE_BYTES", default_value_t = 1024)]
    pub body_min_rate_bytes: u64,
    /// Seconds of waiting for a body before its minimum rate applies.
    #[arg(long, env = "IDEM_BODY_MIN_RATE_GRACE_SECS", default_value_t = 30)]
    pub body_min_rate_grace_secs: u64,
    /// Writes that may hold database connections at once in this process;
    /// the rest of the pool stays free for reads, `/readyz` and replays.
    /// Default: three quarters of the pool.
    #[arg(long, env = "IDEM_MAX_CONCURRENT_LOADS")]
    pub max_concurrent_loads: Option<u32>,
    /// How long a write waits for its turn before it answers 503 `busy`
    /// with `Retry-After`, in milliseconds.
    #[arg(long, env = "IDEM_LOAD_WAIT_MS", default_value_t = 5_000)]
    pub load_wait_ms: u64,
    /// How many of this process's turns to write one token's writes may
    /// hold at once. Default: half of them (at least one).
    #[arg(long, env = "IDEM_LOAD_SLOTS_PER_TOKEN", value_parser = clap::value_parser!(u32).range(1..))]
    pub load_slots_per_token: Option<u32>,
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
    /// A `POST /rows` body of at most this many bytes (after gunzip) is read
    /// whole before its transaction, decoded on its task, and its rows
    /// bound as array parameters (written in a batch with others when
    /// `batch_writes`); a larger one streams into a temporary table by COPY.
    /// 0 sends every body through COPY. (bench/small_body_threshold.sh: the
    /// arrays write 1.2 to 1.8 times the rows per second up to ~150 KiB,
    /// about the same from ~300 KiB.)
    #[arg(long, env = "IDEM_SMALL_BODY_BYTES", default_value_t = 128 * 1024)]
    pub small_body_bytes: u64,
    /// Write small `POST /rows` bodies to one table together, several in one
    /// transaction (each POST keeps its own receipt, key and ledger row).
    #[arg(long, env = "IDEM_BATCH_WRITES", default_value_t = true, action = clap::ArgAction::Set, num_args = 0..=1, default_missing_value = "true")]
    pub batch_writes: bool,
    /// Batches of small POSTs written at once (each on a connection of its
    /// own): while one commits, another is written. Fewer make larger
    /// batches (less CPU a POST); more keep Postgres busier with POSTs of
    /// many rows.
    #[arg(long, env = "IDEM_BATCH_WORKERS", default_value_t = 3,
          value_parser = clap::value_parser!(u32).range(1..=64))]
    pub batch_workers: u32,
    /// How long a completed Idempotency-Key is kept (and replayed), in seconds.
    #[arg(long, env = "IDEM_IDEMPOTENCY_RETENTION_SECS", default_value_t = 72 * 3600)]
    pub idempotency_retention_secs: u64,
    /// How long a load opened with `POST /loads` stays open for parts and a
    /// publish, in seconds; past it, any idem process expires it and drops
    /// its staged rows.
    #[arg(long, env = "IDEM_LOAD_TTL", default_value_t = 24 * 3600, value_parser = clap::value_parser!(u64).range(1..=366 * 24 * 3600))]
    pub load_ttl: u64,
    /// How often each process runs an expire round (one at a time across
    /// processes): partitions past their table's `retention` dropped.
    #[arg(long, env = "IDEM_RETENTION_EVERY_SECS", default_value_t = 60,
          value_parser = clap::value_parser!(u64).range(1..=24 * 3600))]
    pub retention_every_secs: u64,
    /// How far ahead of the system clock idem's clock runs for retention,
    /// in seconds: for drills and tests that watch partitions expire. 0
    /// in production.
    #[arg(long, env = "IDEM_CLOCK_AHEAD_SECS", default_value_t = 0,
          value_parser = clap::value_parser!(i64).range(0..=100 * 366 * 24 * 3600))]
    pub clock_ahead_secs: i64,
    /// Serve the web console at `/console` (sign in with a token).
    #[arg(long, env = "IDEM_CONSOLE", default_value_t = true, action = clap::ArgAction::Set,
          num_args = 0..=1, default_missing_value = "true")]
    pub console: bool,
    /// How long a console sign-in lasts, in seconds.
    #[arg(long, env = "IDEM_CONSOLE_SESSION_SECS", default_value_t = 12 * 3600,
          value_parser = clap::value_parser!(u64).range(60..=30 * 24 * 3600))]
    pub console_session_secs: u64,
    /// Failed console sign-ins one client address (an IPv6 client's /64)
    /// may make in `console_signin_window_secs`; past them, every sign-in
    /// from it (the right token too) is answered 429 until the window ends.
    #[arg(long, env = "IDEM_CONSOLE_SIGNIN_FAILURES_PER_ADDRESS", default_value_t = 10,
          value_parser = clap::value_parser!(u32).range(1..))]
    pub console_signin_failures_per_address: u32,
    /// Failed console sign-ins from all addresses together in
    /// `console_signin_window_secs`, past which every sign-in is answered
    /// 429 (a guesser with many addresses).
    #[arg(long, env = "IDEM_CONSOLE_SIGNIN_FAILURES_OVERALL", default_value_t = 300,
          value_parser = clap::value_parser!(u32).range(1..))]
    pub console_signin_failures_overall: u32,
    /// The window those failures are counted in, in seconds from the first.
    #[arg(long, env = "IDEM_CONSOLE_SIGNIN_WINDOW_SECS", default_value_t = 60,
          value_parser = clap::value_parser!(u64).range(1..=24 * 3600))]
    pub console_signin_window_secs: u64,
    /// The bootstrap admin token (32 to 256 visible ASCII characters): it
    /// may do everything, and makes the other tokens with `POST /tokens`.
    #[arg(long, env = "IDEM_ADMIN_TOKEN", hide_env_values = true)]
    pub admin_token: Option<AdminToken>,
    /// Serve without tokens: every caller may do everything, as one
    /// anonymous principal. For a laptop only; a warning is logged at start.
    #[arg(long, env = "IDEM_INSECURE_NO_AUTH", default_value_t = false, action = clap::ArgAction::Set, num_args = 0..=1, default_missing_value = "true")]
    pub insecure_no_auth: bool,
    /// Serve `GET /metrics` without a token to peers on loopback or a
    /// private network (RFC 1918, IPv6 unique local, link-local), so a
    /// scraper beside idem needs no secret. Leave it off behind a proxy on
    /// such an address: every client would come through it.
    #[arg(long, env = "IDEM_METRICS_OPEN_TO_LOCAL", default_value_t = false, action = clap::ArgAction::Set,
          num_args = 0..=1, default_missing_value = "true")]
    pub metrics_open_to_local: bool,
    /// Origins (`https://app.example.com`, comma-separated) whose browser
    /// pages may call the API (CORS); none when empty, the default.
    #[arg(long, env = "IDEM_CORS_ORIGINS", default_value = "", value_parser = parse_origins)]
    pub cors_origins: CommaList,
    /// `Host` header values idem answers (`idem.example.com` for any port,
    /// or `idem.example.com:8080`; comma-separated); any when empty, the
    /// default. Others get 421: a page on another site that rebinds its
    /// name to idem's address (DNS rebinding) is refused.
    #[arg(long, env = "IDEM_ALLOWED_HOSTS", default_value = "", value_parser = parse_hosts)]
    pub allowed_hosts: CommaList,
    /// Reverse proxies (addresses or CIDRs, comma-separated:
    /// `10.0.0.0/8,127.0.0.1`) whose `Forwarded` / `X-Forwarded-For` name
    /// the client: per-client limits and logs then use that address, and a
    /// proxy's own connections are not capped as one client's. None when
    /// empty, the default: those headers are then ignored (anyone can send
    /// them).
    #[arg(long, env = "IDEM_TRUSTED_PROXIES", default_value = "", value_parser = TrustedProxies::parse)]
    pub trusted_proxies: TrustedProxies,
}

/// The networks of `IDEM_TRUSTED_PROXIES`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TrustedProxies(Vec<ipnet::IpNet>);

impl TrustedProxies {
    /// Comma-separated addresses (one host each) and CIDRs.
    pub fn parse(text: &str) -> Result<TrustedProxies, String> {
        let networks = text
            .split(',')
            .map(str::trim)
            .filter(|piece| !piece.is_empty())
            .map(|piece| {
                piece
                    .parse::<ipnet::IpNet>()
                    .or_else(|_| piece.parse::<std::net::IpAddr>().map(ipnet::IpNet::from))
                    .map_err(|_| format!("{piece:?} is not an IP address or a CIDR (10.0.0.0/8)"))
            })
            .collect::<Result<_, _>>()?;
        Ok(TrustedProxies(networks))
    }

    /// Whether `ip` is one of the proxies (an IPv4 address mapped into
    /// IPv6, as a dual-stack socket reports it, counts as itself).
    pub fn trusts(&self, ip: std::net::IpAddr) -> bool {
        let ip = ip.to_canonical();
        self.0.iter().any(|network| network.contains(&ip))
    }
}

/// A setting's comma-separated values, each trimmed and lowercased; empty
/// pieces are dropped, so an empty variable is an empty list.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CommaList(pub Vec<String>);

impl CommaList {
    fn parse(text: &str, check: fn(&str) -> Result<(), String>) -> Result<CommaList, String> {
        let values: Vec<String> = text
            .split(',')
            .map(|piece| piece.trim().to_ascii_lowercase())
            .filter(|piece| !piece.is_empty())
            .collect();
        values.iter().try_for_each(|value| check(value))?;
        Ok(CommaList(values))
    }
}

impl std::ops::Deref for CommaList {
    type Target = [String];
    fn deref(&self) -> &[String] {
        &self.0
    }
}

fn parse_origins(text: &str) -> Result<CommaList, String> {
    CommaList::parse(text, check_origin)
}

fn parse_hosts(text: &str) -> Result<CommaList, String> {
    CommaList::parse(text, check_host)
}

/// A CORS origin as browsers send it: `http(s)://host[:port]`.
fn check_origin(origin: &str) -> Result<(), String> {
    let host = origin
        .strip_prefix("https://")
        .or_else(|| origin.strip_prefix("http://"))
        .unwrap_or("");
    if host.is_empty() || !host.bytes().all(|b| b.is_ascii_graphic() && b != b'/') {
        return Err(format!(
            "{origin:?} is not an origin: scheme://host[:port], no path (e.g. https://app.example.com)"
        ));
    }
    Ok(())
}

/// A `Host` value: a host name or address, with or without a port.
fn check_host(host: &str) -> Result<(), String> {
    if !host.bytes().all(|b| b.is_ascii_graphic() && b != b'/') {
        return Err(format!(
            "{host:?} is not a host: a name or address, with or without :port (e.g. idem.example.com)"
        ));
    }
    Ok(())
}

impl Settings {
    pub fn idempotency_wait(&self) -> Duration {
        Duration::from_millis(self.idempotency_wait_ms)
    }

    pub fn idempotency_retention(&self) -> Duration {
        Duration::from_secs(self.idempotency_retention_secs)
    }

    /// `small_body_bytes` as a buffer size (saturating where usize is small).
    pub fn small_body_bytes(&self) -> usize {
        usize::try_from(self.small_body_bytes).unwrap_or(usize::MAX)
    }

    /// `max_record_bytes` as a buffer size (saturating where usize is small).
    pub fn max_record_bytes(&self) -> usize {
        usize::try_from(self.max_record_bytes).unwrap_or(usize::MAX)
    }

    /// The time retention is reckoned from: the system clock, moved
    /// ahead by `clock_ahead_secs`.
    pub fn now(&self) -> chrono::NaiveDateTime {
        let now = chrono::Utc::now().naive_utc();
        now.checked_add_signed(chrono::Duration::seconds(self.clock_ahead_secs))
            .unwrap_or(now)
    }

    pub fn retention_every(&self) -> Duration {
        Duration::from_secs(self.retention_every_secs)
    }

    pub fn load_ttl(&self) -> Duration {
        Duration::from_secs(self.load_ttl)
    }

    pub fn load_wait(&self) -> Duration {
        Duration::from_millis(self.load_wait_ms)
    }

    /// How many writes may run at once with a pool of `pool_size`.
    pub fn load_slots(&self, pool_size: u32) -> u32 {
        self.max_concurrent_loads
            .unwrap_or(pool_size.saturating_mul(3) / 4)
            .max(1)
    }

    /// How many turns to write one token may hold with a pool of
    /// `pool_size`. Half by default: one heavy producer alone still runs
    /// several writes at once, and two of them still leave a turn to the
    /// rest when the turns are odd; never all of them but with one turn.
    pub fn load_slots_per_token(&self, pool_size: u32) -> u32 {
        let slots = self.load_slots(pool_size);
        self.load_slots_per_token
            .unwrap_or(slots / 2)
            .clamp(1, slots)
    }
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            max_put_body_bytes: 4 * GIB,
            max_post_body_bytes: 256 * MIB,
            max_record_bytes: 4 * MIB,
            max_row_group_bytes: DEFAULT_MAX_ROW_GROUP_BYTES,
            max_gzip_ratio: 100,
            max_listed_errors: 100,
            max_connections_per_client: 256,
            header_timeout_secs: 10,
            body_idle_timeout_secs: 30,
            body_deadline_secs: 1800,
            body_min_rate_bytes: 1024,
            body_min_rate_grace_secs: 30,
            max_concurrent_loads: None,
            load_wait_ms: 5_000,
            load_slots_per_token: None,
            auto_create_tables: true,
            spool_dir: None,
            idempotency_wait_ms: 10_000,
            small_body_bytes: 128 * 1024,
            batch_writes: true,
            batch_workers: 3,
            idempotency_retention_secs: 72 * 3600,
            load_ttl: 24 * 3600,
            retention_every_secs: 60,
            clock_ahead_secs: 0,
            console: true,
            console_session_secs: 12 * 3600,
            console_signin_failures_per_address: 10,
            console_signin_failures_overall: 300,
            console_signin_window_secs: 60,
            admin_token: None,
            insecure_no_auth: false,
            metrics_open_to_local: false,
            cors_origins: CommaList::default(),
            allowed_hosts: CommaList::default(),
            trusted_proxies: TrustedProxies::default(),
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

/// The bootstrap admin token: a secret that never prints.
#[derive(Clone)]
pub struct AdminToken(String);

impl AdminToken {
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Debug for AdminToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("AdminToken(***)")
    }
}

impl std::str::FromStr for AdminToken {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        let visible = s.bytes().all(|b| b.is_ascii_graphic());
        if (32..=256).contains(&s.len()) && visible {
            Ok(AdminToken(s.to_string()))
        } else {
            Err("the admin token must be 32 to 256 visible ASCII characters".into())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Only {
        #[command(flatten)]
        settings: Settings,
    }

    #[test]
    fn the_defaults_in_code_are_the_documented_flag_defaults() {
        let parsed = Only::parse_from(["idem"]).settings;
        let coded = Settings::default();
        assert_eq!(format!("{parsed:?}"), format!("{coded:?}"));
    }

    #[test]
    fn lists_are_comma_separated_and_a_bare_flag_is_true() {
        let parsed = Only::parse_from([
            "idem",
            "--cors-origins",
            "https://App.example.com, http://localhost:3000",
            "--allowed-hosts",
            "idem.example.com,[::1]:8080",
            "--metrics-open-to-local",
        ])
        .settings;
        assert_eq!(
            *parsed.cors_origins,
            ["https://app.example.com", "http://localhost:3000"]
        );
        assert_eq!(*parsed.allowed_hosts, ["idem.example.com", "[::1]:8080"]);
        let empty = Only::parse_from(["idem", "--allowed-hosts", " , "]).settings;
        assert!(empty.allowed_hosts.is_empty());
        assert!(parsed.metrics_open_to_local);
        for bad in [
            ["idem", "--cors-origins", "app.example.com"],
            ["idem", "--cors-origins", "https://app.example.com/"],
            ["idem", "--allowed-hosts", "a b"],
            ["idem", "--trusted-proxies", "10.0.0.0/33"],
            ["idem", "--trusted-proxies", "proxy.internal"],
        ] {
            assert!(Only::try_parse_from(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn trusted_proxies_are_addresses_and_networks() {
        let parsed = Only::parse_from(["idem", "--trusted-proxies", "10.0.0.0/8, 127.0.0.1,::1"]);
        let proxies = parsed.settings.trusted_proxies;
        for (ip, trusted) in [
            ("10.1.2.3", true),
            ("127.0.0.1", true),
            ("::ffff:127.0.0.1", true),
            ("::1", true),
            ("127.0.0.2", false),
            ("192.0.2.1", false),
        ] {
            assert_eq!(proxies.trusts(ip.parse().unwrap()), trusted, "{ip}");
        }
        let none = Only::parse_from(["idem"]).settings.trusted_proxies;
        assert!(
            !none.trusts("127.0.0.1".parse().unwrap()),
            "none by default"
        );
    }

    #[test]
    fn each_connection_keeps_a_hundred_statements_unless_told_and_never_none() {
        #[derive(Parser)]
        struct Database {
            #[command(flatten)]
            database: DatabaseArgs,
        }
        let parse = |args: &[&str]| {
            Database::try_parse_from([&["idem", "--database-url", "postgres://x"], args].concat())
                .map(|parsed| parsed.database.statement_cache)
        };
        assert_eq!(parse(&[]).unwrap(), 100);
        assert_eq!(parse(&["--statement-cache", "5000"]).unwrap(), 5_000);
        assert!(parse(&["--statement-cache", "0"]).is_err());
    }

    #[test]
    fn a_token_may_hold_half_the_turns_to_write_by_default_never_none_nor_more_than_all() {
        let share = |args: &[&str]| {
            let parsed = Only::parse_from([&["idem"], args].concat()).settings;
            parsed.load_slots_per_token(8)
        };
        assert_eq!(share(&[]), 3, "half of the 6 turns of a pool of 8");
        assert_eq!(share(&["--max-concurrent-loads", "1"]), 1);
        assert_eq!(share(&["--load-slots-per-token", "5"]), 5);
        assert_eq!(share(&["--load-slots-per-token", "50"]), 6);
        assert!(Only::try_parse_from(["idem", "--load-slots-per-token", "0"]).is_err());
    }
}
