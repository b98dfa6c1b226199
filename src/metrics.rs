//! What idem counts, for `GET /metrics` (Prometheus text format): requests,
//! rows, replays, swaps, the janitor's work, the console's refused
//! sign-ins and the pool's state.
//!
//! Each server (each `AppState`) has a registry of its own instead of one
//! process-wide recorder, so several servers in one process (the tests run
//! dozens) never count each other's requests. Labels take only bounded
//! values: a route as declared (never a raw path), a status, an error code,
//! a table name.

use std::time::Duration;

use prometheus::core::Collector;
use prometheus::{
    Encoder, Histogram, HistogramOpts, HistogramVec, IntCounter, IntCounterVec, IntGauge, Opts,
    Registry, TextEncoder,
};

/// Request latencies: from a few milliseconds (reads, replays) to the
/// minutes a large partition takes to arrive.
const REQUEST_BUCKETS: &[f64] = &[
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0, 1800.0,
];

/// Swap latencies: a swap is a few catalog updates, but waits for the
/// partition's lock and for readers of the table.
const SWAP_BUCKETS: &[f64] = &[
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
];

/// The counters and gauges of one server, in families by what they
/// watch.
pub struct Metrics {
    registry: Registry,
    http: HttpFamilies,
    rows: RowFamilies,
    writes: WriteFamilies,
    janitor: JanitorFamilies,
    console: ConsoleFamilies,
    pool: PoolFamilies,
}

/// The database pool as it is at a scrape.
#[derive(Clone, Copy, Debug)]
pub struct PoolGauges {
    pub open: u64,
    pub idle: u64,
    pub waiting: u64,
    pub max: u64,
    /// Turns to write not taken (`IDEM_MAX_CONCURRENT_LOADS`).
    pub load_slots_free: u64,
}

/// What an accepted write did to one table, as its receipt counts it.
#[derive(Clone, Copy, Debug, Default)]
pub struct RowCounts {
    pub received: u64,
    pub written: u64,
    pub duplicates: u64,
    pub rejected: u64,
}

/// Registers a metric in `registry` and hands it back.
fn registered<C: Collector + Clone + 'static>(registry: &Registry, metric: C) -> C {
    registry
        .register(Box::new(metric.clone()))
        .expect("each metric is registered once");
    metric
}

fn counters(registry: &Registry, name: &str, help: &str, labels: &[&str]) -> IntCounterVec {
    let family = IntCounterVec::new(Opts::new(name, help), labels).expect("a valid metric");
    registered(registry, family)
}

/// A counter of rows (or writes) labelled by table.
fn by_table(registry: &Registry, name: &str, help: &str) -> IntCounterVec {
    counters(registry, name, help, &["table"])
}

fn counter(registry: &Registry, name: &str, help: &str) -> IntCounter {
    registered(
        registry,
        IntCounter::new(name, help).expect("a valid metric"),
    )
}

fn gauge(registry: &Registry, name: &str, help: &str) -> IntGauge {
    registered(registry, IntGauge::new(name, help).expect("a valid metric"))
}

/// What the HTTP edge counts: requests, their time, body bytes, problems.
struct HttpFamilies {
    requests: IntCounterVec,
    request_seconds: HistogramVec,
    request_body_bytes: IntCounterVec,
    problems: IntCounterVec,
}

impl HttpFamilies {
    fn register(r: &Registry) -> Self {
        let request_seconds = HistogramVec::new(
            HistogramOpts::new(
                "idem_http_request_duration_seconds",
                "Time from a request's arrival to its answer's head, by method and route.",
            )
            .buckets(REQUEST_BUCKETS.to_vec()),
            &["method", "route"],
        )
        .expect("a valid metric");
        HttpFamilies {
            requests: counters(
                r,
                "idem_http_requests_total",
                "HTTP requests answered, by method, route and status.",
                &["method", "route", "status"],
            ),
            request_seconds: registered(r, request_seconds),
            request_body_bytes: counters(
                r,
                "idem_http_request_body_bytes_total",
                "Bytes of request bodies read, as sent (gzip bodies packed), by route.",
                &["route"],
            ),
            problems: counters(
                r,
                "idem_http_problems_total",
                "Problem answers (application/problem+json), by status and code.",
                &["status", "code"],
            ),
        }
    }
}

/// What writes did to each table's rows, and the writes answered again.
struct RowFamilies {
    received: IntCounterVec,
    written: IntCounterVec,
    duplicates: IntCounterVec,
    rejected: IntCounterVec,
    replays: IntCounterVec,
    channel_commits: IntCounterVec,
    channel_skips: IntCounterVec,
}

