//! The client commands as a process against the real server.

use std::io::Write;

use serde_json::{json, Value};

use crate::helpers::*;
use crate::support::*;

pub(crate) fn file_with(suffix: &str, text: &str) -> tempfile::NamedTempFile {
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

/// What the test proxy does to one connection.
#[derive(Clone, Copy, Debug)]
enum Cut {
    /// Passes it through.
    Nothing,
    /// Passes the request's head and a little of its body, then hangs up
    /// on both sides.
    RequestMidway,
    /// Passes the whole request, then the first bytes of the answer, then
    /// hangs up.
    AnswerMidway,
    /// Passes it through, each chunk of the request held back this long.
    Slow(std::time::Duration),
}

/// A TCP proxy in front of `upstream`: its n-th connection (from 0) is
/// treated as `plan[n]` says, those past the plan as `after`. Its URL.
async fn proxy(upstream: &str, plan: Vec<Cut>, after: Cut) -> String {
    let upstream = upstream.trim_start_matches("http://").to_string();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move {
        for n in 0.. {
            let Ok((client, _)) = listener.accept().await else {
                return;
            };
            let cut = plan.get(n).copied().unwrap_or(after);
            tokio::spawn(relay(client, upstream.clone(), cut));
        }
    });
    url
}

async fn relay(mut client: tokio::net::TcpStream, upstream: String, cut: Cut) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let Ok(mut server) = tokio::net::TcpStream::connect(&upstream).await else {
        return;
    };
    match cut {
        Cut::Nothing => {
            let _ = tokio::io::copy_bidirectional(&mut client, &mut server).await;
        }
        Cut::RequestMidway => {
            let mut seen = Vec::new();
            let mut buf = [0u8; 16 * 1024];
            while let Ok(n @ 1..) = client.read(&mut buf).await {
                seen.extend_from_slice(&buf[..n]);
                if let Some(head) = seen.windows(4).position(|w| w == b"\r\n\r\n") {
                    let upto = (head + 4 + 512).min(seen.len());
                    let _ = server.write_all(&seen[..upto]).await;
                    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                    return;
                }
            }
        }
        Cut::AnswerMidway => {
            let (mut from_client, mut to_client) = client.split();
            let (mut from_server, mut to_server) = server.split();
            let answer_start = async {
                let mut buf = [0u8; 12];
                if let Ok(n) = from_server.read(&mut buf).await {
                    let _ = to_client.write_all(&buf[..n]).await;
                }
            };
            tokio::select! {
                _ = tokio::io::copy(&mut from_client, &mut to_server) => {}
                _ = answer_start => {}
            }
        }
        Cut::Slow(delay) => {
            let (mut from_client, mut to_client) = client.into_split();
            let (mut from_server, mut to_server) = server.into_split();
            let answers = tokio::spawn(async move {
                let _ = tokio::io::copy(&mut from_server, &mut to_client).await;
            });
            let mut buf = [0u8; 16 * 1024];
            while let Ok(n @ 1..) = from_client.read(&mut buf).await {
                tokio::time::sleep(delay).await;
                if to_server.write_all(&buf[..n]).await.is_err() {
                    break;
                }
            }
            let _ = to_server.shutdown().await;
            let _ = answers.await;
        }
    }
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

