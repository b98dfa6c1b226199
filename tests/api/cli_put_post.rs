//! `idem put` and `idem post` as a process against the real server: a file
//! loaded once and a rerun replayed, exit codes, a server that starts late,
//! batches sent once through cut connections and after a killed run.

use serde_json::{json, Value};

use crate::cli::*;
use crate::helpers::*;
use crate::support::*;

#[tokio::test]
async fn idem_put_loads_a_file_once_and_a_rerun_is_a_replay() {
    let app = spawn_app().await;
    app.declare_orders().await;
    let rows: Vec<Value> = (1..=50)
        .map(|id| order(id, "paid", "2026-10-12T01:00:00Z"))
        .collect();
    let file = file_with(".ndjson", &ndjson(&rows));
    let path = file.path().to_str().unwrap();
    let args = ["put", "orders", "2026-10-12", path];
    let (code, receipt, stderr) = idem_json(&app.base, &args).await;
    assert_eq!(code, Some(0), "{stderr}");
    assert_eq!(
        (
            receipt["rows_written"].as_u64(),
            receipt["replayed"].as_bool()
        ),
        (Some(50), Some(false))
    );
    assert_eq!(app.count("orders", "2026-10-12").await, 50);

    // The same command again: the same key, answered from its record.
    let (code, receipt, _) = idem_json(&app.base, &args).await;
    assert_eq!(code, Some(0));
    assert_eq!(receipt["replayed"], true);

    // Stdin, gzipped CSV, with --format.
    let csv = "order_id,ds,customer_id,status,amount,updated_at,note\n7,2026-10-13,1,paid,1.00,2026-10-13T00:00:00Z,\n";
    let stdin_args = ["put", "orders", "2026-10-13", "-", "--format", "csv.gz"];
    let (code, _, stderr) = idem_json_in(&app.base, &stdin_args, &gzip(csv.as_bytes())).await;
    assert_eq!(code, Some(0), "{stderr}");
    assert_eq!(app.count("orders", "2026-10-13").await, 1);
}

#[tokio::test]
async fn idem_put_exits_1_when_refused_2_when_it_gives_up_3_on_a_wrong_command() {
    let app = spawn_app().await;
    app.declare_orders().await;
    let bad = file_with(".ndjson", "{\"order_id\": \"x\", \"ds\": \"2026-10-12\"}\n");
    let path = bad.path().to_str().unwrap();
    let (code, _, stderr) = idem_json(&app.base, &["put", "orders", "2026-10-12", path]).await;
    assert_eq!(code, Some(1));
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
    let out = idem(&["post", "orders", "x.ndjson", "--mode", "upsert"], b"").await;
    // (clap refuses it before the file is looked at)
    assert_eq!(
        out.status.code(),
        Some(3),
        "an unknown mode, before anything is sent"
    );
    let good_path = good.path().to_str().unwrap();
    let out = idem(&["post", "orders", good_path, "--url", "not a url"], b"").await;
    assert_eq!(out.status.code(), Some(3));
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
    let args = ["post", "orders", path, "--batch-rows", "100"];
    let (code, summary, stderr) = idem_json(&app.base, &args).await;
    assert_eq!(code, Some(0), "{stderr}");
    assert_eq!(
        (
            summary["batches"].as_u64(),
            summary["new"].as_u64(),
            summary["rows_written"].as_u64()
        ),
        (Some(3), Some(3), Some(250)),
        "{summary}"
    );
    let (_, summary, _) = idem_json(&app.base, &args).await;
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
    ];
    let (code, summary, stderr) = idem_json(&app.base, &args).await;
    assert_eq!(code, Some(0), "{stderr}");
    assert_eq!(summary["batches"], 3, "{summary}");
    let notes: Vec<String> = sqlx::query_scalar(
        "select note from idem_data.orders where order_id > 300 order by order_id",
    )
    .fetch_all(&app.db)
    .await
    .unwrap();
    assert_eq!(notes, ["two\r\nlines", "plain", "say \"hi\""]);
}

/// `n` rows of a feed with no key (so a row written twice would show),
/// each about 150 bytes, as NDJSON.
fn feed_rows(n: u64) -> String {
    (1..=n)
        .map(|id| {
            format!(
                "{}\n",
                json!({"id": id, "ds": "2026-10-12", "note": format!("row {id} {}", "x".repeat(100))})
            )
        })
        .collect()
}

