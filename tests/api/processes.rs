//! Several real idem processes on one database.

use serde_json::Value;
use tokio::io::{BufReader, Lines};
use tokio::process::ChildStderr;

use crate::helpers::declare_orders;
use crate::support::*;

/// A larger pool than the default, so that three processes race for real.
const POOL_OF_8: &[(&str, &str)] = &[("IDEM_POOL_SIZE", "8")];
/// The same, served by one runtime thread (`IDEM_WORKER_THREADS`): its
/// requests interleave on that thread instead of running side by side.
const POOL_OF_8_ONE_THREAD: &[(&str, &str)] =
    &[("IDEM_POOL_SIZE", "8"), ("IDEM_WORKER_THREADS", "1")];

#[tokio::test]
async fn three_processes_racing_on_the_same_keys_write_each_key_once() {
    // Declared before the processes, so dropped after them: they are killed first.
    let (options, url, _database) = fresh_database_url().await;
    let processes = [
        Idem::start(&url, "processes-race-1", POOL_OF_8).await,
        Idem::start(&url, "processes-race-2", POOL_OF_8).await,
        Idem::start(&url, "processes-race-3", POOL_OF_8_ONE_THREAD).await,
    ];
    let client = client_with_token(ADMIN_TOKEN);
    declare_orders(&client, &processes[0].base).await;

    let keys = ["alpha", "beta", "gamma"];
    let mut tasks = Vec::new();
    for i in 0..36 {
        let key = keys[i % keys.len()];
        let base = processes[i % processes.len()].base.clone();
        let client = client.clone();
        // Each key has its own rows: orders 1000*k+1 ..= 1000*k+100.
        let k = (i % keys.len()) as i64;
        let rows: Vec<Value> = (1..=100)
            .map(|n| order(1000 * k + n, key, "2026-10-12T01:00:00Z"))
            .collect();
        tasks.push(tokio::spawn(async move {
            let r = client
                .post(format!("{base}/rows?table=orders"))
                .header("content-type", "application/x-ndjson")
                .header("idempotency-key", key)
                .body(ndjson(&rows))
                .send()
                .await
                .unwrap();
            let replayed = r.headers().get("idempotent-replayed").map(|v| v == "false");
            (key, r.status().as_u16(), replayed)
        }));
    }
    let mut firsts = std::collections::BTreeMap::new();
    for t in tasks {
        let (key, status, first) = t.await.unwrap();
        assert!(status == 200 || status == 409, "answer {status}");
        if first == Some(true) {
            *firsts.entry(key).or_insert(0) += 1;
        }
    }
    assert_eq!(firsts, keys.iter().map(|k| (*k, 1)).collect());

    let db = sqlx::PgPool::connect_with(options).await.unwrap();
    let loads: Vec<(String, i64)> = sqlx::query_as(
        "select idempotency_key, count(*) from idem.loads where status = 'published' group by 1 order by 1",
    )
    .fetch_all(&db)
    .await
    .unwrap();
    assert_eq!(
        loads,
        keys.iter().map(|k| (k.to_string(), 1)).collect::<Vec<_>>()
    );
    let rows: i64 = sqlx::query_scalar("select count(*) from idem_data.orders")
        .fetch_one(&db)
        .await
        .unwrap();
    assert_eq!(rows, 300);
}

/// Log lines up to the first that holds `needle`, which comes last.
async fn lines_until(log: &mut Lines<BufReader<ChildStderr>>, needle: &str) -> Vec<String> {
    let mut seen = Vec::new();
    let found = tokio::time::timeout(std::time::Duration::from_secs(10), async {
        while let Some(line) = log.next_line().await.unwrap() {
            let done = line.contains(needle);
            seen.push(line);
            if done {
                return;
            }
        }
    })
    .await;
    assert!(found.is_ok(), "no log line holds {needle:?}: {seen:#?}");
    seen
}

