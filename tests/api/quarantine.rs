//! `bad_rows`: a body with bad rows refused whole (`reject`), or written
//! without them while each is kept as sent (`quarantine`, `GET /rejects`).

use serde_json::Value;

use crate::helpers::*;
use crate::support::*;

/// Ten bad NDJSON lines, each wrong in its own way, and the column each
/// names (`None`: the line itself is broken).
const BAD_NDJSON: [(&str, Option<&str>); 10] = [
    (
        r#"{"order_id": 9001, "ds": "2026-10-12", "customer_id": 7, "status": "paid", "amount": "abc", "updated_at": "2026-10-12T01:00:00Z"}"#,
        Some("amount"),
    ),
    (
        r#"{"order_id": 9002, "ds": "2026-10-12", "customer_id": "x", "status": "paid", "amount": "1", "updated_at": "2026-10-12T01:00:00Z"}"#,
        Some("customer_id"),
    ),
    (
        r#"{"order_id": 9003, "ds": "2026-10-12", "customer_id": 7, "status": "paid", "amount": "1", "updated_at": "yesterday"}"#,
        Some("updated_at"),
    ),
    (
        r#"{"order_id": 9004, "ds": "2026-10-12", "customer_id": 7, "status": "paid", "amount": "1", "colour": "red"}"#,
        Some("colour"),
    ),
    (
        r#"{"ds": "2026-10-12", "customer_id": 7, "status": "paid", "amount": "1"}"#,
        Some("order_id"),
    ),
    (r#"{"order_id": 9006, "ds": "2026-10-12","#, None),
    (r#"[1, 2, 3]"#, None),
    (
        r#"{"order_id": 9008, "ds": "2026-10-12", "customer_id": 99999999999999999999, "status": "paid"}"#,
        Some("customer_id"),
    ),
    (
        r#"{"order_id": 9009, "ds": "2026-13-45", "customer_id": 7, "status": "paid", "amount": "1"}"#,
        Some("ds"),
    ),
    (
        r#"{"order_id": 9010, "ds": "2026-10-12", "customer_id": "y", "amount": "z"}"#,
        Some("amount"),
    ),
];

/// 1,000 lines: good orders, with the ten bad ones at every hundredth line
/// (lines 50, 150, …; the last one ends in `\r\n`); the bad lines' numbers
/// with their text.
fn ndjson_body() -> (String, Vec<(u64, &'static str)>) {
    let mut body = String::new();
    let mut bad = Vec::new();
    let mut next_bad = BAD_NDJSON.iter();
    for line in 1..=1000u64 {
        if line % 100 == 50 {
            let (text, _) = next_bad.next().unwrap();
            body.push_str(text);
            bad.push((line, *text));
            if line == 950 {
                body.push('\r');
            }
        } else {
            let id = i64::try_from(line).unwrap();
            body.push_str(&order(id, "paid", "2026-10-12T01:00:00Z").to_string());
        }
        body.push('\n');
    }
    (body, bad)
}

/// The rejects a `receipt` links to, all of them (paged by 4 to follow the
/// `Link` headers).
async fn linked_rejects(app: &TestApp, receipt: &Value) -> Vec<Value> {
    let link = receipt["rejects"].as_str().expect("a link to the rejects");
    all_pages(app, &format!("{link}&limit=4"), 4).await
}

#[tokio::test]
async fn reject_refuses_the_whole_body_naming_every_bad_line() {
    let app = spawn_app().await;
    app.declare_orders().await;
    let (body, bad) = ndjson_body();
    let r = app
        .put(
            "/partitions/orders/2026-10-12",
            "application/x-ndjson",
            body,
        )
        .await;
    assert_eq!(r.status(), 422);
    let answer = json_body(r).await;
    let lines: Vec<u64> = answer["errors"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["line"].as_u64().unwrap())
        .collect();
    let expected: Vec<u64> = bad.iter().map(|(line, _)| *line).collect();
    assert_eq!(lines, expected, "{answer}");
    assert_eq!(app.count("orders", "2026-10-12").await, 0);
    let r = app.get("/rejects?table=orders").await;
    assert_eq!(json_body(r).await, serde_json::json!([]), "nothing kept");
}

#[tokio::test]
async fn quarantine_writes_the_good_rows_and_keeps_each_bad_line_byte_for_byte() {
    let app = spawn_app().await;
    app.declare_orders().await;
    let (body, bad) = ndjson_body();
    let r = app
        .put(
            "/partitions/orders/2026-10-12?bad_rows=quarantine",
            "application/x-ndjson",
            body.clone(),
        )
        .await;
    assert_eq!(r.status(), 200);
    let etag = r.headers()["etag"].to_str().unwrap().to_string();
    let receipt = json_body(r).await;
    assert_eq!(receipt["rows_received"], 1000, "{receipt}");
    assert_eq!(receipt["rows_written"], 990, "{receipt}");
    assert_eq!(receipt["rejected"], 10, "{receipt}");
    assert_eq!(app.count("orders", "2026-10-12").await, 990);

    let rejects = linked_rejects(&app, &receipt).await;
    assert_eq!(rejects.len(), 10);
    for (reject, ((line, text), (_, column))) in rejects.iter().zip(bad.iter().zip(BAD_NDJSON)) {
        assert_eq!(reject["line"].as_u64(), Some(*line), "{reject}");
        assert_eq!(
            reject["raw"].as_str(),
            Some(*text),
            "byte for byte: {reject}"
        );
        assert_eq!(reject["status"], "pending");
        assert_eq!(reject["tries"], 1);
        assert_eq!(reject["ds"], "2026-10-12");
        assert_eq!(reject["format"], "ndjson");
        assert_eq!(reject["load_id"], receipt["load_id"]);
        let columns: Vec<&str> = reject["errors"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|e| e["column"].as_str())
            .collect();
        match column {
            Some(column) => assert!(columns.contains(&column), "{reject}"),
            None => assert!(columns.is_empty(), "{reject}"),
        }
    }
    // The line with two bad values names both.
    assert_eq!(rejects[9]["errors"].as_array().unwrap().len(), 2);

    // The day's ETag is its rows' content: what GET gives back, PUT takes
    // back unchanged.
    let r = app.get("/partitions/orders/2026-10-12").await;
    assert_eq!(r.headers()["etag"].to_str().unwrap(), etag);
    let rows = r.text().await.unwrap();
    assert_eq!(rows.lines().count(), 990);
    let r = app
        .put(
            "/partitions/orders/2026-10-12",
            "application/x-ndjson",
            rows,
        )
        .await;
    let reput_etag = r.headers()["etag"].to_str().unwrap().to_string();
    let reput = json_body(r).await;
    assert_eq!(reput_etag, etag, "{reput}");
    assert_eq!(reput["changed"], false);

    // The same body again is the same load's answer; nothing more is kept.
    let r = app
        .put(
            "/partitions/orders/2026-10-12?bad_rows=quarantine",
            "application/x-ndjson",
            body,
        )
        .await;
    let again = json_body(r).await;
    assert_eq!(again["rejected"], 10, "{again}");
    let all = json_body(app.get("/rejects?table=orders").await).await;
    assert_eq!(all.as_array().unwrap().len(), 10);
}

/// A CSV body of 1,000 records, ten of them bad (one with a quoted newline,
/// one with a doubled quote, one short of a field), and the bad records as
/// sent with the line each starts on.
fn csv_body() -> (String, Vec<(u64, String)>) {
    let header = "order_id,ds,customer_id,status,amount,updated_at,note";
    let mut body = format!("{header}\r\n");
    let mut line = 2u64;
    let mut bad = Vec::new();
    for record in 1..=1000u64 {
        let text = if record % 100 == 7 {
            match record / 100 {
                0 => format!("{record},2026-10-12,7,paid,abc,2026-10-12T01:00:00Z,"),
                1 => format!(
                    "{record},2026-10-12,7,paid,zz,2026-10-12T01:00:00Z,\"line one\r\nline two\""
                ),
                2 => format!("{record},2026-10-12,7,paid,1,2026-10-12T01:00:00Z"),
                3 => {
                    format!("{record},2026-10-12,x,paid,1,2026-10-12T01:00:00Z,\"say \"\"hi\"\"\"")
                }
                4 => format!("{record},2026-10-12,7,paid,1,never,"),
                5 => ",2026-10-12,7,paid,1,2026-10-12T01:00:00Z,".to_string(),
                6 => format!("{record},2026-10-12,7,paid,1,2026-10-12T01:00:00Z,,extra"),
                7 => format!("{record},2026-10-12,99999999999999999999,paid,1,,"),
                8 => format!("{record},2026-10-12,7,paid,NaNx,2026-10-12T01:00:00Z,\"a,b\""),
                _ => format!("{record},2026-10-12,q,paid,w,2026-10-12T01:00:00Z,"),
            }
        } else {
            format!("{record},2026-10-12,7,paid,10.50,2026-10-12T01:00:00Z,ok")
        };
        if record % 100 == 7 {
            bad.push((line, text.clone()));
        }
        line += 1 + u64::try_from(text.matches('\n').count()).unwrap();
        body.push_str(&text);
        body.push_str("\r\n");
    }
    (body, bad)
}

#[tokio::test]
async fn a_quarantined_csv_record_keeps_its_quotes_newlines_and_header() {
    let app = spawn_app().await;
    let declaration = ORDERS.replace(
        r#""cursor": "updated_at"}"#,
        r#""cursor": "updated_at", "bad_rows": "quarantine"}"#,
    );
    assert_eq!(app.declare("orders", &declaration).await.status(), 201);
    let table = json_body(app.get("/tables/orders").await).await;
    assert_eq!(table["bad_rows"], "quarantine", "{table}");
    assert_eq!(table["reject_retry_window"], "72h", "{table}");

    let (body, bad) = csv_body();
    let r = app
        .put("/partitions/orders/2026-10-12", "text/csv", body.clone())
        .await;
    assert_eq!(r.status(), 200);
    let receipt = json_body(r).await;
    assert_eq!(
        (
            receipt["rows_written"].as_u64(),
            receipt["rejected"].as_u64()
        ),
        (Some(990), Some(10)),
        "{receipt}"
    );
    assert_eq!(app.count("orders", "2026-10-12").await, 990);
    let rejects = linked_rejects(&app, &receipt).await;
    assert_eq!(rejects.len(), 10);
    for (reject, (line, text)) in rejects.iter().zip(&bad) {
        assert_eq!(reject["raw"].as_str(), Some(text.as_str()), "{reject}");
        assert_eq!(reject["line"].as_u64(), Some(*line), "{reject}");
        assert_eq!(reject["format"], "csv");
        assert_eq!(
            reject["csv_header"],
            "order_id,ds,customer_id,status,amount,updated_at,note"
        );
        assert!(!reject["errors"].as_array().unwrap().is_empty());
    }
    // Under `reject`, asked for by the request, the same body is refused.
    let r = app
        .put(
            "/partitions/orders/2026-10-12?bad_rows=reject",
            "text/csv",
            body,
        )
        .await;
    assert_eq!(r.status(), 422);
    assert_eq!(json_body(r).await["errors"].as_array().unwrap().len(), 10);
    assert_eq!(app.count("orders", "2026-10-12").await, 990, "unchanged");
}

#[tokio::test]
async fn a_quarantined_post_writes_its_good_rows_and_lists_its_rejects_as_ndjson() {
    let app = spawn_app().await;
    app.declare_orders().await;
    let good = order(1, "paid", "2026-10-12T01:00:00Z");
    let body = format!("{good}\n{}\n{good}\n", BAD_NDJSON[0].0);
    let post = |key: &'static str, body: String| {
        app.client
            .post(app.url("/rows?table=orders&bad_rows=quarantine"))
            .header("content-type", "application/x-ndjson")
            .header("idempotency-key", key)
            .body(body)
            .send()
    };
    let r = post("q1", body.clone()).await.unwrap();
    assert_eq!(r.status(), 200);
    let receipt = json_body(r).await;
    assert_eq!(receipt["inserted"], 1, "{receipt}");
    assert_eq!(receipt["rejected"], 1, "{receipt}");
    // A retry under the same key is a replay: no second reject.
    let again = json_body(post("q1", body).await.unwrap()).await;
    assert_eq!(again["replayed"], true);
    let r = app
        .client
        .get(app.url("/rejects?table=orders&status=pending"))
        .header("accept", "application/x-ndjson")
        .send()
        .await
        .unwrap();
    assert_eq!(r.headers()["content-type"], "application/x-ndjson");
    let text = r.text().await.unwrap();
    let lines: Vec<Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 1, "{text}");
    assert_eq!(lines[0]["raw"], BAD_NDJSON[0].0);
    assert_eq!(lines[0]["line"], 2);
    assert_eq!(lines[0]["origin"], "post");
    assert_eq!(lines[0]["idempotency_key"], "q1");
    assert_eq!(lines[0]["ds"], "2026-10-12");
    // A row of all-bad rows writes nothing and keeps them all.
    let r = post("q2", format!("{}\n{}\n", BAD_NDJSON[1].0, BAD_NDJSON[5].0))
        .await
        .unwrap();
    let receipt = json_body(r).await;
    assert_eq!(
        (
            receipt["rows_written"].as_u64(),
            receipt["rejected"].as_u64()
        ),
        (Some(0), Some(2)),
        "{receipt}"
    );
    for bad in ["status=nope", "since=yesterday", "cursor=x", "limit=0"] {
        let r = app.get(&format!("/rejects?{bad}")).await;
        assert_eq!(r.status(), 400, "{bad}");
    }
}

const EVENTS: &str = r#"{"columns": {"id": "bigint", "ds": "date", "qty": "integer", "note": "text"},
  "primary_key": ["id"], "bad_rows": "quarantine"}"#;

