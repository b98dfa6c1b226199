//! The client commands as a process against the real server.

use std::io::Write;
use std::process::Output;

use serde_json::Value;

use crate::helpers::*;

/// Runs the `idem` binary with `args`, `stdin` on its standard input.
async fn idem(args: &[&str], stdin: &[u8]) -> Output {
    let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_idem"))
        .args(args)
        .env_remove("IDEM_URL")
        .env_remove("IDEM_TOKEN")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut input = child.stdin.take().unwrap();
    tokio::io::AsyncWriteExt::write_all(&mut input, stdin)
        .await
        .unwrap();
    drop(input);
    child.wait_with_output().await.unwrap()
}

fn file_with(suffix: &str, text: &str) -> tempfile::NamedTempFile {
    let mut file = tempfile::Builder::new().suffix(suffix).tempfile().unwrap();
    file.write_all(text.as_bytes()).unwrap();
    file
}

#[tokio::test]
async fn idem_put_loads_a_file_once_and_a_rerun_is_a_replay() {
    let app = spawn_app().await;
    app.declare_orders().await;
    let rows: Vec<Value> = (1..=50)
        .map(|id| order(id, "paid", "2026-10-12T01:00:00Z"))
        .collect();
    let file = file_with(".ndjson", &ndjson(&rows));
    let path = file.path().to_str().unwrap();
    let args = [
        "put",
        "orders",
        "2026-10-12",
        path,
        "--url",
        &app.base,
        "--token",
        ADMIN_TOKEN,
        "-q",
    ];
    let first = idem(&args, b"").await;
    assert_eq!(
        first.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&first.stderr)
    );
    let receipt: Value = serde_json::from_slice(&first.stdout).unwrap();
    assert_eq!(
        (
            receipt["rows_written"].as_u64(),
            receipt["replayed"].as_bool()
        ),
        (Some(50), Some(false))
    );
    assert_eq!(app.count("orders", "2026-10-12").await, 50);

    // The same command again: the same key, answered from its record.
    let again = idem(&args, b"").await;
    assert_eq!(again.status.code(), Some(0));
    let receipt: Value = serde_json::from_slice(&again.stdout).unwrap();
    assert_eq!(receipt["replayed"], true);

    // Stdin, gzipped CSV, with --format.
    let csv = "order_id,ds,customer_id,status,amount,updated_at,note\n7,2026-10-13,1,paid,1.00,2026-10-13T00:00:00Z,\n";
    let stdin_args = [
        "put",
        "orders",
        "2026-10-13",
        "-",
        "--format",
        "csv.gz",
        "--url",
        &app.base,
        "--token",
        ADMIN_TOKEN,
    ];
    let out = idem(&stdin_args, &gzip(csv.as_bytes())).await;
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(app.count("orders", "2026-10-13").await, 1);
}

#[tokio::test]
async fn idem_put_exits_1_when_refused_2_when_it_gives_up_3_on_a_wrong_command() {
    let app = spawn_app().await;
    app.declare_orders().await;
    let bad = file_with(".ndjson", "{\"order_id\": \"x\", \"ds\": \"2026-10-12\"}\n");
    let path = bad.path().to_str().unwrap();
    let out = idem(
        &[
            "put",
            "orders",
            "2026-10-12",
            path,
            "--url",
            &app.base,
            "--token",
            ADMIN_TOKEN,
        ],
        b"",
    )
    .await;
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("bad_rows") && stderr.contains("line 1"),
        "{stderr}"
    );

    // Nobody listens on port 9: every attempt fails, then it gives up.
    let good = file_with(".ndjson", "{}\n");
    let started = std::time::Instant::now();
    let out = idem(
        &[
            "put",
            "orders",
            "2026-10-12",
            good.path().to_str().unwrap(),
            "--url",
            "http://127.0.0.1:9",
            "--max-attempts",
            "3",
            "--max-time",
            "20",
        ],
        b"",
    )
    .await;
    assert_eq!(
        out.status.code(),
        Some(2),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stderr).contains("gave up after 3 attempts"));
    assert!(started.elapsed() < std::time::Duration::from_secs(20));

    let out = idem(
        &["put", "orders", "2026-10-12", "-", "--url", &app.base],
        b"{}",
    )
    .await;
    assert_eq!(out.status.code(), Some(3), "stdin needs --format");
    let out = idem(
        &[
            "put",
            "orders",
            "2026-10-12",
            "/no/such/file.csv",
            "--url",
            &app.base,
        ],
        b"",
    )
    .await;
    assert_eq!(out.status.code(), Some(3));
}

