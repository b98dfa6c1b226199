//! Connecting to a cluster: Citus's own certificate under the default
//! `sslmode`, and a worker refused, since idem's locks and keys must be
//! shared by every process (they live on the coordinator).

use crate::support::*;

/// The URL without its `sslmode=disable` (which the tests' own
/// connections need: rustls cannot parse Citus's version 1 certificate).
fn with_default_sslmode(url: &str) -> String {
    url.replace("?sslmode=disable", "")
}

#[tokio::test]
async fn the_coordinator_with_citus_own_certificate_connects_with_the_default_sslmode() {
    let (_options, url, _db) = fresh_database_url().await;
    let idem = Idem::start(&with_default_sslmode(&url), "citus-tls", &[]).await;
    put_one_order(&idem, "orders").await;
}

#[tokio::test]
async fn an_idem_pointed_at_a_worker_stops_and_names_the_coordinator() {
    let (_options, url, _db) = fresh_database_url().await;
    let workers = std::env::var("IDEM_CITUS_WORKER_URLS").expect("a Citus cluster");
    let worker = workers.split(',').next().expect("a worker");
    let database = url
        .split('?')
        .next()
        .and_then(|u| u.rsplit('/').next())
        .expect("the test database's name");
    let worker_url = worker.replace("/postgres?", &format!("/{database}?"));
    let said = refused_serve(&worker_url).await;
    assert!(
        said.contains("Citus worker") && said.contains("coordinator"),
        "the failure says to use the coordinator: {said}"
    );
}