fn event(id: i64, qty: Value) -> Value {
    serde_json::json!({"id": id, "ds": "2026-10-12", "qty": qty, "note": "n"})
}

async fn replay(app: &TestApp, key: &str) -> reqwest::Response {
    app.client
        .post(app.url("/rejects/replay?table=events"))
        .header("idempotency-key", key)
        .send()
        .await
        .unwrap()
}

async fn rejects_of(app: &TestApp, query: &str) -> Vec<Value> {
    let r = app.get(&format!("/rejects?table=events{query}")).await;
    serde_json::from_value(json_body(r).await).unwrap()
}

#[tokio::test]
async fn a_reject_replayed_after_its_column_was_widened_is_written_once() {
    let app = spawn_app().await;
    assert_eq!(app.declare("events", EVENTS).await.status(), 201);
    let rows = [
        event(1, 5.into()),
        event(2, 5_000_000_000i64.into()),
        event(3, "abc".into()),
    ];
    let receipt = json_body(app.post_rows("table=events", Some("p1"), &rows).await).await;
    assert_eq!(
        (receipt["inserted"].as_u64(), receipt["rejected"].as_u64()),
        (Some(1), Some(2)),
        "{receipt}"
    );

    // Before the fix, a replay tries both and writes neither.
    let r0 = json_body(replay(&app, "r0").await).await;
    assert_eq!(
        (
            r0["tried"].as_u64(),
            r0["rows_replayed"].as_u64(),
            r0["still_pending"].as_u64()
        ),
        (Some(2), Some(0), Some(2)),
        "{r0}"
    );
    let pending = rejects_of(&app, "&status=pending").await;
    assert!(pending.iter().all(|r| r["tries"] == 2), "{pending:?}");

    // Widen qty; the replay writes the row that now fits, once.
    let widened = EVENTS.replace(r#""qty": "integer""#, r#""qty": "bigint""#);
    assert_eq!(app.declare("events", &widened).await.status(), 200);
    let r1 = replay(&app, "r1").await;
    assert_eq!(r1.status(), 200);
    let r1 = json_body(r1).await;
    assert_eq!(
        (
            r1["tried"].as_u64(),
            r1["rows_replayed"].as_u64(),
            r1["still_pending"].as_u64()
        ),
        (Some(2), Some(1), Some(1)),
        "{r1}"
    );
    assert_eq!(r1["inserted"], 1, "{r1}");
    let stored: Vec<(i64, i64)> =
        sqlx::query_as("select id, qty from idem_data.events order by id")
            .fetch_all(&app.db)
            .await
            .unwrap();
    assert_eq!(stored, [(1, 5), (2, 5_000_000_000)]);
    let replayed = rejects_of(&app, "&status=replayed").await;
    assert_eq!(replayed.len(), 1);
    assert_eq!(replayed[0]["replayed_by"], r1["load_id"]);
    assert_eq!(replayed[0]["tries"], 3);
    let still = rejects_of(&app, "&status=pending").await;
    assert_eq!(still.len(), 1);
    assert_eq!(still[0]["tries"], 3);
    assert_eq!(still[0]["errors"][0]["column"], "qty", "{still:?}");

    // The same key again: its answer replayed, nothing written or tried.
    let again = replay(&app, "r1").await;
    assert_eq!(again.headers()["idempotent-replayed"], "true");
    let again = json_body(again).await;
    assert_eq!(again["replayed"], true);
    assert_eq!(again["rows_replayed"], 1);
    assert_eq!(rejects_of(&app, "&status=pending").await[0]["tries"], 3);
    // The ledger knows the replay as a load.
    let load = json_body(
        app.get(&format!("/loads/{}", r1["load_id"].as_str().unwrap()))
            .await,
    )
    .await;
    assert_eq!(load["mode"], "replay", "{load}");

    // Past the retry window the last one expires, and is no longer tried.
    sqlx::query("update idem.rejects set received_at = now() - interval '73 hours' where status = 'pending'")
        .execute(&app.db)
        .await
        .unwrap();
    let r2 = json_body(replay(&app, "r2").await).await;
    assert_eq!(
        (r2["expired"].as_u64(), r2["tried"].as_u64()),
        (Some(1), Some(0)),
        "{r2}"
    );
    let r3 = json_body(replay(&app, "r3").await).await;
    assert_eq!(
        (
            r3["expired"].as_u64(),
            r3["tried"].as_u64(),
            r3["changed"].as_bool()
        ),
        (Some(0), Some(0), Some(false)),
        "nothing pending: {r3}"
    );
    assert_eq!(rejects_of(&app, "&status=expired").await.len(), 1);
    let r = app
        .client
        .delete(app.url("/rejects?table=events&status=expired"))
        .send()
        .await
        .unwrap();
    assert_eq!(json_body(r).await["deleted"], 1);
    assert_eq!(
        rejects_of(&app, "").await.len(),
        1,
        "the replayed one stays"
    );
    let r = replay(&app, "").await;
    assert_eq!(r.status(), 400, "a replay needs a key");
}

#[tokio::test]
async fn a_quarantined_put_and_its_replay_keep_the_etag_equal_to_the_rows() {
    let app = spawn_app().await;
    assert_eq!(app.declare("events", EVENTS).await.status(), 201);
    let rows = [
        event(1, 5.into()),
        event(2, 5_000_000_000i64.into()),
        event(3, 7.into()),
    ];
    let r = app.put_ndjson("/partitions/events/2026-10-12", &rows).await;
    let receipt = json_body(r).await;
    assert_eq!(
        (
            receipt["rows_written"].as_u64(),
            receipt["rejected"].as_u64()
        ),
        (Some(2), Some(1)),
        "{receipt}"
    );
    let widened = EVENTS.replace(r#""qty": "integer""#, r#""qty": "bigint""#);
    assert_eq!(app.declare("events", &widened).await.status(), 200);
    let r1 = json_body(replay(&app, "r1").await).await;
    assert_eq!(r1["rows_replayed"], 1, "{r1}");
    assert_eq!(r1["partitions"][0]["ds"], "2026-10-12", "{r1}");

    // What GET gives back (its ETag and rows), PUT takes back unchanged.
    let r = app.get("/partitions/events/2026-10-12").await;
    let etag = r.headers()["etag"].to_str().unwrap().to_string();
    let text = r.text().await.unwrap();
    assert_eq!(text.lines().count(), 3);
    let r = app
        .put(
            "/partitions/events/2026-10-12",
            "application/x-ndjson",
            text,
        )
        .await;
    assert_eq!(r.headers()["etag"].to_str().unwrap(), etag);
    assert_eq!(json_body(r).await["changed"], false);
    // A new PUT of the day supersedes what is left of the old one's rejects.
    for bad in ["bad", "worse"] {
        let rows = [event(1, 5.into()), event(4, bad.into())];
        app.put_ndjson("/partitions/events/2026-10-12", &rows).await;
    }
    let statuses: Vec<String> = rejects_of(&app, "")
        .await
        .iter()
        .map(|r| r["status"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(statuses, ["replayed", "superseded", "pending"]);
}

#[tokio::test]
async fn a_replay_writes_by_the_mode_the_post_asked_for_and_keeps_a_put_reject_in_its_day() {
    let app = spawn_app().await;
    assert_eq!(app.declare("events", EVENTS).await.status(), 201);
    app.post_rows("table=events", Some("p0"), &[event(1, 5.into())])
        .await;
    // A patch of qty alone, too wide for its column.
    let patch = [serde_json::json!({"id": 1, "ds": "2026-10-12", "qty": 5_000_000_000i64})];
    let r = app
        .post_rows("table=events&mode=patch", Some("p1"), &patch)
        .await;
    assert_eq!(json_body(r).await["rejected"], 1);
    // A PUT of the 12th with a row of the 13th.
    let other_day = serde_json::json!({"id": 7, "ds": "2026-10-13", "qty": 1, "note": "n"});
    let r = app
        .put_ndjson(
            "/partitions/events/2026-10-12",
            &[event(1, 5.into()), other_day],
        )
        .await;
    assert_eq!(json_body(r).await["rejected"], 1);
    let rejects = rejects_of(&app, "&status=pending").await;
    let modes: Vec<&Value> = rejects.iter().map(|r| &r["mode"]).collect();
    assert_eq!(modes, [&Value::from("patch"), &Value::Null]);
    assert_eq!(
        rejects[1]["ds"], "2026-10-12",
        "a PUT's reject is its day's"
    );

    let widened = EVENTS.replace(r#""qty": "integer""#, r#""qty": "bigint""#);
    assert_eq!(app.declare("events", &widened).await.status(), 200);
    let receipt = json_body(replay(&app, "r1").await).await;
    assert_eq!(
        (
            receipt["rows_replayed"].as_u64(),
            receipt["still_pending"].as_u64()
        ),
        (Some(1), Some(1)),
        "{receipt}"
    );
    // The patch changed qty and left note as it was.
    let row: (i64, Option<String>) =
        sqlx::query_as("select qty, note from idem_data.events where id = 1")
            .fetch_one(&app.db)
            .await
            .unwrap();
    assert_eq!(row, (5_000_000_000, Some("n".to_string())));
    // The row of another day stays out of both days.
    let days: i64 = sqlx::query_scalar("select count(*) from idem_data.events where id = 7")
        .fetch_one(&app.db)
        .await
        .unwrap();
    assert_eq!(days, 0);
    // Dropping the day supersedes its pending rejects.
    let r = app
        .client
        .delete(app.url("/partitions/events/2026-10-12"))
        .send()
        .await
        .unwrap();
    assert!(r.status().is_success());
    assert!(rejects_of(&app, "&status=pending").await.is_empty());
}