#[tokio::test]
async fn a_request_is_logged_once_as_a_json_line_with_its_id_route_table_ds_and_load() {
    let (_options, url, _database) = fresh_database_url().await;
    let (idem, mut log) = Idem::start_piped(&url, "processes-json-log", "json", &[]).await;
    let client = client_with_token(ADMIN_TOKEN);
    let answer = client
        .put(format!("{}/partitions/logged/2026-10-12", idem.base))
        .header("content-type", "application/x-ndjson")
        .header("x-request-id", "log-test-1")
        .body("{\"id\":1,\"note\":\"body-text-456\"}\n")
        .send()
        .await
        .unwrap();
    assert_eq!(answer.status(), 200);
    let load_id = answer.json::<Value>().await.unwrap()["load_id"].clone();

    let lines = lines_until(&mut log, "log-test-1").await;
    let line: Value = serde_json::from_str(lines.last().unwrap()).unwrap();
    assert_eq!(line["message"], "answered");
    assert_eq!(line["status"], 200);
    assert!(line["duration_ms"].as_f64().is_some(), "{line}");
    let span = &line["span"];
    assert_eq!(span["request_id"], "log-test-1");
    assert_eq!(span["method"], "PUT");
    assert_eq!(span["route"], "/partitions/{table}/{ds}");
    assert_eq!(span["table"], "logged");
    assert_eq!(span["ds"], "2026-10-12");
    assert_eq!(span["load_id"], load_id);
    assert_eq!(span["token"], "admin", "the token's name, never the token");
    for line in &lines {
        assert!(!line.contains(ADMIN_TOKEN), "a secret was logged: {line}");
        assert!(!line.contains("body-text-456"), "a body was logged: {line}");
    }
}

#[tokio::test]
async fn a_text_log_to_a_pipe_has_no_colour_codes() {
    let (_options, url, _database) = fresh_database_url().await;
    let (idem, mut log) = Idem::start_piped(&url, "processes-text-log", "text", &[]).await;
    let r = client_with_token(ADMIN_TOKEN)
        .get(format!("{}/tables", idem.base))
        .header("x-request-id", "text-log-1")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let lines = lines_until(&mut log, "text-log-1").await;
    let line = lines.last().unwrap();
    assert!(
        line.contains("route=/tables") && line.contains("status=200"),
        "{line}"
    );
    assert!(lines.iter().all(|l| !l.contains('\u{1b}')), "{lines:#?}");
}

#[tokio::test]
async fn a_write_refused_as_busy_is_logged_as_a_warning_not_an_error() {
    let (_options, url, _database) = fresh_database_url().await;
    let busy = [
        ("IDEM_MAX_CONCURRENT_LOADS", "1"),
        ("IDEM_LOAD_WAIT_MS", "200"),
        // The held body stalls on purpose: neither its idle time nor its
        // rate may end it (and free the turn) while the test runs.
        ("IDEM_BODY_IDLE_TIMEOUT_SECS", "600"),
        ("IDEM_BODY_MIN_RATE_BYTES", "0"),
    ];
    let (idem, mut log) = Idem::start_piped(&url, "processes-busy", "text", &busy).await;
    let client = client_with_token(ADMIN_TOKEN);
    declare_orders(&client, &idem.base).await;
    // A PUT whose body's start arrives (more than a write reads before its
    // turn) and whose rest does not: it holds the only turn.
    let (body, rx) = tokio::sync::mpsc::channel::<Result<String, std::io::Error>>(2);
    let mut held = tokio::spawn(
        client
            .put(format!("{}/partitions/orders/2026-10-12", idem.base))
            .header("content-type", "application/x-ndjson")
            .body(reqwest::Body::wrap_stream(
                tokio_stream::wrappers::ReceiverStream::new(rx),
            ))
            .send(),
    );
    let rows: Vec<Value> = (1..=1000)
        .map(|id| order(id, "paid", "2026-10-12T01:00:00Z"))
        .collect();
    body.send(Ok(ndjson(&rows))).await.unwrap();
    // Only once the held PUT has the turn may another write be sent: sent
    // earlier, it could take the turn itself and leave the held one to be
    // refused as busy instead.
    the_only_turn_is_taken(&client, &idem.base, &mut held).await;
    let second = client
        .put(format!("{}/partitions/orders/2026-10-13", idem.base))
        .header("content-type", "application/x-ndjson")
        .header("x-request-id", "busy-log-1")
        .body("{\"order_id\": 2}\n")
        .send()
        .await
        .unwrap();
    let status = second.status();
    let busy = json_body(second).await;
    assert_eq!(status, 503, "{busy}");
    assert_eq!(busy["code"], "busy");
    drop(body);
    assert_eq!(held.await.unwrap().unwrap().status(), 200);
    let lines = lines_until(&mut log, "status=503").await;
    let failed: Vec<&String> = lines
        .iter()
        .filter(|l| l.contains("request failed"))
        .collect();
    assert!(!failed.is_empty(), "the 503 is logged: {lines:#?}");
    for line in &failed {
        assert!(line.contains(" WARN "), "{line}");
    }
    assert!(lines.iter().all(|l| !l.contains(" ERROR ")), "{lines:#?}");
}

/// How long the held PUT of the busy test may take to reach its turn.
const TURN_DEADLINE: std::time::Duration = std::time::Duration::from_secs(20);

