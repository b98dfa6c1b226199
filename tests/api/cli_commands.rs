//! The client's commands for what the API does beyond loading files:
//! `idem declare`, `idem drop`, `--bad-rows`, `idem rejects`, `idem replay`,
//! `--if-match`; and how it says what went wrong (a 401, a backfill that
//! found no file, a batch's number).

use serde_json::{json, Value};

use crate::cli::{file_with, idem_json};
use crate::helpers::*;
use crate::support::*;

#[tokio::test]
async fn idem_declare_creates_a_table_from_a_json_file_and_a_second_run_changes_nothing() {
    let app = spawn_app().await;
    let declaration = file_with(".json", ORDERS);
    let args = ["declare", "orders", declaration.path().to_str().unwrap()];
    let (code, table, stderr) = idem_json(&app.base, &args).await;
    assert_eq!(code, Some(0), "{stderr}");
    assert_eq!(
        (table["name"].as_str(), table["changes"].clone()),
        (Some("orders"), json!([]))
    );
    assert_eq!(app.get("/tables/orders").await.status(), 200);
    let (code, table, _) = idem_json(&app.base, &args).await;
    assert_eq!((code, table["changes"].clone()), (Some(0), json!([])));

    let wrong = file_with(".json", r#"{"columns": {"id": "money"}}"#);
    let args = ["declare", "other", wrong.path().to_str().unwrap()];
    let (code, _, stderr) = idem_json(&app.base, &args).await;
    assert_eq!(code, Some(1), "{stderr}");
    assert!(stderr.contains("invalid_declaration"), "{stderr}");
    let (code, _, _) = idem_json(&app.base, &["declare", "other", "/no/such.json"]).await;
    assert_eq!(code, Some(3));
}

#[tokio::test]
async fn idem_drop_drops_a_table_and_running_it_again_is_done_too() {
    let app = spawn_app().await;
    app.declare_orders().await;
    let r = app
        .put_ndjson(
            "/partitions/orders/2026-10-12",
            &[order(1, "paid", "2026-10-12T01:00:00Z")],
        )
        .await;
    assert_eq!(r.status(), 200);
    for _ in 0..2 {
        let (code, _, stderr) = idem_json(&app.base, &["drop", "orders"]).await;
        assert_eq!(code, Some(0), "{stderr}");
        assert!(stderr.contains("orders: dropped"), "{stderr}");
    }
    assert_eq!(app.get("/tables/orders").await.status(), 404);
    let loads = json_body(app.get("/loads?table=orders").await).await;
    assert_eq!(loads[0]["mode"], "drop");
    assert_eq!(loads[1]["dropped_by"], loads[0]["load_id"]);
}

/// A day of orders whose second line is bad (`order_id` is no bigint).
fn day_with_a_bad_row() -> String {
    format!(
        "{}{{\"order_id\":\"x\",\"ds\":\"2026-10-12\",\"channel\":\"web\"}}\n",
        ndjson(&[order(1, "paid", "2026-10-12T01:00:00Z")])
    )
}

#[tokio::test]
async fn bad_rows_quarantine_on_put_and_post_keeps_the_bad_rows_for_idem_rejects_and_idem_replay() {
    let app = spawn_app().await;
    app.declare_orders().await;
    let file = file_with(".ndjson", &day_with_a_bad_row());
    let path = file.path().to_str().unwrap();
    let (code, _, stderr) = idem_json(&app.base, &["put", "orders", "2026-10-12", path]).await;
    assert_eq!(code, Some(1), "the table's policy refuses it: {stderr}");
    // The same file under --bad-rows quarantine is another request.
    let args = [
        "put",
        "orders",
        "2026-10-12",
        path,
        "--bad-rows",
        "quarantine",
    ];
    let (code, receipt, stderr) = idem_json(&app.base, &args).await;
    assert_eq!(code, Some(0), "{stderr}");
    assert_eq!(
        (
            receipt["rows_written"].as_u64(),
            receipt["rejected"].as_u64()
        ),
        (Some(1), Some(1))
    );

    let post = file_with(".ndjson", "{\"order_id\":\"y\",\"ds\":\"2026-10-12\"}\n");
    let args = [
        "post",
        "orders",
        post.path().to_str().unwrap(),
        "--bad-rows",
        "quarantine",
    ];
    let (code, summary, stderr) = idem_json(&app.base, &args).await;
    assert_eq!(code, Some(0), "{stderr}");
    assert_eq!(summary["rows_written"], 0, "{summary}");

    let (code, rejects, _) = idem_json(&app.base, &["rejects", "orders", "--json"]).await;
    assert_eq!(code, Some(0));
    let statuses: Vec<&str> = rejects
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["status"].as_str().unwrap())
        .collect();
    assert_eq!(statuses, ["pending", "pending"], "{rejects}");
    let out = idem(
        &[
            "rejects",
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
    assert!(table.contains("order_id: expected bigint"), "{table}");

    // Once the table fits the PUT's row (its id still does not), a replay
    // writes it; each run is a request of its own.
    let wider = ORDERS.replace(
        "\"note\": \"text\"",
        "\"note\": \"text\", \"channel\": \"text\"",
    );
    assert_eq!(app.declare("orders", &wider).await.status(), 200);
    let (code, first, stderr) = idem_json(&app.base, &["replay", "orders"]).await;
    assert_eq!(code, Some(0), "{stderr}");
    assert_eq!(
        (first["tried"].as_u64(), first["rows_replayed"].as_u64()),
        (Some(2), Some(0)),
        "{first}"
    );
    let (_, second, _) = idem_json(&app.base, &["replay", "orders"]).await;
    assert_eq!(second["tried"], 2, "a new key, so a new replay: {second}");
    assert_ne!(first["load_ids"], second["load_ids"]);
    let (_, given, _) = idem_json(&app.base, &["replay", "orders", "--key", "fix-1"]).await;
    let (_, again, stderr) = idem_json(&app.base, &["replay", "orders", "--key", "fix-1"]).await;
    assert_eq!(
        given["load_ids"], again["load_ids"],
        "the key given is the request"
    );
    // Answered from the record of the run before: it counts nothing as
    // this run's.
    let counts = |summary: &Value| {
        (
            summary["tried"].clone(),
            summary["calls_answered_before"].clone(),
        )
    };
    assert_eq!(counts(&given), (json!(2), json!(0)), "{given}");
    assert_eq!(counts(&again), (json!(0), json!(1)), "{again}");
    assert!(
        stderr.contains("1 of 1 calls answered from the server's record"),
        "{stderr}"
    );
    let (_, pending, _) = idem_json(
        &app.base,
        &["rejects", "orders", "--status", "pending", "--json"],
    )
    .await;
    let tries: Vec<u64> = pending
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["tries"].as_u64().unwrap())
        .collect();
    assert_eq!(tries, [4, 4], "{pending}");
}

#[tokio::test]
async fn idem_put_with_if_match_replaces_only_the_version_it_names() {
    let app = spawn_app().await;
    app.declare_orders().await;
    let first = file_with(
        ".ndjson",
        &ndjson(&[order(1, "paid", "2026-10-12T01:00:00Z")]),
    );
    let args = [
        "put",
        "orders",
        "2026-10-12",
        first.path().to_str().unwrap(),
    ];
    let (_, receipt, _) = idem_json(&app.base, &args).await;
    let etag = receipt["content_sha256"].as_str().unwrap().to_string();

    let second = file_with(
        ".ndjson",
        &ndjson(&[order(2, "paid", "2026-10-12T01:00:00Z")]),
    );
    let path = second.path().to_str().unwrap();
    let wrong = "0".repeat(64);
    let args = ["put", "orders", "2026-10-12", path, "--if-match", &wrong];
    let (code, _, stderr) = idem_json(&app.base, &args).await;
    assert_eq!(code, Some(1), "{stderr}");
    assert!(stderr.contains("precondition_failed"), "{stderr}");
    let args = ["put", "orders", "2026-10-12", path, "--if-match", &etag];
    let (code, receipt, stderr) = idem_json(&app.base, &args).await;
    assert_eq!(code, Some(0), "{stderr}");
    assert_eq!(receipt["changed"], true);
    let rows = app.rows("orders", "2026-10-12").await;
    assert_eq!(
        rows.iter()
            .map(|r| r["order_id"].clone())
            .collect::<Vec<Value>>(),
        [json!(2)]
    );
}

#[tokio::test]
async fn a_401_tells_the_user_to_set_idem_token() {
    let app = spawn_app().await;
    let out = idem(&["tables", "--url", &app.base], b"").await;
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("set IDEM_TOKEN"), "{stderr}");
    let wrong = [
        "loads",
        "--url",
        &app.base,
        "--token",
        "idem_wrong-0000000000000000000000000000",
    ];
    let out = idem(&wrong, b"").await;
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("did not accept the token") && stderr.contains("IDEM_TOKEN"),
        "{stderr}"
    );
}

