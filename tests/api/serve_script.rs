//! `scripts/serve --background` when it cannot serve: a port that is taken
//! is said to be, before anything starts (something listens there) or from
//! idem's own error (a socket holds the port without listening, so only the
//! bind finds it out), and the error line is printed, not only the log's
//! last lines, which under `RUST_BACKTRACE=1` are all stack frames.

use std::path::Path;
use std::process::Output;

use crate::support::*;

/// A folder with the scripts `scripts/serve` runs.
fn clone_with_serve() -> tempfile::TempDir {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join("scripts")).unwrap();
    for file in ["scripts/serve", "scripts/pg.sh"] {
        std::fs::copy(root.join(file), dir.path().join(file)).unwrap();
    }
    dir
}

/// `scripts/serve --background` in `dir`, idem to listen on `listen`.
async fn serve_background(dir: &Path, database_url: &str, listen: &str) -> Output {
    let run = tokio::process::Command::new("bash")
        .args(["scripts/serve", "--background"])
        .current_dir(dir)
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap())
        .env("HOME", dir)
        .env("DATABASE_URL", database_url)
        .env("IDEM_ADMIN_TOKEN", ADMIN_TOKEN)
        .env("IDEM_LISTEN", listen)
        .env("IDEM_BIN", env!("CARGO_BIN_EXE_idem"))
        .env("RUST_BACKTRACE", "1")
        .output();
    tokio::time::timeout(std::time::Duration::from_secs(120), run)
        .await
        .expect("scripts/serve ends within 2 minutes")
        .unwrap()
}

#[tokio::test]
async fn serve_in_the_background_says_the_port_is_taken_and_prints_idems_error_line() {
    let (_, database_url, _database) = fresh_database_url().await;
    let dir = clone_with_serve();

    // Something listens: nothing starts.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let listen = listener.local_addr().unwrap().to_string();
    let out = serve_background(dir.path(), &database_url, &listen).await;
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains(&format!("idem: {listen} is taken")),
        "{stderr}"
    );
    assert!(stderr.contains("--listen 127.0.0.1:8081"), "{stderr}");
    assert!(
        !dir.path().join(".idem/idem.log").exists(),
        "idem was started"
    );

    // A socket holds the port without listening: idem's bind fails.
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.bind("127.0.0.1:0".parse().unwrap()).unwrap();
    let listen = socket.local_addr().unwrap().to_string();
    let out = serve_background(dir.path(), &database_url, &listen).await;
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("idem: it stopped before serving: Address already in use"),
        "{stderr}"
    );
    assert!(
        stderr.contains(&format!("idem: {listen} is taken")),
        "{stderr}"
    );
    let log = std::fs::read_to_string(dir.path().join(".idem/idem.log")).unwrap();
    assert!(log.contains("Stack backtrace:"), "RUST_BACKTRACE=1: {log}");
    assert!(!stderr.contains(" at /"), "no stack frames: {stderr}");
    assert!(!dir.path().join(".idem/idem.pid").exists());
}