impl RowFamilies {
    fn register(r: &Registry) -> Self {
        RowFamilies {
            received: by_table(r, "idem_rows_received_total",
                "Rows read from write bodies, by table (refused writes included)."),
            written: by_table(r, "idem_rows_written_total",
                "Rows written (inserted, updated, deleted or swapped in), by table."),
            duplicates: by_table(r, "idem_rows_duplicates_total",
                "Versions of repeated keys not written (dropped or held), by table."),
            rejected: by_table(r, "idem_rows_rejected_total",
                "Bad rows, by table: in refused writes, kept under a quarantine, or still bad after a replay."),
            replays: by_table(r, "idem_idempotent_replays_total",
                "Writes answered from a completed Idempotency-Key (Idempotent-Replayed: true), by table."),
            channel_commits: by_table(r, "idem_channel_commits_total",
                "POSTs on a channel that committed their offset, by table."),
            channel_skips: by_table(r, "idem_channel_offsets_skipped_total",
                "POSTs on a channel whose offset was committed already (nothing written), by table."),
        }
    }
}

/// How partitions were swapped in and small POSTs written together.
struct WriteFamilies {
    swaps: IntCounterVec,
    swap_seconds: Histogram,
    batches: IntCounterVec,
    batched_posts: IntCounterVec,
}

impl WriteFamilies {
    fn register(r: &Registry) -> Self {
        let swap_seconds = Histogram::with_opts(
            HistogramOpts::new(
                "idem_partition_swap_duration_seconds",
                "Time of a PUT's publish transaction: locks, swap, registry and ledger.",
            )
            .buckets(SWAP_BUCKETS.to_vec()),
        )
        .expect("a valid metric");
        WriteFamilies {
            swaps: by_table(r, "idem_partition_swaps_total",
                "Partitions swapped in by a PUT, by table."),
            swap_seconds: registered(r, swap_seconds),
            batches: by_table(r, "idem_post_batches_total",
                "Transactions that wrote small POSTs together, by table."),
            batched_posts: by_table(r, "idem_post_batches_posts_total",
                "POSTs written in those transactions, by table (divided by the batches: POSTs per batch)."),
        }
    }
}

/// The janitor's work: stages dropped, keys deleted, partitions expired.
struct JanitorFamilies {
    stages_swept: IntCounter,
    keys_reaped: IntCounter,
    partitions_expired: IntCounterVec,
}

impl JanitorFamilies {
    fn register(r: &Registry) -> Self {
        JanitorFamilies {
            stages_swept: counter(
                r,
                "idem_stages_swept_total",
                "Stages left behind by crashed loads that the janitor dropped.",
            ),
            keys_reaped: counter(
                r,
                "idem_idempotency_keys_reaped_total",
                "Expired Idempotency-Keys the janitor deleted.",
            ),
            partitions_expired: by_table(
                r,
                "idem_partitions_expired_total",
                "Partitions dropped because their period passed their table's retention.",
            ),
        }
    }
}

/// The console's sign-ins refused: a wrong token, or the limit on
/// failures.
struct ConsoleFamilies {
    signin_failures: IntCounter,
    signin_limited: IntCounterVec,
}

impl ConsoleFamilies {
    fn register(r: &Registry) -> Self {
        ConsoleFamilies {
            signin_failures: counter(
                r,
                "idem_console_signin_failures_total",
                "Console sign-ins refused for their token (not an idem token, unknown, revoked or expired).",
            ),
            signin_limited: counters(
                r,
                "idem_console_signin_limited_total",
                "Console sign-ins answered 429 for too many failures, by limit (address or overall).",
                &["limit"],
            ),
        }
    }
}

/// The pool's and the write turns' state, set at each scrape.
struct PoolFamilies {
    open: IntGauge,
    idle: IntGauge,
    waiting: IntGauge,
    max: IntGauge,
    load_slots_free: IntGauge,
}

impl PoolFamilies {
    fn register(r: &Registry) -> Self {
        PoolFamilies {
            open: gauge(
                r,
                "idem_db_pool_connections",
                "Connections to Postgres the pool holds open (idle or in use).",
            ),
            idle: gauge(r, "idem_db_pool_idle", "Open connections not in use."),
            waiting: gauge(
                r,
                "idem_db_pool_waiting",
                "Tasks waiting for a connection of the pool.",
            ),
            max: gauge(
                r,
                "idem_db_pool_max_connections",
                "The most connections the pool may open (IDEM_POOL_SIZE).",
            ),
            load_slots_free: gauge(
                r,
                "idem_load_slots_free",
                "Turns to write not taken (of IDEM_MAX_CONCURRENT_LOADS).",
            ),
        }
    }

    fn set(&self, pool: PoolGauges) {
        let gauge = |n: u64| i64::try_from(n).unwrap_or(i64::MAX);
        self.open.set(gauge(pool.open));
        self.idle.set(gauge(pool.idle));
        self.waiting.set(gauge(pool.waiting));
        self.max.set(gauge(pool.max));
        self.load_slots_free.set(gauge(pool.load_slots_free));
    }
}

impl Metrics {
    pub fn new() -> Metrics {
        let registry = Registry::new();
        Metrics {
            http: HttpFamilies::register(&registry),
            rows: RowFamilies::register(&registry),
            writes: WriteFamilies::register(&registry),
            janitor: JanitorFamilies::register(&registry),
            console: ConsoleFamilies::register(&registry),
            pool: PoolFamilies::register(&registry),
            registry,
        }
    }
}

impl Default for Metrics {
    fn default() -> Self {
        Metrics::new()
    }
}