#[tokio::test]
async fn idem_backfill_exits_3_when_not_one_file_of_the_range_is_found() {
    let app = spawn_app().await;
    app.declare_orders().await;
    let dir = tempfile::tempdir().unwrap();
    let files = format!("{}/ds={{ds}}.ndjson", dir.path().display());
    let args = [
        "backfill",
        "orders",
        "--from",
        "2026-11-01",
        "--to",
        "2026-11-03",
        "--files",
        &files,
        "--json",
    ];
    let (code, report, stderr) = idem_json(&app.base, &args).await;
    assert_eq!(code, Some(3), "{stderr}");
    assert!(
        stderr.contains("no file of the range was found"),
        "{stderr}"
    );
    assert_eq!(report.as_array().map(Vec::len), Some(3));

    // One file of three: the others are only reported.
    let day = ndjson(&[json!({"order_id": 1, "ds": "2026-11-02"})]);
    std::fs::write(dir.path().join("ds=2026-11-02.ndjson"), day).unwrap();
    let (code, _, stderr) = idem_json(&app.base, &args).await;
    assert_eq!(code, Some(0), "{stderr}");
}

#[tokio::test]
async fn idem_post_counts_its_batches_from_1() {
    let app = spawn_app().await;
    app.declare_orders().await;
    let rows = format!(
        "{}{{\"order_id\":\"x\",\"ds\":\"2026-10-12\"}}\n",
        ndjson(&[order(1, "paid", "2026-10-12T01:00:00Z")])
    );
    let file = file_with(".ndjson", &rows);
    let args = [
        "post",
        "orders",
        file.path().to_str().unwrap(),
        "--batch-rows",
        "1",
    ];
    let (code, _, stderr) = idem_json(&app.base, &args).await;
    assert_eq!(code, Some(1), "{stderr}");
    assert!(
        stderr.contains("orders batch 2 (lines 2-2 of the file)"),
        "{stderr}"
    );
}