/// Waits until `/metrics` shows no turn to write free, failing with the
/// held PUT's answer if it ends first, or after `TURN_DEADLINE`.
async fn the_only_turn_is_taken(
    client: &reqwest::Client,
    base: &str,
    held: &mut tokio::task::JoinHandle<reqwest::Result<reqwest::Response>>,
) {
    let deadline = tokio::time::Instant::now() + TURN_DEADLINE;
    loop {
        if held.is_finished() {
            match held.await.unwrap() {
                Ok(r) => panic!(
                    "the held PUT ended before its turn was seen taken: {} {}",
                    r.status(),
                    r.text().await.unwrap_or_default()
                ),
                Err(e) => panic!("the held PUT failed before its turn was seen taken: {e}"),
            }
        }
        let metrics = client
            .get(format!("{base}/metrics"))
            .send()
            .await
            .unwrap()
            .text()
            .await
            .unwrap();
        if metrics.lines().any(|l| l == "idem_load_slots_free 0") {
            return;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the held PUT took no turn within {TURN_DEADLINE:?}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
}

/// A POST of one order under `key` to `base`: its status, whether it was
/// replayed, and its body.
async fn post_order(
    client: &reqwest::Client,
    base: &str,
    key: &str,
    id: i64,
    status: &str,
) -> (u16, Option<String>, Value) {
    let r = client
        .post(format!("{base}/rows?table=orders"))
        .header("content-type", "application/x-ndjson")
        .header("idempotency-key", key)
        .body(ndjson(&[order(id, status, "2026-10-12T01:00:00Z")]))
        .send()
        .await
        .unwrap();
    let replayed = r
        .headers()
        .get("idempotent-replayed")
        .map(|v| v.to_str().unwrap().to_string());
    (r.status().as_u16(), replayed, json_body(r).await)
}

#[tokio::test]
async fn keys_completed_by_one_process_are_replayed_by_another_amid_its_batched_writes() {
    let (options, url, _database) = fresh_database_url().await;
    let first = Idem::start(&url, "processes-replay-1", POOL_OF_8).await;
    let second = Idem::start(&url, "processes-replay-2", POOL_OF_8).await;
    let client = client_with_token(ADMIN_TOKEN);
    declare_orders(&client, &first.base).await;
    // The second process learns the table's definition: its next small
    // POSTs are batched, and their keys are not looked up before.
    let (status, _, _) = post_order(&client, &second.base, "warm", 100, "paid").await;
    assert_eq!(status, 200);
    let mut made = std::collections::BTreeMap::new();
    for id in 1..=10 {
        let key = format!("made-{id}");
        let (status, replayed, body) = post_order(&client, &first.base, &key, id, "paid").await;
        assert_eq!(
            (status, replayed.as_deref()),
            (200, Some("false")),
            "{body}"
        );
        made.insert(key, body);
    }

    // At once on the second process: the ten made keys again, ten new keys,
    // and a made key with another request.
    let mut tasks = Vec::new();
    for id in 1..=20 {
        let (client, base) = (client.clone(), second.base.clone());
        let key = if id <= 10 {
            format!("made-{id}")
        } else {
            format!("new-{id}")
        };
        tasks.push(tokio::spawn(async move {
            (
                key.clone(),
                post_order(&client, &base, &key, id, "paid").await,
            )
        }));
    }
    let (client2, base2) = (client.clone(), second.base.clone());
    let reused =
        tokio::spawn(async move { post_order(&client2, &base2, "made-3", 3, "refunded").await });
    for task in tasks {
        let (key, (status, replayed, mut body)) = task.await.unwrap();
        assert_eq!(status, 200, "{key}: {body}");
        match made.get(&key) {
            Some(first_answer) => {
                assert_eq!(replayed.as_deref(), Some("true"), "{key}");
                assert_eq!(body["replayed"], true);
                body["replayed"] = Value::Bool(false);
                assert_eq!(&body, first_answer, "{key}: the stored answer");
            }
            None => assert_eq!(replayed.as_deref(), Some("false"), "{key}: {body}"),
        }
    }
    let (status, _, problem) = reused.await.unwrap();
    assert_eq!(status, 422, "{problem}");
    assert_eq!(problem["code"], "idempotency_key_reused");

    let db = sqlx::PgPool::connect_with(options).await.unwrap();
    let loads: i64 =
        sqlx::query_scalar("select count(*) from idem.loads where status = 'published'")
            .fetch_one(&db)
            .await
            .unwrap();
    assert_eq!(loads, 21, "warm, ten made and ten new: one load each");
    let paid: Vec<i64> = sqlx::query_scalar(
        "select order_id from idem_data.orders where status = 'paid' order by 1",
    )
    .fetch_all(&db)
    .await
    .unwrap();
    assert_eq!(paid, (1..=20).chain([100]).collect::<Vec<i64>>());
}