async fn wait_for_published_loads(app: &TestApp, table: &str, at_least: i64) {
    for _ in 0..300 {
        let loads: i64 = sqlx::query_scalar(
            "select count(*) from idem.loads where table_name = $1 and status = 'published'",
        )
        .bind(table)
        .fetch_one(&app.db)
        .await
        .unwrap();
        if loads >= at_least {
            return;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    panic!("{table}: fewer than {at_least} loads after 15 s");
}

/// A day's orders as CSV without the partition column (rows take the day
/// they are PUT to): `rows` orders, ids from `first`.
fn day_csv(first: u64, rows: u64) -> String {
    let mut csv = String::from("order_id,customer_id,status,amount,updated_at\n");
    for id in first..first + rows {
        csv.push_str(&format!("{id},7,paid,1.50,2026-11-01T00:00:00Z\n"));
    }
    csv
}

/// `idem` with the server's flags after `args`; its exit code and stdout
/// as JSON (null when it is not).
pub(crate) async fn idem_json(app_url: &str, args: &[&str]) -> (Option<i32>, Value, String) {
    idem_json_in(app_url, args, b"").await
}

/// `idem_json` with `stdin` on the standard input.
pub(crate) async fn idem_json_in(
    app_url: &str,
    args: &[&str],
    stdin: &[u8],
) -> (Option<i32>, Value, String) {
    let mut all: Vec<&str> = args.to_vec();
    all.extend(["--url", app_url, "--token", ADMIN_TOKEN, "--quiet"]);
    let out = idem(&all, stdin).await;
    let stdout = serde_json::from_slice(&out.stdout).unwrap_or(Value::Null);
    (
        out.status.code(),
        stdout,
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Each partition's `result` in a backfill's JSON, in order.
pub(crate) fn results(report: &Value) -> Vec<(String, String)> {
    report
        .as_array()
        .unwrap_or(&Vec::new())
        .iter()
        .map(|p| {
            let text = |f: &str| p[f].as_str().unwrap_or("").to_string();
            (text("ds"), text("result"))
        })
        .collect()
}

#[tokio::test]
async fn idem_backfill_loads_a_range_goes_on_past_a_failing_day_and_a_rerun_loads_only_the_rest() {
    let app = spawn_app().await;
    app.declare_orders().await;
    let dir = tempfile::tempdir().unwrap();
    let write =
        |ds: &str, text: &str| std::fs::write(dir.path().join(format!("ds={ds}.csv")), text);
    write("2026-11-01", &day_csv(1, 10)).unwrap();
    write("2026-11-02", &day_csv(100, 20)).unwrap();
    // 03 has no file; 04 has a bad row.
    write(
        "2026-11-04",
        &(day_csv(200, 5) + "x,7,paid,1.50,2026-11-01T00:00:00Z\n"),
    )
    .unwrap();
    write("2026-11-05", &day_csv(300, 30)).unwrap();
    let pattern = dir.path().join("ds={ds}.csv");
    let pattern = pattern.to_str().unwrap();
    let backfill = [
        "backfill",
        "orders",
        "--from",
        "2026-11-01",
        "--to",
        "2026-11-05",
        "--files",
        pattern,
        "--parallel",
        "2",
        "--json",
    ];
    let (code, report, stderr) = idem_json(&app.base, &backfill).await;
    assert_eq!(code, Some(1), "a refused day makes the exit 1: {stderr}");
    let expected = |states: [&str; 5]| -> Vec<(String, String)> {
        (1..=5)
            .map(|d| format!("2026-11-0{d}"))
            .zip(states.map(str::to_string))
            .collect()
    };
    assert_eq!(
        results(&report),
        expected(["changed", "changed", "missing_file", "refused", "changed"])
    );
    assert!(
        stderr.contains("line 7"),
        "the refusal names the line: {stderr}"
    );
    for (ds, rows) in [
        ("2026-11-01", 10),
        ("2026-11-02", 20),
        ("2026-11-04", 0),
        ("2026-11-05", 30),
    ] {
        assert_eq!(app.count("orders", ds).await, rows, "{ds}");
    }

    // Fixed, run again: only day 04 is loaded; the rest are answered from
    // the server's records.
    write("2026-11-04", &day_csv(200, 5)).unwrap();
    let (code, report, stderr) = idem_json(&app.base, &backfill).await;
    assert_eq!(code, Some(0), "{stderr}");
    assert_eq!(
        results(&report),
        expected([
            "unchanged",
            "unchanged",
            "missing_file",
            "changed",
            "unchanged"
        ])
    );
    assert_eq!(report[0]["replayed"], true);
    assert_eq!(report[3]["rows"], 5);
    let with_required = [&backfill[..], &["--require-files"]].concat();
    let (code, _, _) = idem_json(&app.base, &with_required).await;
    assert_eq!(
        code,
        Some(3),
        "a missing file is a failure when files are required"
    );

    // The closing table for people.
    let (code, _, _) = idem_json(
        &app.base,
        &[
            "backfill",
            "orders",
            "--from",
            "2026-11-05",
            "--to",
            "2026-11-01",
            "--files",
            pattern,
        ],
    )
    .await;
    assert_eq!(code, Some(3), "a range that ends before it starts");
    let mut args = backfill[..backfill.len() - 1].to_vec();
    args.extend(["--url", &app.base, "--token", ADMIN_TOKEN]);
    let out = idem(&args, b"").await;
    let table = String::from_utf8_lossy(&out.stdout);
    assert!(
        table.contains("ds") && table.contains("missing file") && table.contains("2026-11-05"),
        "{table}"
    );
}

#[tokio::test]
async fn a_month_backfilled_killed_and_run_again_ends_with_each_day_loaded_once() {
    let app = spawn_app().await;
    app.declare_orders().await;
    let dir = tempfile::tempdir().unwrap();
    for day in 1..=30u64 {
        let file = dir.path().join(format!("ds=2026-11-{day:02}.csv"));
        std::fs::write(file, day_csv(day * 1000, day)).unwrap();
    }
    let pattern = dir.path().join("ds={ds}.csv");
    let pattern = pattern.to_str().unwrap();
    let slow = Cut::Slow(std::time::Duration::from_millis(100));
    let url = proxy(&app.base, vec![], slow).await;
    let args = |url: &str| {
        [
            "backfill",
            "orders",
            "--from",
            "2026-11-01",
            "--to",
            "2026-11-30",
            "--files",
            pattern,
            "--parallel",
            "2",
            "--json",
            "--url",
            url,
            "--token",
            ADMIN_TOKEN,
        ]
        .map(str::to_string)
    };
    let running = spawn_idem(&args(&url));
    wait_for_published_loads(&app, "orders", 5).await;
    kill(running).await;
    tokio::time::sleep(std::time::Duration::from_millis(1000)).await;
    let loaded_before = published_days(&app).await.len();
    assert!(loaded_before < 30, "killed before the end");

    let args = args(&app.base);
    let out = idem(&args.each_ref().map(String::as_str), b"").await;
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    let results = results(&report);
    let changed = results.iter().filter(|(_, r)| r == "changed").count();
    let unchanged = results.iter().filter(|(_, r)| r == "unchanged").count();
    assert_eq!(
        (changed + unchanged, unchanged),
        (30, loaded_before),
        "{report}"
    );
    // Every day once: one published load each, and its rows.
    let days = published_days(&app).await;
    assert_eq!(days.len(), 30);
    assert!(days.iter().all(|(_, loads)| *loads == 1), "{days:?}");
    for day in 1..=30 {
        let ds = format!("2026-11-{day:02}");
        assert_eq!(app.count("orders", &ds).await, day, "{ds}");
    }
}

/// Each day with a published load of `orders`, and how many it has.
async fn published_days(app: &TestApp) -> Vec<(String, i64)> {
    sqlx::query_as(
        "select ds, count(*) from idem.loads where table_name = 'orders' \
         and status = 'published' group by ds order by ds",
    )
    .fetch_all(&app.db)
    .await
    .unwrap()
}

#[tokio::test]
async fn idem_get_writes_a_partition_put_takes_back_and_the_lists_tell_what_was_loaded() {
    let app = spawn_app().await;
    app.declare_orders().await;
    let file = file_with(".csv", &day_csv(1, 25));
    let path = file.path().to_str().unwrap();
    let (code, receipt, stderr) =
        idem_json(&app.base, &["put", "orders", "2026-11-01", path]).await;
    assert_eq!(code, Some(0), "{stderr}");

    // GET as CSV to a file, PUT it back: the same content.
    let dir = tempfile::tempdir().unwrap();
    let got = dir.path().join("day.csv");
    let got_path = got.to_str().unwrap();
    let get = [
        "get",
        "orders",
        "2026-11-01",
        "--format",
        "csv",
        "-o",
        got_path,
    ];
    let (code, _, stderr) = idem_json(&app.base, &get).await;
    assert_eq!(code, Some(0), "{stderr}");
    let text = std::fs::read_to_string(&got).unwrap();
    assert_eq!(text.lines().count(), 26, "a header and 25 rows: {text}");
    let (code, again, _) = idem_json(&app.base, &["put", "orders", "2026-11-01", got_path]).await;
    assert_eq!(
        (code, &again["changed"]),
        (Some(0), &Value::Bool(false)),
        "{again}"
    );
    // NDJSON on stdout.
    let out = idem(
        &[
            "get",
            "orders",
            "2026-11-01",
            "--url",
            &app.base,
            "--token",
            ADMIN_TOKEN,
        ],
        b"",
    )
    .await;
    let lines: Vec<Value> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect();
    assert_eq!(lines.len(), 25);
    assert_eq!(lines[0]["ds"], "2026-11-01");
    // A partition that is not there: refused, nothing written.
    let missing = dir.path().join("none.csv");
    let get = [
        "get",
        "orders",
        "2026-11-09",
        "-o",
        missing.to_str().unwrap(),
    ];
    let (code, _, _) = idem_json(&app.base, &get).await;
    assert_eq!(code, Some(1));
    assert!(!missing.exists());
    // A place it cannot write to: a usage error at once, not retries.
    let started = std::time::Instant::now();
    let get = ["get", "orders", "2026-11-01", "-o", "/no/such/dir/day.csv"];
    let (code, _, stderr) = idem_json(&app.base, &get).await;
    assert_eq!(code, Some(3), "{stderr}");
    assert!(started.elapsed() < std::time::Duration::from_secs(5));

    let (_, tables, _) = idem_json(&app.base, &["tables", "--json"]).await;
    assert!(
        tables
            .as_array()
            .unwrap()
            .iter()
            .any(|t| t["name"] == "orders"),
        "{tables}"
    );
    let (_, partitions, _) = idem_json(&app.base, &["partitions", "orders", "--json"]).await;
    assert_eq!(partitions[0]["ds"], "2026-11-01");
    assert_eq!(partitions[0]["rows"], 25);
    let (_, loads, _) = idem_json(
        &app.base,
        &["loads", "--table", "orders", "--ds", "2026-11-01", "--json"],
    )
    .await;
    let loads = loads.as_array().unwrap();
    assert_eq!(loads.len(), 2, "the PUT and the PUT back: {loads:?}");
    assert!(loads.iter().any(|l| l["load_id"] == receipt["load_id"]));
    let key = loads
        .iter()
        .find(|l| l["load_id"] == receipt["load_id"])
        .and_then(|l| l["idempotency_key"].as_str())
        .unwrap();
    let (code, record, _) = idem_json(&app.base, &["key", key, "--json"]).await;
    assert_eq!(code, Some(0));
    assert_eq!(
        (&record["status"], &record["load_id"]),
        (&json!("completed"), &receipt["load_id"])
    );
    let (_, limited, _) = idem_json(&app.base, &["loads", "--limit", "1", "--json"]).await;
    assert_eq!(limited.as_array().map(Vec::len), Some(1));
    let out = idem(
        &[
            "partitions",
            "orders",
            "--url",
            &app.base,
            "--token",
            ADMIN_TOKEN,
        ],
        b"",
    )
    .await;
    let table = String::from_utf8_lossy(&out.stdout);
    assert!(
        table.contains("2026-11-01") && table.contains("25"),
        "{table}"
    );
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

#[tokio::test]
async fn the_examples_parse_and_run_twice_shows_plain_inserts_doubling_and_idem_not() {
    let pycache = tempfile::tempdir().unwrap();
    let compiled = tokio::process::Command::new("python3")
        .args([
            "-m",
            "py_compile",
            "examples/airflow_dag.py",
            "examples/dagster_assets.py",
        ])
        .env("PYTHONPYCACHEPREFIX", pycache.path())
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .await
        .unwrap();
    assert!(
        compiled.status.success(),
        "{}",
        String::from_utf8_lossy(&compiled.stderr)
    );

    let app = spawn_app().await;
    let (_, plain_url, _database) = fresh_database_url().await;
    let out = tokio::process::Command::new("bash")
        .arg("examples/run_twice.sh")
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .env("IDEM", env!("CARGO_BIN_EXE_idem"))
        .env("IDEM_URL", &app.base)
        .env("IDEM_TOKEN", ADMIN_TOKEN)
        .env("DATABASE_URL", plain_url)
        .output()
        .await
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        stdout.contains("plain inserts: 3 -> 6; idem: 2 -> 2"),
        "{stdout}"
    );
}
