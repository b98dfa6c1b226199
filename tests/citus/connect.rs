//! Connecting to a cluster: Citus's own certificate under the default
//! `sslmode`, and a worker refused, since idem's locks and keys must be
//! shared by every process (they live on the coordinator).

use std::process::Stdio;
use std::time::Duration;

use tokio::process::Command;

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
    let put = client()
        .put(idem.url("/partitions/orders/2026-01-01"))
        .header("content-type", "application/x-ndjson")
        .body("{\"order_id\":1,\"ds\":\"2026-01-01\"}\n")
        .send()
        .await
        .expect("a PUT");
    assert_eq!(
        put.status(),
        200,
        "{}",
        put.text().await.unwrap_or_default()
    );
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
    let run = Command::new(env!("CARGO_BIN_EXE_idem"))
        .args(["serve", "--listen", "127.0.0.1:0"])
        .env("DATABASE_URL", &worker_url)
        .env("IDEM_ADMIN_TOKEN", ADMIN_TOKEN)
        .stdin(Stdio::null())
        .kill_on_drop(true)
        .output();
    let out = tokio::time::timeout(Duration::from_secs(60), run)
        .await
        .expect("idem stops within a minute")
        .expect("run idem");
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success(),
        "idem must not serve a worker: {said}"
    );
    assert!(
        said.contains("Citus worker") && said.contains("coordinator"),
        "the failure says to use the coordinator: {said}"
    );
}
