//! The client's load commands as a process against the real server: `idem
//! backfill --atomic` (a week as one load), `idem load` step by step,
//! `idem put --whole` (a full refresh of a table without partitions) and
//! `idem put --dry-run`.

use serde_json::{json, Value};

use crate::cli::*;
use crate::helpers::*;
use crate::support::*;

/// `idem` with the server's flags after `args`: its exit code, stdout and
/// stderr as text.
async fn idem_text(app: &TestApp, args: &[&str]) -> (Option<i32>, String, String) {
    let mut all: Vec<&str> = args.to_vec();
    all.extend(["--url", &app.base, "--token", ADMIN_TOKEN, "--quiet"]);
    let out = idem(&all, b"").await;
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// A path `name` in a new directory (kept while the first is).
fn dir_file(name: &str) -> (tempfile::TempDir, std::path::PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join(name);
    (dir, path)
}

/// The `order_id`s of a partition, sorted.
async fn ids(app: &TestApp, ds: &str) -> Vec<i64> {
    let mut ids: Vec<i64> = app
        .rows("orders", ds)
        .await
        .iter()
        .map(|row| row["order_id"].as_i64().unwrap())
        .collect();
    ids.sort_unstable();
    ids
}

/// Seven day files `ds={ds}.csv` for 2026-11-01..07 in `dir`, day d holding
/// ids d*100 .. d*100+rows(d); the `--files` pattern.
fn week_files(dir: &std::path::Path, rows: impl Fn(u64) -> u64) -> String {
    for d in 1..=7u64 {
        let path = dir.join(format!("ds=2026-11-0{d}.csv"));
        std::fs::write(path, day_csv(d * 100, rows(d))).unwrap();
    }
    dir.join("ds={ds}.csv").to_str().unwrap().to_string()
}

#[tokio::test]
async fn idem_backfill_atomic_replaces_a_week_as_one_load_and_reads_back_the_union() {
    let app = spawn_app().await;
    app.declare_orders().await;
    // Old rows in a day of the week, and in the day after it.
    let old = day_csv(9000, 3);
    for ds in ["2026-11-03", "2026-11-08"] {
        let r = app
            .put(&format!("/partitions/orders/{ds}"), "text/csv", old.clone())
            .await;
        assert_eq!(r.status(), 200, "{ds}");
    }
    let dir = tempfile::tempdir().unwrap();
    let pattern = week_files(dir.path(), |d| 10 + d);
    let backfill = [
        "backfill",
        "orders",
        "--from",
        "2026-11-01",
        "--to",
        "2026-11-07",
        "--files",
        &pattern,
        "--atomic",
        "--parallel",
        "3",
    ];
    let (code, receipt, stderr) = idem_json(&app.base, &backfill).await;
    assert_eq!(code, Some(0), "{stderr}");
    assert_eq!(receipt["mode"], "load", "{receipt}");
    assert_eq!(receipt["status"], "published");
    assert_eq!(receipt["partitions"].as_array().map(Vec::len), Some(7));
    assert_eq!(
        receipt["rows_written"],
        (1..=7).map(|d| 10 + d).sum::<u64>()
    );
    for d in 1..=7i64 {
        let expected: Vec<i64> = (d * 100..d * 100 + 10 + d).collect();
        assert_eq!(
            ids(&app, &format!("2026-11-0{d}")).await,
            expected,
            "day {d}"
        );
    }
    assert_eq!(
        ids(&app, "2026-11-08").await,
        (9000..9003).collect::<Vec<_>>(),
        "a day outside the range is untouched"
    );

    // The same command again: the same load, its receipt replayed.
    let (code, again, stderr) = idem_json(&app.base, &backfill).await;
    assert_eq!(code, Some(0), "{stderr}");
    assert_eq!(again["load_id"], receipt["load_id"]);
    assert_eq!(again["replayed"], true);
    let load_id = receipt["load_id"].as_str().unwrap();
    let said = format!("load {load_id} was published before, by an earlier run: 7 partitions in");
    assert!(stderr.contains(&said), "{stderr}");
    assert!(
        stderr.contains(": 0 rows written by this run; 98 written before, replayed"),
        "{stderr}"
    );
    let (code, _, stderr) = idem_text(&app, &["load", "publish", load_id]).await;
    assert_eq!(code, Some(0), "{stderr}");
    assert!(
        stderr.contains("was published before; its receipt is that publish's: 0 rows written by this run; 98 written before"),
        "{stderr}"
    );
    let (code, view, _) = idem_json(&app.base, &["load", "status", load_id]).await;
    assert_eq!((code, &view["status"]), (Some(0), &json!("published")));
    assert_eq!(view["parts"].as_array().map(Vec::len), Some(7));
}

#[tokio::test]
async fn idem_backfill_atomic_with_a_failing_audit_exits_1_with_the_report_and_changes_nothing() {
    let app = spawn_app().await;
    let declaration: Value = serde_json::from_str(ORDERS).unwrap();
    let mut declaration = declaration;
    declaration["audits"] = json!({"min_rows": 5});
    let r = app.declare("orders", &declaration.to_string()).await;
    assert!(r.status().is_success(), "{}", r.text().await.unwrap());
    let dir = tempfile::tempdir().unwrap();
    let pattern = week_files(dir.path(), |d| 10 + d);
    let backfill = |pattern: &str| {
        [
            "backfill",
            "orders",
            "--from",
            "2026-11-01",
            "--to",
            "2026-11-07",
            "--files",
            pattern,
            "--atomic",
        ]
        .map(str::to_string)
    };
    let args = backfill(&pattern);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let (code, _, stderr) = idem_text(&app, &args).await;
    assert_eq!(code, Some(0), "{stderr}");

    // Day 4 comes with 2 rows: below min_rows, so no day changes.
    std::fs::write(dir.path().join("ds=2026-11-04.csv"), day_csv(7000, 2)).unwrap();
    let (code, stdout, stderr) = idem_text(&app, &args).await;
    assert_eq!(code, Some(1), "{stdout}{stderr}");
    assert!(
        stderr.contains("audit_failed") && stderr.contains("min_rows"),
        "the report is said: {stderr}"
    );
    assert!(stderr.contains("2026-11-04"), "{stderr}");
    assert_eq!(
        ids(&app, "2026-11-04").await,
        (400..414).collect::<Vec<_>>()
    );
    assert_eq!(app.count("orders", "2026-11-01").await, 11);
}

#[tokio::test]
async fn idem_load_opens_stages_parts_publishes_once_and_says_its_status() {
    let app = spawn_app().await;
    app.declare_orders().await;
    let open = [
        "load",
        "open",
        "orders",
        "--partitions",
        "2026-11-01,2026-11-02",
    ];
    let (code, stdout, stderr) = idem_text(&app, &open).await;
    assert_eq!(code, Some(0), "{stderr}");
    let load_id = stdout.trim().to_string();
    assert_eq!(stdout.lines().count(), 1, "the id alone: {stdout}");
    let view: Value = serde_json::from_str(stderr.trim()).expect("the view on stderr");
    assert_eq!(
        (&view["load_id"], &view["status"]),
        (&json!(load_id), &json!("open"))
    );
    // The same command again opens the same load.
    let (_, again, _) = idem_text(&app, &open).await;
    assert_eq!(again.trim(), load_id);

    // Part 1: day 1 without a partition column; part 2: day 2 with one.
    let day1 = file_with(".csv", &day_csv(1, 10));
    let day2: String = (50..55)
        .map(|id| order_line(id, "2026-11-02", "paid"))
        .collect();
    let day2 = file_with(".ndjson", &day2);
    let part = |n: &'static str, file: &tempfile::NamedTempFile| {
        let path = file.path().to_str().unwrap().to_string();
        (n, path)
    };
    let (n, path) = part("1", &day1);
    let args = ["load", "part", &load_id, n, &path, "--ds", "2026-11-01"];
    let (code, receipt, stderr) = idem_json(&app.base, &args).await;
    assert_eq!(code, Some(0), "{stderr}");
    assert_eq!(
        (receipt["part"].as_u64(), receipt["rows_staged"].as_u64()),
        (Some(1), Some(10))
    );
    let (n, path) = part("2", &day2);
    for changed in [true, false] {
        let (code, receipt, stderr) =
            idem_json(&app.base, &["load", "part", &load_id, n, &path]).await;
        assert_eq!(code, Some(0), "{stderr}");
        assert_eq!(receipt["changed"], changed, "part 2 sent again: {receipt}");
    }
    assert_eq!(
        app.count("orders", "2026-11-01").await,
        0,
        "staged, not live"
    );

    let (code, view, _) = idem_json(&app.base, &["load", "status", &load_id]).await;
    assert_eq!(code, Some(0));
    assert_eq!(view["status"], "open");
    assert_eq!(view["parts"].as_array().map(Vec::len), Some(2));
    assert_eq!(
        view["partitions"],
        json!({"2026-11-01": 10, "2026-11-02": 5})
    );

    let (code, receipt, stderr) = idem_json(&app.base, &["load", "publish", &load_id]).await;
    assert_eq!(code, Some(0), "{stderr}");
    assert_eq!(
        (&receipt["status"], &receipt["rows_written"]),
        (&json!("published"), &json!(15))
    );
    assert_eq!(ids(&app, "2026-11-01").await, (1..11).collect::<Vec<_>>());
    assert_eq!(ids(&app, "2026-11-02").await, (50..55).collect::<Vec<_>>());
    let (code, again, _) = idem_json(&app.base, &["load", "publish", &load_id]).await;
    assert_eq!((code, &again["replayed"]), (Some(0), &json!(true)));

    // A published load takes no part and cannot be abandoned: refused at
    // once (exit 1), not retried until the client gives up.
    let started = std::time::Instant::now();
    let (code, _, stderr) = idem_text(&app, &["load", "part", &load_id, "1", &path]).await;
    assert_eq!(code, Some(1), "{stderr}");
    assert!(stderr.contains("load_not_open"), "{stderr}");
    let (code, _, stderr) = idem_text(&app, &["load", "abandon", &load_id]).await;
    assert_eq!(code, Some(1), "{stderr}");
    assert!(started.elapsed() < std::time::Duration::from_secs(10));
}

