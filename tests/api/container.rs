//! The container files, checked without a Docker engine by
//! `scripts/check-container` (its own checks always run; linters when
//! installed).

#[tokio::test]
async fn the_image_strips_its_binary_and_compose_needs_only_a_dot_env_and_runs_the_client() {
    let out = tokio::process::Command::new("bash")
        .arg("scripts/check-container")
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .env_remove("IDEM_ADMIN_TOKEN")
        .output()
        .await
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    for check in [
        "strip",
        "compose-variables",
        "compose-client",
        "compose-port",
    ] {
        assert!(
            stderr.contains(&format!("check-container: {check}: ok")),
            "{stderr}"
        );
    }
}
