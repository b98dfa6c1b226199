//! A Postgres whose TLS certificate rustls refuses: an X.509 version 1
//! certificate, the kind `CREATE EXTENSION citus` makes for itself. Under
//! the default `sslmode` (prefer) idem connects without TLS, as libpq does;
//! under `sslmode=require` it stops at start-up and says which setting to
//! change.

use std::path::Path;

use crate::scenario::*;
use crate::support::*;

#[tokio::test]
async fn a_certificate_rustls_refuses_is_left_under_prefer_and_named_under_require() {
    let certs = tempfile::Builder::new()
        .prefix("idem-faults-tls.")
        .tempdir_in("/tmp")
        .expect("a folder for the certificate");
    let (cert, key) = version_one_certificate(certs.path());
    let pg = Postgres::start_with(&format!(
        "-c ssl=on -c ssl_cert_file={cert} -c ssl_key_file={key}"
    ))
    .await;

    let idem = Idem::start(&pg.url, "tls-prefer", &[]).await;
    put_one_order(&idem, "tls_orders").await;
    let db = db(&format!("{}?sslmode=disable", pg.url)).await;
    let (plain, encrypted): (i64, i64) = sqlx::query_as(
        "select count(*) filter (where not s.ssl), count(*) filter (where s.ssl)
         from pg_stat_activity a join pg_stat_ssl s using (pid)
         where a.application_name = 'idem'",
    )
    .fetch_one(&db)
    .await
    .expect("read idem's connections");
    assert!(plain > 0, "idem's connections went without TLS");
    assert_eq!(encrypted, 0, "no connection of idem's is encrypted");
    println!(
        "tls: under sslmode=prefer idem connected without TLS ({plain} connections) and took a PUT"
    );

    let refused = refused_serve(&format!("{}?sslmode=require", pg.url)).await;
    assert!(
        refused.contains("sslmode=") && refused.contains("sslrootcert="),
        "the failure names the settings to change: {refused}"
    );
    println!("tls: under sslmode=require idem stopped, saying: {refused}");
}

/// A key and a version 1 certificate for `localhost`, made by openssl (whose
/// `x509 -req` without extensions makes version 1), readable by the server:
/// their paths.
fn version_one_certificate(dir: &Path) -> (String, String) {
    let key = dir.join("server.key").display().to_string();
    let csr = dir.join("server.csr").display().to_string();
    let cert = dir.join("server.crt").display().to_string();
    let steps: [&[&str]; 3] = [
        &["genrsa", "-out", &key, "2048"],
        &[
            "req",
            "-new",
            "-key",
            &key,
            "-subj",
            "/CN=localhost",
            "-out",
            &csr,
        ],
        &[
            "x509", "-req", "-in", &csr, "-signkey", &key, "-days", "2", "-out", &cert,
        ],
    ];
    for args in steps {
        let out = std::process::Command::new("openssl")
            .args(args)
            .output()
            .expect("run openssl");
        assert!(out.status.success(), "openssl {args:?}: {out:?}");
    }
    let text = std::process::Command::new("openssl")
        .args(["x509", "-in", &cert, "-noout", "-text"])
        .output()
        .expect("read the certificate");
    assert!(
        String::from_utf8_lossy(&text.stdout).contains("Version: 1 (0x0)"),
        "openssl made a version 1 certificate"
    );
    // The server refuses a key anyone else may read, or that it does not own.
    let owner = std::process::Command::new("sh")
        .arg("-c")
        .arg(r#"chmod 600 "$2"; chmod 644 "$3"; chmod 755 "$1"; if [ "$(id -u)" = 0 ]; then chown postgres: "$2" "$3"; fi"#)
        .args(["_", &dir.display().to_string(), &key, &cert])
        .status()
        .expect("give the server its key");
    assert!(owner.success());
    (cert, key)
}