#[tokio::test]
async fn idem_put_whole_refreshes_a_plain_table_and_the_same_rows_again_change_nothing() {
    let app = spawn_app().await;
    let customers = r#"{"columns": {"customer_id": "bigint", "name": "text"},
        "partition_by": null, "primary_key": ["customer_id"]}"#;
    let r = app.declare("customers", customers).await;
    assert!(r.status().is_success(), "{}", r.text().await.unwrap());
    let all = file_with(".csv", "customer_id,name\n1,Ada\n2,Grace\n3,Edsger\n");
    let put = |file: &tempfile::NamedTempFile| {
        ["put", "customers", "--whole", file.path().to_str().unwrap()].map(str::to_string)
    };
    let base = app.base.clone();
    let run = |args: [String; 4]| {
        let base = base.clone();
        async move {
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            idem_json(&base, &args).await
        }
    };
    let (code, receipt, stderr) = run(put(&all)).await;
    assert_eq!(code, Some(0), "{stderr}");
    assert_eq!(
        (&receipt["mode"], &receipt["changed"]),
        (&json!("replace_table"), &json!(true))
    );

    // Customer 2 deleted at the source: the refresh drops it.
    let two = file_with(".csv", "customer_id,name\n1,Ada\n3,Edsger\n");
    let (code, receipt, stderr) = run(put(&two)).await;
    assert_eq!(code, Some(0), "{stderr}");
    assert_eq!(receipt["row_count"], 2);
    let r = app.get("/tables/customers/rows").await;
    assert_eq!(r.status(), 200);
    let names: Vec<String> = r
        .text()
        .await
        .unwrap()
        .lines()
        .map(str::to_string)
        .collect();
    assert_eq!(names.len(), 2, "{names:?}");
    assert!(!names.iter().any(|row| row.contains("Grace")), "{names:?}");

    // The same file: the same rows, nothing rewritten.
    let (code, receipt, _) = run(put(&two)).await;
    assert_eq!((code, &receipt["changed"]), (Some(0), &json!(false)));
    // The same rows in another file (the table as `idem get --whole`
    // gives it): written as new, and nothing changes.
    let out = dir_file("customers.ndjson");
    let get = ["get", "customers", "--whole", "-o", out.1.to_str().unwrap()];
    let (code, _, stderr) = idem_json(&app.base, &get).await;
    assert_eq!(code, Some(0), "{stderr}");
    let text = std::fs::read_to_string(&out.1).unwrap();
    assert_eq!(text.lines().count(), 2, "{text}");
    let put_back = ["put", "customers", "--whole", out.1.to_str().unwrap()];
    let (code, receipt, stderr) = idem_json(&app.base, &put_back).await;
    assert_eq!(code, Some(0), "{stderr}");
    assert_eq!(receipt["changed"], false, "{receipt}");
}

