//! `idem post --channel NAME --offset-from-line` and `idem channels`
//! against the real server: a file grown and posted again sends only its new
//! records, the committed offset is the file's record count, a reset sends
//! everything again, a file shorter than the offset is refused, two
//! producers of one file store each line once; and `--mode versions`
//! reaches the server.

use serde_json::Value;

use crate::cli::{file_with, idem_json};
use crate::helpers::*;

/// No key: a record sent twice would be stored twice.
const LINES: &str = r#"{"columns": {"n": "bigint", "text": "text"}, "partition_by": null}"#;

const KEYED: &str = r#"{"columns": {"n": "bigint", "text": "text"}, "partition_by": null,
  "primary_key": ["n"]}"#;

fn lines_ndjson(first: u64, last: u64) -> String {
    (first..=last)
        .map(|n| format!("{{\"n\": {n}, \"text\": \"line {n}\"}}\n"))
        .collect()
}

async fn declared(app: &TestApp, table: &str, declaration: &str) {
    let r = app.declare(table, declaration).await;
    assert!(r.status().is_success(), "{}", r.text().await.unwrap());
}

/// Rows, and distinct `n`, of a table without partitions.
async fn rows_and_distinct(app: &TestApp, table: &str) -> (i64, i64) {
    sqlx::query_as(&format!(
        "select count(*), count(distinct n) from idem_data.{table}"
    ))
    .fetch_one(&app.db)
    .await
    .unwrap()
}

async fn post_on_channel(app: &TestApp, table: &str, path: &str, channel: &str) -> Value {
    let args = [
        "post",
        table,
        path,
        "--channel",
        channel,
        "--offset-from-line",
        "--batch-rows",
        "100",
    ];
    let (code, summary, stderr) = idem_json(&app.base, &args).await;
    assert_eq!(code, Some(0), "{stderr}");
    summary
}

fn counts(summary: &Value) -> (u64, u64, u64, &str) {
    let count = |field: &str| summary[field].as_u64().unwrap_or(u64::MAX);
    (
        count("batches"),
        count("records_skipped"),
        count("rows_written"),
        summary["committed_offset"].as_str().unwrap_or("?"),
    )
}

#[tokio::test]
async fn a_file_grown_and_posted_again_on_its_channel_sends_only_the_new_lines() {
    let app = spawn_app().await;
    declared(&app, "lines", LINES).await;
    let mut file = file_with(".ndjson", &lines_ndjson(1, 250));
    let path = file.path().to_str().unwrap().to_string();

    let summary = post_on_channel(&app, "lines", &path, "lines-feed").await;
    assert_eq!(counts(&summary), (3, 0, 250, "250"), "{summary}");
    assert_eq!(summary["channel"], "lines-feed");
    assert_eq!(rows_and_distinct(&app, "lines").await, (250, 250));

    // The same file again: every record is committed, nothing is sent.
    let summary = post_on_channel(&app, "lines", &path, "lines-feed").await;
    assert_eq!(counts(&summary), (0, 250, 0, "250"), "{summary}");

    // Grown by 120 lines (a blank line is no record): only those go.
    std::io::Write::write_all(
        &mut file,
        format!("\n{}", lines_ndjson(251, 370)).as_bytes(),
    )
    .unwrap();
    let summary = post_on_channel(&app, "lines", &path, "lines-feed").await;
    assert_eq!(counts(&summary), (2, 250, 120, "370"), "{summary}");
    assert_eq!(rows_and_distinct(&app, "lines").await, (370, 370));

    // `idem channels`: the table, one channel as JSON, the list as JSON.
    let (code, _, stderr) = idem_json(&app.base, &["channels"]).await;
    assert_eq!(code, Some(0), "{stderr}");
    let (code, channel, _) = idem_json(&app.base, &["channels", "lines-feed"]).await;
    assert_eq!(code, Some(0));
    assert_eq!(
        (
            &channel["committed_offset"],
            &channel["table"],
            &channel["commits"]
        ),
        (&Value::from("370"), &Value::from("lines"), &Value::from(5)),
        "{channel}"
    );
    let (_, list, _) = idem_json(&app.base, &["channels", "--json"]).await;
    assert_eq!(list[0]["name"], "lines-feed", "{list}");
}

