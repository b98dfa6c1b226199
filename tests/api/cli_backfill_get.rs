//! `idem backfill` and `idem get` as a process against the real server: a
//! range of days loaded, a failing day passed, a killed month run again,
//! a partition written out and put back, the lists; and the examples.

use serde_json::{json, Value};

use crate::cli::*;
use crate::helpers::*;
use crate::support::*;

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