#[tokio::test]
async fn idem_put_dry_run_says_what_would_change_and_changes_nothing() {
    let app = spawn_app().await;
    app.declare_orders().await;
    let live = file_with(".csv", &day_csv(1, 5));
    let live_path = live.path().to_str().unwrap();
    let (code, _, stderr) = idem_json(&app.base, &["put", "orders", "2026-11-01", live_path]).await;
    assert_eq!(code, Some(0), "{stderr}");
    let before = app.rows("orders", "2026-11-01").await;

    let other = file_with(".csv", &day_csv(100, 3));
    let other_path = other.path().to_str().unwrap();
    let dry = ["put", "orders", "2026-11-01", other_path, "--dry-run"];
    for _ in 0..2 {
        let (code, receipt, stderr) = idem_json(&app.base, &dry).await;
        assert_eq!(code, Some(0), "{stderr}");
        assert_eq!(
            (&receipt["dry_run"], &receipt["changed"]),
            (&json!(true), &json!(true))
        );
        assert_ne!(receipt["replayed"], true, "a dry run is never a replay");
    }
    let rows: String = (200..204)
        .map(|id| order_line(id, "2026-11-05", "paid"))
        .collect();
    let table = file_with(".ndjson", &rows);
    let whole = [
        "put",
        "orders",
        "--whole",
        table.path().to_str().unwrap(),
        "--dry-run",
    ];
    let (code, receipt, stderr) = idem_json(&app.base, &whole).await;
    assert_eq!(code, Some(0), "{stderr}");
    assert_eq!(receipt["dry_run"], true, "{receipt}");
    assert_eq!(app.rows("orders", "2026-11-01").await, before);
    assert_eq!(app.count("orders", "2026-11-05").await, 0);

    // The real put afterwards is not answered by a dry run's record.
    let (code, receipt, stderr) = idem_json(&app.base, &dry[..4]).await;
    assert_eq!(code, Some(0), "{stderr}");
    assert_eq!(
        (&receipt["changed"], &receipt["replayed"]),
        (&json!(true), &json!(false))
    );
    assert_eq!(ids(&app, "2026-11-01").await, vec![100, 101, 102]);
}