/// Published loads of `table` in the ledger, and its rows (all, distinct).
async fn ledger_and_rows(app: &TestApp, table: &str) -> (i64, i64, i64) {
    let loads: i64 = sqlx::query_scalar(
        "select count(*) from idem.loads where table_name = $1 and status = 'published'",
    )
    .bind(table)
    .fetch_one(&app.db)
    .await
    .unwrap();
    let (rows, distinct): (i64, i64) = sqlx::query_as(&format!(
        "select count(*), count(distinct id) from idem_data.{table}"
    ))
    .fetch_one(&app.db)
    .await
    .unwrap();
    (loads, rows, distinct)
}

fn post_args<'a>(table: &'a str, file: &'a str, url: &'a str) -> Vec<&'a str> {
    vec![
        "post",
        table,
        file,
        "--mode",
        "append",
        "--batch-rows",
        "100",
        "--url",
        url,
        "--token",
        ADMIN_TOKEN,
    ]
}

#[tokio::test]
async fn idem_post_through_connections_cut_mid_body_and_mid_answer_writes_every_batch_once() {
    let app = spawn_app().await;
    let file = file_with(".ndjson", &feed_rows(500));
    let plan = vec![
        Cut::RequestMidway,
        Cut::AnswerMidway,
        Cut::Nothing,
        Cut::RequestMidway,
        Cut::AnswerMidway,
        Cut::AnswerMidway,
        Cut::RequestMidway,
    ];
    let url = proxy(&app.base, plan, Cut::Nothing).await;
    let args = post_args("cut_feed", file.path().to_str().unwrap(), &url);
    let out = idem(&args, b"").await;
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert!(stderr.contains("retrying"), "{stderr}");
    let summary: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(summary["batches"], 5, "{summary}");
    assert!(
        summary["replayed"].as_u64() >= Some(1),
        "an answer cut off is answered again from the record: {summary}"
    );
    // Appended without a key: a batch written twice would show.
    assert_eq!(ledger_and_rows(&app, "cut_feed").await, (5, 500, 500));
}

#[tokio::test]
async fn a_killed_idem_post_run_again_sends_only_the_batches_the_server_lacks() {
    let app = spawn_app().await;
    let file = file_with(".ndjson", &feed_rows(1000));
    let path = file.path().to_str().unwrap();
    let slow = Cut::Slow(std::time::Duration::from_millis(150));
    let url = proxy(&app.base, vec![], slow).await;
    let running = spawn_idem(&post_args("killed_feed", path, &url));
    wait_for_published_loads(&app, "killed_feed", 3).await;
    kill(running).await;
    // What was in flight settles (the proxy still holds its last chunk).
    tokio::time::sleep(std::time::Duration::from_millis(1500)).await;
    let (loaded_before, rows_before, _) = ledger_and_rows(&app, "killed_feed").await;
    assert!((3..10).contains(&loaded_before), "{loaded_before} batches");
    assert_eq!(rows_before, loaded_before * 100);

    let out = idem(&post_args("killed_feed", path, &app.base), b"").await;
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let summary: Value = serde_json::from_slice(&out.stdout).unwrap();
    let loaded_before = u64::try_from(loaded_before).unwrap();
    assert_eq!(
        (summary["replayed"].as_u64(), summary["new"].as_u64()),
        (Some(loaded_before), Some(10 - loaded_before)),
        "{summary}"
    );
    assert_eq!(ledger_and_rows(&app, "killed_feed").await, (10, 1000, 1000));
}

#[tokio::test]
async fn idem_post_splits_a_json_array_into_batches_keeping_every_value() {
    let app = spawn_app().await;
    app.declare_orders().await;
    // Elements spread over lines, strings holding brackets, commas, quotes.
    let rows: Vec<String> = (1..=25)
        .map(|id| {
            format!(
                "{{\n  \"order_id\": {id}, \"ds\": \"2026-10-12\",\n  \"note\": \"[{id}], \\\"x\\\", {{y}}\"\n}}"
            )
        })
        .collect();
    let file = file_with(".json", &format!(" [\n{}\n]\n", rows.join(" ,\n")));
    let path = file.path().to_str().unwrap();
    let (code, summary, stderr) =
        idem_json(&app.base, &["post", "orders", path, "--batch-rows", "10"]).await;
    assert_eq!(code, Some(0), "{stderr}");
    assert_eq!(
        (&summary["batches"], &summary["rows_written"]),
        (&json!(3), &json!(25))
    );
    let note: String = sqlx::query_scalar("select note from idem_data.orders where order_id = 7")
        .fetch_one(&app.db)
        .await
        .unwrap();
    assert_eq!(note, "[7], \"x\", {y}");
    let broken = file_with(".json", "[{\"order_id\": 1}, {\"order_id\": 2");
    let (code, _, stderr) = idem_json(
        &app.base,
        &["post", "orders", broken.path().to_str().unwrap()],
    )
    .await;
    assert_eq!(code, Some(3), "{stderr}");
}
