//! The orchestrator examples' helpers, run by `tests/examples/orchestrators.py`
//! with stand-ins for Airflow and Dagster (neither is installed), against
//! the real server and the real `idem` binary.

use crate::helpers::*;
use crate::support::*;

#[tokio::test]
async fn the_orchestrator_examples_log_idem_fail_at_once_without_it_and_declare_the_key_first() {
    let app = spawn_app().await;
    let root = env!("CARGO_MANIFEST_DIR");
    let pycache = tempfile::tempdir().unwrap();
    let out = tokio::process::Command::new("python3")
        .arg("tests/examples/orchestrators.py")
        .current_dir(root)
        .env("PYTHONPYCACHEPREFIX", pycache.path())
        .env("IDEM_URL", &app.base)
        .env("IDEM_TOKEN", ADMIN_TOKEN)
        .env("IDEM_BIN", env!("CARGO_BIN_EXE_idem"))
        .env("EXAMPLES", format!("{root}/examples"))
        .output()
        .await
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(stdout.matches("orchestrators: ").count(), 10, "{stdout}");
}

#[tokio::test]
async fn the_on_published_example_runs_its_command_for_each_published_load_and_resumes() {
    let app = spawn_app().await;
    app.declare_orders().await;
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state");
    let out = dir.path().join("published");
    // From the first event on (a state of 0), not from when it connects.
    std::fs::write(&state, "0").unwrap();
    let run = || {
        tokio::process::Command::new("python3")
            .arg(format!(
                "{}/examples/on_published.py",
                env!("CARGO_MANIFEST_DIR")
            ))
            .args(["--once", "orders"])
            .arg(&state)
            .args([
                "sh",
                "-c",
                r#"echo "$IDEM_TABLE $IDEM_DS $IDEM_MODE" >> "$OUT""#,
            ])
            .env("OUT", &out)
            .env("IDEM_URL", &app.base)
            .env("IDEM_TOKEN", ADMIN_TOKEN)
            .kill_on_drop(true)
            .output()
    };
    let put = |ds: &'static str| {
        let row = serde_json::json!({"order_id": 1, "ds": ds, "status": "paid"});
        let app = &app;
        async move {
            let r = app
                .put_ndjson(&format!("/partitions/orders/{ds}"), &[row])
                .await;
            assert_eq!(r.status(), 200);
        }
    };
    put("2026-10-12").await;
    // The same day again changes nothing: announced, and skipped.
    put("2026-10-12").await;
    let first = tokio::time::timeout(std::time::Duration::from_secs(20), run())
        .await
        .expect("it ends after the first published load")
        .unwrap();
    assert!(first.status.success(), "{first:?}");
    // Published while it was not running: the next run starts there.
    put("2026-10-13").await;
    let second = tokio::time::timeout(std::time::Duration::from_secs(20), run())
        .await
        .expect("it resumes")
        .unwrap();
    assert!(second.status.success(), "{second:?}");
    assert_eq!(
        std::fs::read_to_string(&out).unwrap(),
        "orders 2026-10-12 replace\norders 2026-10-13 replace\n"
    );
}