#[tokio::test]
async fn idem_serve_refuses_zero_worker_threads_before_it_starts() {
    let args = [
        "serve",
        "--database-url",
        "postgres://nobody@127.0.0.1:1/none",
        "--worker-threads",
        "0",
    ];
    let out = idem(&args, b"").await;
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(3), "{stderr}");
    assert!(stderr.contains("--worker-threads"), "{stderr}");
}

#[tokio::test]
async fn idem_tables_shows_whole_for_a_table_without_partitions_and_counts_the_others() {
    let app = spawn_app().await;
    app.declare_orders().await;
    let r = app
        .declare(
            "notes",
            r#"{"columns": {"note": "text"}, "partition_by": null}"#,
        )
        .await;
    assert_eq!(r.status(), 201);
    let out = idem(&["tables", "--url", &app.base, "--token", ADMIN_TOKEN], b"").await;
    let printed = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{printed}");
    let line = |table: &str| {
        let found = printed.lines().find(|l| l.contains(&format!(" {table} ")));
        found
            .unwrap_or_else(|| panic!("no {table} in {printed}"))
            .to_string()
    };
    // Table, partitions, rows, grain: the first words of a row.
    let words = |line: String| -> Vec<String> {
        let words = line.split_whitespace().filter(|w| *w != "│");
        words.take(4).map(str::to_string).collect()
    };
    assert_eq!(
        words(line("notes")),
        ["notes", "whole", "0", "whole"],
        "{printed}"
    );
    assert_eq!(
        words(line("orders")),
        ["orders", "0", "0", "day"],
        "{printed}"
    );
    // As JSON, the count the server sent.
    let (_, tables, _) = idem_json(&app.base, &["tables", "--json"]).await;
    let notes = tables
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["name"] == "notes");
    assert_eq!(notes.unwrap()["partitions"], 0);
}
