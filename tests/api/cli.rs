//! What the client's tests share: running `idem` as a process against the
//! real server and reading its JSON, the files it is given, a day's CSV, and
//! a proxy that cuts connections where a test says. The tests themselves
//! are in `cli_put_post.rs`, `cli_backfill_get.rs` and `cli_commands.rs`.

use std::io::Write;

use serde_json::Value;

use crate::helpers::*;
use crate::support::*;

pub(crate) fn file_with(suffix: &str, text: &str) -> tempfile::NamedTempFile {
    let mut file = tempfile::Builder::new().suffix(suffix).tempfile().unwrap();
    file.write_all(text.as_bytes()).unwrap();
    file
}

/// What the test proxy does to one connection.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Cut {
    /// Passes it through.
    Nothing,
    /// Passes the request's head and a little of its body, then hangs up
    /// on both sides.
    RequestMidway,
    /// Passes the whole request, then the first bytes of the answer, then
    /// hangs up.
    AnswerMidway,
    /// Passes it through, each chunk of the request held back this long.
    Slow(std::time::Duration),
}

/// A TCP proxy in front of `upstream`: its n-th connection (from 0) is
/// treated as `plan[n]` says, those past the plan as `after`. Its URL.
pub(crate) async fn proxy(upstream: &str, plan: Vec<Cut>, after: Cut) -> String {
    let upstream = upstream.trim_start_matches("http://").to_string();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move {
        for n in 0.. {
            let Ok((client, _)) = listener.accept().await else {
                return;
            };
            let cut = plan.get(n).copied().unwrap_or(after);
            tokio::spawn(relay(client, upstream.clone(), cut));
        }
    });
    url
}

async fn relay(mut client: tokio::net::TcpStream, upstream: String, cut: Cut) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let Ok(mut server) = tokio::net::TcpStream::connect(&upstream).await else {
        return;
    };
    match cut {
        Cut::Nothing => {
            let _ = tokio::io::copy_bidirectional(&mut client, &mut server).await;
        }
        Cut::RequestMidway => {
            let mut seen = Vec::new();
            let mut buf = [0u8; 16 * 1024];
            while let Ok(n @ 1..) = client.read(&mut buf).await {
                seen.extend_from_slice(&buf[..n]);
                if let Some(head) = seen.windows(4).position(|w| w == b"\r\n\r\n") {
                    let upto = (head + 4 + 512).min(seen.len());
                    let _ = server.write_all(&seen[..upto]).await;
                    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                    return;
                }
            }
        }
        Cut::AnswerMidway => {
            let (mut from_client, mut to_client) = client.split();
            let (mut from_server, mut to_server) = server.split();
            let answer_start = async {
                let mut buf = [0u8; 12];
                if let Ok(n) = from_server.read(&mut buf).await {
                    let _ = to_client.write_all(&buf[..n]).await;
                }
            };
            tokio::select! {
                _ = tokio::io::copy(&mut from_client, &mut to_server) => {}
                _ = answer_start => {}
            }
        }
        Cut::Slow(delay) => {
            let (mut from_client, mut to_client) = client.into_split();
            let (mut from_server, mut to_server) = server.into_split();
            let answers = tokio::spawn(async move {
                let _ = tokio::io::copy(&mut from_server, &mut to_client).await;
            });
            let mut buf = [0u8; 16 * 1024];
            while let Ok(n @ 1..) = from_client.read(&mut buf).await {
                tokio::time::sleep(delay).await;
                if to_server.write_all(&buf[..n]).await.is_err() {
                    break;
                }
            }
            let _ = to_server.shutdown().await;
            let _ = answers.await;
        }
    }
}

pub(crate) async fn wait_for_published_loads(app: &TestApp, table: &str, at_least: i64) {
    for _ in 0..300 {
        let loads: i64 = sqlx::query_scalar(
            "select count(*) from idem.loads where table_name = $1 and status = 'published'",
        )
        .bind(table)
        .fetch_one(&app.db)
        .await
        .unwrap();
        if loads >= at_least {
            return;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    panic!("{table}: fewer than {at_least} loads after 15 s");
}

/// A day's orders as CSV without the partition column (rows take the day
/// they are PUT to): `rows` orders, ids from `first`.
pub(crate) fn day_csv(first: u64, rows: u64) -> String {
    let mut csv = String::from("order_id,customer_id,status,amount,updated_at\n");
    for id in first..first + rows {
        csv.push_str(&format!("{id},7,paid,1.50,2026-11-01T00:00:00Z\n"));
    }
    csv
}

/// `idem` with the server's flags after `args`; its exit code and stdout
/// as JSON (null when it is not).
pub(crate) async fn idem_json(app_url: &str, args: &[&str]) -> (Option<i32>, Value, String) {
    idem_json_in(app_url, args, b"").await
}

/// `idem_json` with `stdin` on the standard input.
pub(crate) async fn idem_json_in(
    app_url: &str,
    args: &[&str],
    stdin: &[u8],
) -> (Option<i32>, Value, String) {
    let mut all: Vec<&str> = args.to_vec();
    all.extend(["--url", app_url, "--token", ADMIN_TOKEN, "--quiet"]);
    let out = idem(&all, stdin).await;
    let stdout = serde_json::from_slice(&out.stdout).unwrap_or(Value::Null);
    (
        out.status.code(),
        stdout,
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Each partition's `result` in a backfill's JSON, in order.
pub(crate) fn results(report: &Value) -> Vec<(String, String)> {
    report
        .as_array()
        .unwrap_or(&Vec::new())
        .iter()
        .map(|p| {
            let text = |f: &str| p[f].as_str().unwrap_or("").to_string();
            (text("ds"), text("result"))
        })
        .collect()
}