impl Metrics {
    /// One answered request: `route` is the matched route's template.
    pub fn request(&self, method: &str, route: &str, status: u16, elapsed: Duration) {
        self.http
            .requests
            .with_label_values(&[method, route, itoa::Buffer::new().format(status)])
            .inc();
        self.http
            .request_seconds
            .with_label_values(&[method, route])
            .observe(elapsed.as_secs_f64());
    }

    /// The counter a request body's bytes are added to as they arrive.
    pub fn body_bytes(&self, route: &str) -> IntCounter {
        self.http.request_body_bytes.with_label_values(&[route])
    }

    /// One problem answer.
    pub fn problem(&self, status: u16, code: &str) {
        self.http
            .problems
            .with_label_values(&[itoa::Buffer::new().format(status), code])
            .inc();
    }

    /// What a write did to `table` (accepted, or refused with bad rows).
    pub fn rows(&self, table: &str, counts: RowCounts) {
        for (family, n) in [
            (&self.rows.received, counts.received),
            (&self.rows.written, counts.written),
            (&self.rows.duplicates, counts.duplicates),
            (&self.rows.rejected, counts.rejected),
        ] {
            family.with_label_values(&[table]).inc_by(n);
        }
    }

    /// A write answered from its completed Idempotency-Key.
    pub fn replay(&self, table: &str) {
        self.rows.replays.with_label_values(&[table]).inc();
    }

    /// A POST on a channel to `table`: its offset committed, or skipped.
    pub fn channel(&self, table: &str, committed: bool) {
        let family = if committed {
            &self.rows.channel_commits
        } else {
            &self.rows.channel_skips
        };
        family.with_label_values(&[table]).inc();
    }

    /// A publish transaction of `table`: timed always, counted when it
    /// swapped a partition in (not when the content was already live).
    pub fn swap(&self, table: &str, swapped: bool, elapsed: Duration) {
        self.writes.swap_seconds.observe(elapsed.as_secs_f64());
        if swapped {
            self.writes.swaps.with_label_values(&[table]).inc();
        }
    }

    /// A batch that wrote `posts` POSTs together.
    pub fn batch(&self, table: &str, posts: usize) {
        self.writes.batches.with_label_values(&[table]).inc();
        self.writes
            .batched_posts
            .with_label_values(&[table])
            .inc_by(u64::try_from(posts).unwrap_or(u64::MAX));
    }

    pub fn stages_swept(&self, n: usize) {
        self.janitor
            .stages_swept
            .inc_by(u64::try_from(n).unwrap_or(u64::MAX));
    }

    pub fn keys_reaped(&self, n: u64) {
        self.janitor.keys_reaped.inc_by(n);
    }

    pub fn partition_expired(&self, table: &str) {
        self.janitor
            .partitions_expired
            .with_label_values(&[table])
            .inc();
    }

    /// A console sign-in refused for its token.
    pub fn signin_failed(&self) {
        self.console.signin_failures.inc();
    }

    /// A console sign-in refused for too many failures: `limit` is
    /// `address` or `overall`.
    pub fn signin_limited(&self, limit: &str) {
        self.console
            .signin_limited
            .with_label_values(&[limit])
            .inc();
    }

    /// The text a scrape answers, with the pool's gauges as they are now.
    pub fn render(&self, pool: PoolGauges) -> String {
        self.pool.set(pool);
        let mut text = Vec::new();
        TextEncoder::new()
            .encode(&self.registry.gather(), &mut text)
            .expect("the text format writes to memory");
        String::from_utf8(text).expect("the text format is UTF-8")
    }

    /// The content type of `render`'s text.
    pub fn content_type() -> &'static str {
        prometheus::TEXT_FORMAT
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn idle_pool() -> PoolGauges {
        PoolGauges {
            open: 1,
            idle: 1,
            waiting: 0,
            max: 4,
            load_slots_free: 3,
        }
    }

    #[test]
    fn counts_are_rendered_with_their_labels() {
        let metrics = Metrics::new();
        metrics.request(
            "PUT",
            "/partitions/{table}/{ds}",
            200,
            Duration::from_millis(3),
        );
        metrics.rows(
            "orders",
            RowCounts {
                received: 3,
                written: 2,
                duplicates: 1,
                rejected: 0,
            },
        );
        let text = metrics.render(idle_pool());
        assert!(text.contains(
            r#"idem_http_requests_total{method="PUT",route="/partitions/{table}/{ds}",status="200"} 1"#
        ));
        assert!(text.contains(r#"idem_rows_received_total{table="orders"} 3"#));
        assert!(text.contains(r#"idem_rows_duplicates_total{table="orders"} 1"#));
        assert!(text.contains("idem_db_pool_max_connections 4"));
    }

    #[test]
    fn two_servers_count_apart() {
        let (one, other) = (Metrics::new(), Metrics::new());
        one.replay("orders");
        assert!(one
            .render(idle_pool())
            .contains(r#"idem_idempotent_replays_total{table="orders"} 1"#));
        assert!(!other
            .render(idle_pool())
            .contains("idem_idempotent_replays_total{"));
    }
}