#[tokio::test]
async fn idem_put_waits_for_a_server_that_starts_late_and_loads_once() {
    // An address nobody listens on yet.
    let addr = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let rows: Vec<Value> = (1..=100)
        .map(|id| order(id, "paid", "2026-10-12T01:00:00Z"))
        .collect();
    let file = file_with(".ndjson", &ndjson(&rows));
    let url = format!("http://{addr}");
    let path = file.path().to_str().unwrap().to_string();
    let client = tokio::spawn(async move {
        let args = [
            "put",
            "late",
            "2026-10-12",
            &path,
            "--url",
            &url,
            "--token",
            ADMIN_TOKEN,
        ];
        idem(&args, b"").await
    });
    tokio::time::sleep(std::time::Duration::from_millis(1500)).await;
    let listener = tokio::net::TcpListener::bind(addr).await.unwrap();
    let app = spawn_app_listening_fresh(listener).await;
    let out = client.await.unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert!(stderr.contains("retrying"), "it had to retry: {stderr}");
    let count: i64 = sqlx::query_scalar("select count(*) from idem_data.late")
        .fetch_one(&app.db)
        .await
        .unwrap();
    assert_eq!(count, 100);
}

#[tokio::test]
async fn idem_post_sends_batches_once_and_a_rerun_replays_them_all() {
    let app = spawn_app().await;
    app.declare_orders().await;
    let rows: Vec<Value> = (1..=250)
        .map(|id| order(id, "paid", "2026-10-12T01:00:00Z"))
        .collect();
    let file = file_with(".ndjson", &ndjson(&rows));
    let path = file.path().to_str().unwrap();
    let args = [
        "post",
        "orders",
        path,
        "--batch-rows",
        "100",
        "--url",
        &app.base,
        "--token",
        ADMIN_TOKEN,
    ];
    let first = idem(&args, b"").await;
    assert_eq!(
        first.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&first.stderr)
    );
    let summary: Value = serde_json::from_slice(&first.stdout).unwrap();
    assert_eq!(
        (
            summary["batches"].as_u64(),
            summary["new"].as_u64(),
            summary["rows_written"].as_u64()
        ),
        (Some(3), Some(3), Some(250)),
        "{summary}"
    );
    let again = idem(&args, b"").await;
    let summary: Value = serde_json::from_slice(&again.stdout).unwrap();
    assert_eq!(
        (summary["new"].as_u64(), summary["replayed"].as_u64()),
        (Some(0), Some(3)),
        "{summary}"
    );
    assert_eq!(app.count("orders", "2026-10-12").await, 250);

    // CSV records, one with a quoted line end, kept whole across batches.
    let csv = "order_id,ds,customer_id,status,amount,updated_at,note\r\n\
               301,2026-10-12,1,paid,1.00,2026-10-12T00:00:00Z,\"two\r\nlines\"\r\n\
               302,2026-10-12,1,paid,1.00,2026-10-12T00:00:00Z,plain\r\n\
               303,2026-10-12,1,paid,1.00,2026-10-12T00:00:00Z,\"say \"\"hi\"\"\"\r\n";
    let file = file_with(".csv", csv);
    let args = [
        "post",
        "orders",
        file.path().to_str().unwrap(),
        "--batch-rows",
        "1",
        "--url",
        &app.base,
        "--token",
        ADMIN_TOKEN,
    ];
    let out = idem(&args, b"").await;
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let summary: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(summary["batches"], 3, "{summary}");
    let notes: Vec<String> = sqlx::query_scalar(
        "select note from idem_data.orders where order_id > 300 order by order_id",
    )
    .fetch_all(&app.db)
    .await
    .unwrap();
    assert_eq!(notes, ["two\r\nlines", "plain", "say \"hi\""]);
}
