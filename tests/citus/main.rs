//! The Citus suite: `scripts/test` runs it on a coordinator and two workers
//! (`scripts/citus.sh`), each test on a database of its own made on every
//! node with the extension, the workers registered. Not run on a plain
//! Postgres (`test = false`; `scripts/test` says SKIPPED when there is no
//! Citus to run it on).

// This suite uses a part of the shared support, as each suite does.
#[allow(unused_imports)]
#[path = "../support/mod.rs"]
mod support;

mod connect;
mod distribution;
mod worker_outage;

// The fault suite's kill -9 during PUTs, keyed POSTs and staged loads (their
// parts and their publish), and its race of three processes on one key and
// one day, on the cluster's coordinator; its load through outages, which
// `worker_outage` runs on a cluster of its own.
#[path = "../faults/kill_load.rs"]
mod kill_load;
#[path = "../faults/kill_post.rs"]
mod kill_post;
#[path = "../faults/kill_put.rs"]
mod kill_put;
#[path = "../faults/outage.rs"]
mod outage;
#[path = "../faults/processes.rs"]
mod processes;
#[allow(dead_code)]
#[path = "../faults/scenario.rs"]
mod scenario;
