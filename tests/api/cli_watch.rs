//! `idem watch TABLE`: a line for each load of the table as the server
//! announces it; exit code 2, and where to resume, when the stream breaks.

use std::process::Stdio;
use std::time::Duration;

use serde_json::json;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::Command;

use crate::cli::{proxy, Cut};
use crate::helpers::*;
use crate::support::*;

fn watch(url: &str, args: &[&str]) -> tokio::process::Child {
    Command::new(env!("CARGO_BIN_EXE_idem"))
        .arg("watch")
        .args(args)
        .env("IDEM_URL", url)
        .env("IDEM_TOKEN", ADMIN_TOKEN)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap()
}

#[tokio::test]
async fn idem_watch_prints_a_line_a_load_and_exits_2_when_the_stream_breaks() {
    let app = spawn_app().await;
    app.declare_orders().await;
    let mut watching = watch(&app.base, &["orders", "--after", "0"]);
    let mut lines = BufReader::new(watching.stdout.take().unwrap()).lines();
    let row = json!({"order_id": 1, "ds": "2026-10-12", "status": "paid"});
    let r = app
        .put_ndjson("/partitions/orders/2026-10-12", &[row])
        .await;
    assert_eq!(r.status(), 200);
    let line = tokio::time::timeout(Duration::from_secs(10), lines.next_line())
        .await
        .expect("a line within 10 s")
        .unwrap()
        .unwrap();
    assert!(
        line.contains(" orders 2026-10-12 replace published rows=1 load="),
        "{line}"
    );
    watching.kill().await.unwrap();

    // Through a proxy that hangs up on the answer midway: exit 2.
    let cut = proxy(&app.base, vec![Cut::AnswerMidway], Cut::AnswerMidway).await;
    let broken = watch(&cut, &["orders", "--after", "0"]);
    let ended = tokio::time::timeout(Duration::from_secs(20), broken.wait_with_output())
        .await
        .expect("it ends")
        .unwrap();
    assert_eq!(ended.status.code(), Some(2), "{ended:?}");
}