#[tokio::test]
async fn a_reset_channel_sends_every_record_again_and_a_keyed_table_keeps_one_row_each() {
    let app = spawn_app().await;
    declared(&app, "keyed", KEYED).await;
    // CSV: the records after the header count from 1.
    let csv: String = std::iter::once("n,text\n".to_string())
        .chain((1..=150).map(|n| format!("{n},\"line {n}\"\n")))
        .collect();
    let file = file_with(".csv", &csv);
    let path = file.path().to_str().unwrap().to_string();
    let summary = post_on_channel(&app, "keyed", &path, "keyed-feed").await;
    assert_eq!(counts(&summary), (2, 0, 150, "150"), "{summary}");

    let (code, reset, stderr) = idem_json(&app.base, &["channels", "keyed-feed", "--reset"]).await;
    assert_eq!(
        (code, &reset["reset"]),
        (Some(0), &Value::Bool(true)),
        "{stderr}"
    );
    let (code, _, stderr) = idem_json(&app.base, &["channels", "keyed-feed"]).await;
    assert_eq!(code, Some(1), "nothing committed after a reset");
    assert!(stderr.contains("channel_not_found"), "{stderr}");

    let summary = post_on_channel(&app, "keyed", &path, "keyed-feed").await;
    assert_eq!(
        (
            summary["batches"].as_u64(),
            summary["records_skipped"].as_u64()
        ),
        (Some(2), Some(0)),
        "{summary}"
    );
    assert_eq!(summary["committed_offset"], "150");
    assert_eq!(rows_and_distinct(&app, "keyed").await, (150, 150));

    // A file with fewer records than the channel committed is not its
    // file: refused as a usage error, nothing sent.
    let short = file_with(".csv", "n,text\n1,a\n");
    let args = [
        "post",
        "keyed",
        short.path().to_str().unwrap(),
        "--channel",
        "keyed-feed",
        "--offset-from-line",
    ];
    let (code, _, stderr) = idem_json(&app.base, &args).await;
    assert_eq!(code, Some(3), "{stderr}");
    assert!(stderr.contains("committed 150 records"), "{stderr}");
    let (code, _, _) = idem_json(&app.base, &["post", "keyed", &path, "--channel", "c"]).await;
    assert_eq!(code, Some(3), "--channel needs --offset-from-line");
}

#[tokio::test]
async fn two_producers_of_one_file_on_one_channel_store_each_line_once() {
    let app = spawn_app().await;
    declared(&app, "lines", LINES).await;
    let file = file_with(".ndjson", &lines_ndjson(1, 2000));
    let path = file.path().to_str().unwrap();
    let args = [
        "post",
        "lines",
        path,
        "--channel",
        "shared",
        "--offset-from-line",
        "--batch-rows",
        "50",
    ];
    let (first, second) = tokio::join!(idem_json(&app.base, &args), idem_json(&app.base, &args));
    let mut new = 0;
    for (code, summary, stderr) in [first, second] {
        assert_eq!(code, Some(0), "{stderr}");
        assert_eq!(summary["committed_offset"], "2000", "{summary}");
        new += summary["new"].as_u64().unwrap();
    }
    // A batch the other producer committed first was answered
    // `"committed": false`: counted as replayed, its rows not written again.
    assert_eq!(new, 40, "each of the 40 batches written by one producer");
    assert_eq!(rows_and_distinct(&app, "lines").await, (2000, 2000));
}

#[tokio::test]
async fn idem_post_sends_mode_versions_to_the_server() {
    let app = spawn_app().await;
    declared(&app, "keyed", KEYED).await;
    // `keyed` keeps no versions: the server refuses the mode, by its name.
    let file = file_with(".ndjson", &lines_ndjson(1, 3));
    let args = [
        "post",
        "keyed",
        file.path().to_str().unwrap(),
        "--mode",
        "versions",
    ];
    let (code, _, stderr) = idem_json(&app.base, &args).await;
    assert_eq!(code, Some(1), "{stderr}");
    assert!(
        stderr.contains("HTTP 400") && stderr.contains("versions"),
        "{stderr}"
    );
    assert_eq!(rows_and_distinct(&app, "keyed").await, (0, 0));
}
