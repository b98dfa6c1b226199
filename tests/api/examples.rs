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
