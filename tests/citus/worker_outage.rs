//! A worker stopped under load, once cleanly (`fast`) and once as a crash
//! (`immediate`), on a cluster of the test's own: while it is away, writes
//! whose rows live on it are answered 503 with `Retry-After` (never a 500),
//! the others go on; once it is back, idem writes again without a restart,
//! and every acknowledged write is there exactly once after the
//! coordinator has recovered what a crash left prepared on the worker.

use sqlx::{Connection, PgConnection};

use crate::outage::{self, Outage};
use crate::scenario::report;
use crate::support::*;

/// Which worker each round stops, and how.
const ROUNDS: [(u16, Shutdown); 2] = [(1, Shutdown::Fast), (2, Shutdown::Immediate)];
/// Seconds each worker is away.
const AWAY: [u64; 2] = [5, 5];

struct WorkerOutages<'a> {
    cluster: &'a OwnCluster,
    /// Transactions prepared on each stopped worker the moment it was back.
    prepared_when_back: std::sync::Mutex<Vec<i64>>,
}

impl Outage for WorkerOutages<'_> {
    fn describe(&self, round: usize) -> String {
        let (worker, how) = ROUNDS[round];
        format!("worker{worker} ({how:?})")
    }

    async fn stop(&self, round: usize) {
        let (worker, how) = ROUNDS[round];
        self.cluster.stop_worker(worker, how).await;
    }

    async fn start_again(&self, round: usize) {
        let worker = ROUNDS[round].0;
        self.cluster.start_worker(worker).await;
        let prepared = prepared_on(&self.cluster.worker_url(worker)).await;
        self.prepared_when_back.lock().unwrap().push(prepared);
    }
}

async fn connect(url: &str) -> PgConnection {
    PgConnection::connect(url).await.expect("connect to a node")
}

/// Transactions prepared on the node at `url` and neither committed nor
/// rolled back yet.
async fn prepared_on(url: &str) -> i64 {
    let mut conn = connect(url).await;
    sqlx::query_scalar("select count(*) from pg_prepared_xacts")
        .fetch_one(&mut conn)
        .await
        .unwrap()
}

async fn prepared_on_workers(cluster: &OwnCluster) -> Vec<i64> {
    let mut counts = Vec::new();
    for worker in [1, 2] {
        counts.push(prepared_on(&cluster.worker_url(worker)).await);
    }
    counts
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_stopped_under_load_answers_503_and_idem_recovers_without_a_restart() {
    let cluster = OwnCluster::start().await;
    let env = [("IDEM_DISTRIBUTION_DEFAULT", "key")];
    let mut idem = Idem::start(&cluster.url, "worker-outage", &env).await;
    outage::declare_tables(&client(), &idem).await;
    let outages = WorkerOutages {
        cluster: &cluster,
        prepared_when_back: Default::default(),
    };
    let run = outage::load_through(&idem, &outages, &AWAY).await;
    let when_back = outages.prepared_when_back.lock().unwrap().clone();

    // A crash between a transaction's PREPARE on the worker and its COMMIT
    // PREPARED leaves it prepared (its rows unseen, its locks held) until
    // the coordinator recovers it, by itself within
    // `citus.recover_2pc_interval` (5 s on the test cluster) or when asked,
    // as here.
    let prepared = prepared_on_workers(&cluster).await;
    let mut coordinator = connect(&cluster.url).await;
    let recovered: i32 = sqlx::query_scalar("select recover_prepared_transactions()")
        .fetch_one(&mut coordinator)
        .await
        .unwrap();
    let left = prepared_on_workers(&cluster).await;
    report!(
        "Citus worker outage: transactions prepared on each stopped worker the moment it \
         was back: {when_back:?}; on the workers after the load: {prepared:?}; the coordinator \
         recovered {recovered} more; left: {left:?}"
    );
    assert_eq!(left, [0, 0], "prepared transactions left after recovery");
    outage::check_recovered(
        "A Citus worker stopped under load",
        &mut idem,
        &cluster.url,
        run,
    )
    .await;
}
