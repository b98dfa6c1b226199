//! Several real idem processes on one database.

use std::process::Stdio;

use serde_json::Value;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

use crate::helpers::*;

/// `idem serve` as a child process on a free port; killed when dropped.
struct IdemProcess {
    base: String,
    _child: Child,
}

async fn start_idem(database_url: &str) -> IdemProcess {
    let mut child = Command::new(env!("CARGO_BIN_EXE_idem"))
        .args(["serve", "--listen", "127.0.0.1:0", "--pool-size", "8"])
        .env("DATABASE_URL", database_url)
        .env("IDEM_ADMIN_TOKEN", ADMIN_TOKEN)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .expect("start idem");
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    while let Some(line) = lines.next_line().await.unwrap() {
        if let Some(base) = line.strip_prefix("idem serving on ") {
            return IdemProcess {
                base: base.to_string(),
                _child: child,
            };
        }
    }
    panic!("idem exited before serving");
}

#[tokio::test]
async fn three_processes_racing_on_the_same_keys_write_each_key_once() {
    // Declared before the processes, so dropped after them: they are killed first.
    let (options, url, _database) = fresh_database_url().await;
    let processes = [
        start_idem(&url).await,
        start_idem(&url).await,
        start_idem(&url).await,
    ];
    let client = client_with_token(ADMIN_TOKEN);
    let declared = client
        .put(format!("{}/tables/orders", processes[0].base))
        .header("content-type", "application/json")
        .body(ORDERS)
        .send()
        .await
        .unwrap();
    assert!(declared.status().is_success());

    let keys = ["alpha", "beta", "gamma"];
    let mut tasks = Vec::new();
    for i in 0..36 {
        let key = keys[i % keys.len()];
        let base = processes[i % processes.len()].base.clone();
        let client = client.clone();
        // Each key has its own rows: orders 1000*k+1 ..= 1000*k+100.
        let k = (i % keys.len()) as i64;
        let rows: Vec<Value> = (1..=100)
            .map(|n| order(1000 * k + n, key, "2026-10-12T01:00:00Z"))
            .collect();
        tasks.push(tokio::spawn(async move {
            let r = client
                .post(format!("{base}/rows?table=orders"))
                .header("content-type", "application/x-ndjson")
                .header("idempotency-key", key)
                .body(ndjson(&rows))
                .send()
                .await
                .unwrap();
            let replayed = r.headers().get("idempotent-replayed").map(|v| v == "false");
            (key, r.status().as_u16(), replayed)
        }));
    }
    let mut firsts = std::collections::BTreeMap::new();
    for t in tasks {
        let (key, status, first) = t.await.unwrap();
        assert!(status == 200 || status == 409, "answer {status}");
        if first == Some(true) {
            *firsts.entry(key).or_insert(0) += 1;
        }
    }
    assert_eq!(firsts, keys.iter().map(|k| (*k, 1)).collect());

    let db = sqlx::PgPool::connect_with(options).await.unwrap();
    let loads: Vec<(String, i64)> = sqlx::query_as(
        "select idempotency_key, count(*) from idem.loads where status = 'published' group by 1 order by 1",
    )
    .fetch_all(&db)
    .await
    .unwrap();
    assert_eq!(
        loads,
        keys.iter().map(|k| (k.to_string(), 1)).collect::<Vec<_>>()
    );
    let rows: i64 = sqlx::query_scalar("select count(*) from idem_data.orders")
        .fetch_one(&db)
        .await
        .unwrap();
    assert_eq!(rows, 300);
}
