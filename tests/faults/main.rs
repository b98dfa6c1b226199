//! The fault suite: real `idem serve` processes and a Postgres of the
//! suite's own (so it can be stopped and started), under kills, outages,
//! races and hostile bodies; and property tests of the body decoders and the
//! name validator.
//!
//! Quick by default (a few minutes at most on two cores); `IDEM_FAULTS=long`
//! runs more rounds, and `IDEM_FAULTS_SEED=N` replays the random moments of
//! a run (each scenario prints its seed). Every scenario prints what it did
//! and the invariant it checked, even when it passes.

#[path = "../support/mod.rs"]
mod support;

mod scenario;

mod hostile;
mod kill_expire;
mod kill_load;
mod kill_post;
mod kill_producer;
mod kill_put;
mod outage;
mod pg_outage;
mod processes;
mod props;
mod proxies;
mod slow_clients;
mod spool;
mod tls;
