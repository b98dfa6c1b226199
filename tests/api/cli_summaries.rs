//! What the client says it did: a rerun answered from the server's records
//! wrote nothing, and says so apart from what the earlier run wrote; a
//! write that made an undeclared table warns, and `--no-create` refuses
//! one.

use serde_json::{json, Value};

use crate::cli::*;
use crate::helpers::*;
use crate::support::*;

/// `n` orders of 2026-10-12 as NDJSON.
fn orders_file(n: i64) -> tempfile::NamedTempFile {
    let rows: Vec<Value> = (1..=n)
        .map(|id| order(id, "paid", "2026-10-12T01:00:00Z"))
        .collect();
    file_with(".ndjson", &ndjson(&rows))
}

#[tokio::test]
async fn a_post_run_again_says_it_wrote_nothing_and_what_its_replayed_batches_wrote_before() {
    let app = spawn_app().await;
    app.declare_orders().await;
    let file = orders_file(250);
    let args = ["post", "orders", file.path().to_str().unwrap()];
    let args = [&args[..], &["--batch-rows", "100"]].concat();
    let (code, first, stderr) = idem_json(&app.base, &args).await;
    assert_eq!(code, Some(0), "{stderr}");
    assert_eq!(
        (&first["rows_written"], &first["rows_written_before"]),
        (&Value::from(250), &Value::from(0)),
        "{first}"
    );
    assert!(stderr.contains("(3 new, 0 replayed): 250 rows written by this run\n"));

    let (code, again, stderr) = idem_json(&app.base, &args).await;
    assert_eq!(code, Some(0), "{stderr}");
    assert_eq!(
        (&again["replayed"], &again["rows_written"]),
        (&Value::from(3), &Value::from(0)),
        "{again}"
    );
    assert_eq!(again["rows_written_before"], 250, "{again}");
    assert!(
        stderr.contains(
            "(0 new, 3 replayed): 0 rows written by this run; 250 written before, replayed"
        ),
        "{stderr}"
    );
}

#[tokio::test]
async fn a_put_and_a_backfill_run_again_say_their_replayed_rows_were_written_before() {
    let app = spawn_app().await;
    app.declare_orders().await;
    let file = orders_file(50);
    let put = ["put", "orders", "2026-10-12", file.path().to_str().unwrap()];
    let (code, _, stderr) = idem_json(&app.base, &put).await;
    assert_eq!(code, Some(0), "{stderr}");
    assert!(!stderr.contains("replayed"), "{stderr}");
    let (code, receipt, stderr) = idem_json(&app.base, &put).await;
    assert_eq!((code, &receipt["replayed"]), (Some(0), &Value::from(true)));
    assert!(
        stderr.contains("replayed from the server's record of an earlier run: 0 rows written by this run; 50 written before, replayed"),
        "{stderr}"
    );

    let dir = tempfile::tempdir().unwrap();
    for (d, rows) in [(1, 3), (2, 4)] {
        let path = dir.path().join(format!("ds=2026-11-0{d}.csv"));
        std::fs::write(path, day_csv(d * 100, rows)).unwrap();
    }
    let pattern = dir.path().join("ds={ds}.csv");
    let backfill = [
        "backfill",
        "orders",
        "--from",
        "2026-11-01",
        "--to",
        "2026-11-02",
        "--files",
        pattern.to_str().unwrap(),
        "--json",
    ];
    let (code, _, stderr) = idem_json(&app.base, &backfill).await;
    assert_eq!(code, Some(0), "{stderr}");
    assert!(stderr.contains("2 changed, 0 unchanged (0 replayed), 0 missing file, 0 failed: 7 rows written by this run\n"), "{stderr}");
    let (code, report, stderr) = idem_json(&app.base, &backfill).await;
    assert_eq!(code, Some(0), "{stderr}");
    let written: Vec<Value> = report
        .as_array()
        .unwrap()
        .iter()
        .map(|p| json!([p["replayed"], p["rows_written"], p["rows_written_before"]]))
        .collect();
    let expected = [json!([true, 0, 3]), json!([true, 0, 4])];
    assert_eq!(written, expected, "{report}");
    assert!(
        stderr.contains("0 changed, 2 unchanged (2 replayed), 0 missing file, 0 failed: 0 rows written by this run; 7 written before, replayed"),
        "{stderr}"
    );
}

#[tokio::test]
async fn no_create_refuses_an_undeclared_table_and_a_write_that_makes_one_warns() {
    let app = spawn_app().await;
    app.declare_orders().await;
    let file = orders_file(2);
    let path = file.path().to_str().unwrap();
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("ds=2026-11-01.csv"), day_csv(1, 2)).unwrap();
    let pattern = dir.path().join("ds={ds}.csv");
    let pattern = pattern.to_str().unwrap();
    let range = [
        "--from",
        "2026-11-01",
        "--to",
        "2026-11-01",
        "--files",
        pattern,
    ];
    let commands: [Vec<&str>; 3] = [
        vec!["put", "odrers", "2026-10-12", path],
        vec!["post", "odrers", path],
        [&["backfill", "odrers"][..], &range].concat(),
    ];
    for command in &commands {
        let args = [&command[..], &["--no-create"]].concat();
        let (code, _, stderr) = idem_json(&app.base, &args).await;
        assert_eq!(code, Some(1), "{command:?}: {stderr}");
        assert!(stderr.contains("table_not_found"), "{command:?}: {stderr}");
    }
    assert_eq!(app.get("/tables/odrers").await.status(), 404);

    // Without --no-create the first write makes the table, and says so;
    // the next writes to it do not.
    let (code, receipt, stderr) = idem_json(&app.base, &commands[0]).await;
    assert_eq!(
        (code, &receipt["table_created"]),
        (Some(0), &Value::Bool(true))
    );
    let warning = "idem: warning: table odrers was not declared; this write created it";
    assert!(stderr.contains(warning), "{stderr}");
    for command in &commands[1..] {
        let (code, _, stderr) = idem_json(&app.base, command).await;
        assert_eq!(code, Some(0), "{command:?}: {stderr}");
        assert!(!stderr.contains("warning"), "{command:?}: {stderr}");
    }
    // The table a POST makes warns too; a declared table never does.
    let (code, _, stderr) = idem_json(&app.base, &["post", "clicks", path]).await;
    assert_eq!(code, Some(0), "{stderr}");
    assert!(stderr.contains("table clicks was not declared"), "{stderr}");
    let (_, _, stderr) = idem_json(&app.base, &["post", "orders", path, "--no-create"]).await;
    assert!(!stderr.contains("warning"), "{stderr}");
}