#[tokio::test]
async fn idem_put_with_a_failing_audit_exits_1_with_its_report_and_the_day_stays() {
    let app = spawn_app().await;
    app.declare_orders().await;
    let full = file_with(".csv", &day_csv(1, 1000));
    let full_path = full.path().to_str().unwrap();
    let (code, _, stderr) = idem_json(&app.base, &["put", "orders", "2026-11-01", full_path]).await;
    assert_eq!(code, Some(0), "{stderr}");

    let few = file_with(".csv", &day_csv(5000, 12));
    let few_path = few.path().to_str().unwrap();
    let ratio = r#"{"max_change_ratio":0.5}"#;
    for dry_run in [&["--dry-run"][..], &[]] {
        let args = [
            &["put", "orders", "2026-11-01", few_path, "--audit", ratio],
            dry_run,
        ]
        .concat();
        let (code, _, stderr) = idem_json(&app.base, &args).await;
        assert_eq!(code, Some(1), "{stderr}");
        assert!(
            stderr.contains("audit_failed") && stderr.contains("max_change_ratio"),
            "{stderr}"
        );
    }
    assert_eq!(app.count("orders", "2026-11-01").await, 1000);

    // Not JSON: refused before anything is sent.
    let (code, _, _) = idem_json(
        &app.base,
        &["put", "orders", "2026-11-01", few_path, "--audit", "[1]"],
    )
    .await;
    assert_eq!(code, Some(3));
}
