//! `"history": "scd2"`: every version of each key kept beside the current
//! rows, by every write path, and read back with its validity range at
//! `GET /tables/{table}/history/rows`.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::{json, Value};

use crate::helpers::*;
use crate::support::*;

const ACCOUNTS: &str = r#"{"columns": {"id": "bigint", "ds": "date", "status": "text",
  "at": "timestamptz"}, "partition_by": "ds", "primary_key": ["id"], "cursor": "at",
  "history": "scd2"}"#;

const DAY: &str = "/partitions/accounts/2026-10-12";

/// An instant of 2026-10-12 as the API renders a timestamptz.
fn at(hour: u32) -> String {
    format!("2026-10-12T{hour:02}:00:00+00:00")
}

fn version(id: i64, status: &str, hour: u32) -> Value {
    json!({"id": id, "ds": "2026-10-12", "status": status, "at": at(hour)})
}

/// An Idempotency-Key no other request of the test process sends.
fn fresh_key() -> String {
    static SENT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = SENT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    format!("history-{n}")
}

async fn declared(declaration: &str) -> TestApp {
    let app = spawn_app().await;
    let r = app.declare("accounts", declaration).await;
    assert!(r.status().is_success(), "{}", r.text().await.unwrap());
    app
}

async fn merge(app: &TestApp, mode: &str, rows: &[Value]) -> Value {
    let r = app
        .post_rows(
            &format!("table=accounts&mode={mode}"),
            Some(&fresh_key()),
            rows,
        )
        .await;
    assert_eq!(r.status(), 200, "{}", r.text().await.unwrap());
    json_body(r).await
}

/// The history read `query` asks for, its versions in the order served.
async fn history(app: &TestApp, query: &str) -> Vec<Value> {
    let r = app
        .get(&format!("/tables/accounts/history/rows?{query}"))
        .await;
    assert_eq!(r.status(), 200, "{query}");
    assert_eq!(r.headers()["content-type"], "application/x-ndjson");
    let text = r.text().await.unwrap();
    text.lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

fn field<'a>(versions: &'a [Value], name: &str) -> Vec<&'a Value> {
    versions.iter().map(|v| &v[name]).collect()
}

/// Each version's range ends where the next begins; only the last is open.
fn assert_contiguous(versions: &[Value]) {
    for pair in versions.windows(2) {
        assert_eq!(pair[0]["_valid_to"], pair[1]["_valid_from"], "{versions:?}");
        assert_eq!(pair[0]["_is_current"], false);
    }
    let last = versions.last().expect("a version");
    assert_eq!(last["_valid_to"], Value::Null);
    assert_eq!(last["_is_current"], true);
}

#[tokio::test]
async fn merged_versions_make_contiguous_ranges_a_late_one_takes_its_place_and_a_repeat_changes_nothing(
) {
    let app = declared(ACCOUNTS).await;
    for (status, hour) in [("a", 1), ("b", 3), ("c", 5)] {
        merge(&app, "merge", &[version(1, status, hour)]).await;
    }
    let versions = history(&app, "key=1").await;
    assert_eq!(field(&versions, "status"), ["a", "b", "c"]);
    assert_eq!(field(&versions, "_valid_from"), [&at(1), &at(3), &at(5)]);
    assert_contiguous(&versions);
    assert!(versions.iter().all(|v| v["_deleted"] == false));

    // A late version lands between its neighbours; the current row stays.
    // Its receipt and ledger count what it stored: a history version.
    let late = merge(&app, "merge", &[version(1, "late", 2)]).await;
    assert_eq!(
        (
            &late["rows_written"],
            &late["unchanged"],
            &late["history_written"]
        ),
        (&json!(0), &json!(1), &json!(1)),
        "{late}"
    );
    assert_eq!(late["changed"], true, "{late}");
    let load_id = late["load_id"].as_str().unwrap();
    let entry = json_body(app.get(&format!("/loads/{load_id}")).await).await;
    assert_eq!(entry["status"], "published", "{entry}");
    let versions = history(&app, "key=1").await;
    assert_eq!(versions[1]["_load_id"], load_id);
    assert_eq!(field(&versions, "status"), ["a", "late", "b", "c"]);
    assert_eq!(versions[0]["_valid_to"], at(2));
    assert_eq!(versions[1]["_valid_to"], at(3));
    assert_contiguous(&versions);
    assert_eq!(app.rows("accounts", "2026-10-12").await[0]["status"], "c");

    let repeat = merge(&app, "merge", &[version(1, "b", 3)]).await;
    assert_eq!(repeat["changed"], false, "{repeat}");
    assert_eq!(repeat.get("history_written"), None, "{repeat}");
    assert_eq!(history(&app, "key=1").await, versions);
    assert_eq!(history(&app, "").await, versions);
}

#[tokio::test]
async fn a_tombstone_is_a_deleted_version_and_as_of_answers_the_version_valid_then() {
    let app = declared(ACCOUNTS).await;
    merge(&app, "merge", &[version(1, "a", 1), version(2, "x", 1)]).await;
    merge(&app, "merge", &[version(1, "b", 3)]).await;
    let tombstone = json!({"id": 1, "ds": "2026-10-12", "at": at(6), "_deleted": true});
    merge(&app, "merge", &[tombstone]).await;

    let versions = history(&app, "key=1").await;
    assert_eq!(field(&versions, "_deleted"), [false, false, true]);
    assert_eq!(versions[2]["status"], Value::Null);
    assert_eq!(versions[2]["_valid_from"], at(6));
    assert_contiguous(&versions);

    let as_of = |hour: u32| format!("as_of=2026-10-12T{hour:02}:00:00Z");
    assert!(
        history(&app, &as_of(0)).await.is_empty(),
        "before the first"
    );
    let at_boundary = history(&app, &format!("key=1&{}", as_of(3))).await;
    assert_eq!(
        field(&at_boundary, "status"),
        ["b"],
        "the newer at a boundary"
    );
    let between = history(&app, &as_of(2)).await;
    assert_eq!(field(&between, "status"), ["a", "x"]);
    let after_delete = history(&app, &as_of(7)).await;
    assert_eq!(
        field(&after_delete, "status"),
        ["x"],
        "key 1 is deleted then"
    );

    // A history's cursor is NOT NULL: a tombstone must say when it happened.
    let tombstone = json!({"id": 2, "ds": "2026-10-12", "_deleted": true});
    let r = app
        .post_rows("table=accounts", Some(&fresh_key()), &[tombstone])
        .await;
    assert_eq!(r.status(), 422);
    assert_eq!(history(&app, "key=2").await.len(), 1);
}

#[tokio::test]
async fn a_put_records_a_changed_key_and_a_removed_one_and_nothing_for_a_kept_one() {
    let app = declared(ACCOUNTS).await;
    let first = [version(1, "a", 1), version(2, "a", 1), version(3, "a", 1)];
    assert_eq!(app.put_ndjson(DAY, &first).await.status(), 200);
    let second = [version(1, "changed", 2), version(3, "a", 1)];
    assert_eq!(app.put_ndjson(DAY, &second).await.status(), 200);

    let versions = history(&app, "").await;
    let of =
        |id: i64| -> Vec<Value> { versions.iter().filter(|v| v["id"] == id).cloned().collect() };
    assert_eq!(field(&of(1), "status"), ["a", "changed"]);
    assert_eq!(field(&of(2), "_deleted"), [false, true]);
    assert!(of(2)[1]["_valid_from"].as_str().unwrap() > at(1).as_str());
    assert_eq!(of(3).len(), 1);
    for id in 1..=3 {
        assert_contiguous(&of(id));
    }

    // Dropping the day removes every key it held.
    let r = app.client.delete(app.url(DAY)).send().await.unwrap();
    assert_eq!(r.status(), 204);
    let versions = history(&app, "ds=2026-10-12").await;
    let current: Vec<&Value> = versions
        .iter()
        .filter(|v| v["_is_current"] == true)
        .collect();
    assert_eq!(current.len(), 3);
    assert!(current.iter().all(|v| v["_deleted"] == true));
}

#[tokio::test]
async fn a_whole_table_put_records_its_changes_as_a_partition_put_does() {
    let app = declared(ACCOUNTS).await;
    merge(&app, "merge", &[version(1, "a", 1), version(2, "a", 1)]).await;
    let r = app
        .put_ndjson("/tables/accounts/rows", &[version(1, "b", 2)])
        .await;
    assert_eq!(r.status(), 200, "{}", r.text().await.unwrap());
    assert_eq!(field(&history(&app, "key=1").await, "status"), ["a", "b"]);
    assert_eq!(
        field(&history(&app, "key=2").await, "_deleted"),
        [false, true]
    );
}

#[tokio::test]
async fn a_patch_records_the_filled_in_version_and_insert_missing_only_what_it_inserted() {
    let app = declared(ACCOUNTS).await;
    merge(&app, "merge", &[version(1, "a", 1)]).await;
    let patch = json!({"id": 1, "ds": "2026-10-12", "at": at(2)});
    merge(&app, "patch", &[patch]).await;
    let versions = history(&app, "key=1").await;
    assert_eq!(field(&versions, "status"), ["a", "a"], "filled in");
    assert_eq!(versions[1]["_valid_from"], at(2));

    merge(
        &app,
        "insert_missing",
        &[version(1, "ignored", 3), version(2, "new", 3)],
    )
    .await;
    assert_eq!(history(&app, "key=1").await, versions);
    assert_eq!(field(&history(&app, "key=2").await, "status"), ["new"]);
}

#[tokio::test]
async fn a_composite_key_is_read_by_each_of_its_columns() {
    let app = declared(
        r#"{"columns": {"region": "text", "id": "bigint", "ds": "date", "status": "text",
  "at": "timestamptz"}, "partition_by": "ds", "primary_key": ["region", "id"], "cursor": "at",
  "history": "scd2"}"#,
    )
    .await;
    let row = |region: &str, status: &str, hour: u32| json!({"region": region, "id": 1, "ds": "2026-10-12", "status": status, "at": at(hour)});
    merge(&app, "merge", &[row("eu", "a", 1), row("us", "x", 1)]).await;
    merge(&app, "merge", &[row("eu", "b", 2)]).await;
    let eu = history(&app, "key.region=eu&key.id=1").await;
    assert_eq!(field(&eu, "status"), ["a", "b"]);
    assert_contiguous(&eu);

    for (query, names) in [
        ("key=1", "key"),
        ("key.region=eu", "key.id"),
        ("key.status=a&key.region=eu&key.id=1", "key.status"),
        ("key.region=eu&key.id=one", "key.id"),
    ] {
        let r = app
            .get(&format!("/tables/accounts/history/rows?{query}"))
            .await;
        assert_eq!(r.status(), 400, "{query}");
        let problem = json_body(r).await;
        assert!(
            problem["detail"].as_str().unwrap().contains(names),
            "{problem}"
        );
    }
}

#[tokio::test]
async fn history_turned_on_later_starts_from_the_stored_rows() {
    let plain = ACCOUNTS.replace("\"history\": \"scd2\"", "\"write_mode\": \"versions\"");
    let app = declared(&plain).await;
    let day = [version(1, "a", 1), version(2, "b", 2)];
    assert_eq!(app.put_ndjson(DAY, &day).await.status(), 200);
    let r = app.get("/tables/accounts/history/rows").await;
    assert_eq!(r.status(), 409);
    assert_eq!(json_body(r).await["code"], "no_history");

    let with_history = plain.replace(
        "\"write_mode\": \"versions\"",
        "\"write_mode\": \"versions\", \"history\": \"scd2\"",
    );
    let r = app.declare("accounts", &with_history).await;
    assert_eq!(r.status(), 200, "{}", r.text().await.unwrap());
    let versions = history(&app, "").await;
    assert_eq!(field(&versions, "status"), ["a", "b"]);
    assert!(versions.iter().all(|v| v["_is_current"] == true));
}

#[tokio::test]
async fn a_new_column_reaches_the_history_and_a_dropped_table_takes_its_history() {
    let app = declared(ACCOUNTS).await;
    merge(&app, "merge", &[version(1, "a", 1)]).await;
    let grown = ACCOUNTS.replace(
        "\"at\": \"timestamptz\"}",
        "\"at\": \"timestamptz\", \"note\": \"text\"}",
    );
    let r = app.declare("accounts", &grown).await;
    assert_eq!(r.status(), 200, "{}", r.text().await.unwrap());
    let mut noted = version(1, "b", 2);
    noted["note"] = json!("hello");
    merge(&app, "merge", &[noted]).await;
    let versions = history(&app, "key=1").await;
    assert_eq!(field(&versions, "note"), [&Value::Null, &json!("hello")]);

    let r = app
        .client
        .delete(app.url("/tables/accounts?confirm=accounts"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let left: Option<String> =
        sqlx::query_scalar("select to_regclass('idem_history.accounts')::text")
            .fetch_one(&app.db)
            .await
            .unwrap();
    assert_eq!(left, None);
}

#[tokio::test]
async fn a_bad_as_of_or_key_is_refused_naming_it_and_an_unknown_table_is_not_found() {
    let app = declared(ACCOUNTS).await;
    for (query, named) in [
        ("as_of=yesterday-ish", "as_of"),
        ("key=x", "key"),
        ("ds=2026-13-01", ""),
    ] {
        let r = app
            .get(&format!("/tables/accounts/history/rows?{query}"))
            .await;
        assert_eq!(r.status(), 400, "{query}");
        let problem = json_body(r).await;
        assert!(
            problem["detail"].as_str().unwrap().contains(named),
            "{problem}"
        );
    }
    let r = app.get("/tables/nothing/history/rows").await;
    assert_eq!(r.status(), 404);
}

/// A small xorshift: the concurrency test's choices, from a printed seed.
struct Choices(u64);

impl Choices {
    fn next(&mut self, below: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % below
    }
}

#[tokio::test]
async fn concurrent_writers_leave_each_key_the_history_of_every_version_sent() {
    let app = declared(ACCOUNTS).await;
    let seed = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .subsec_nanos()
        | 1;
    let seed = u64::from(seed);
    println!("seed {seed}");
    const KEYS: i64 = 50;
    const HOURS: u64 = 12;
    let mut choices = Choices(seed);
    let mut sent: BTreeMap<i64, BTreeSet<u32>> = BTreeMap::new();
    let mut writers = Vec::new();
    for writer in 0..20 {
        let mut bodies = Vec::new();
        for _ in 0..3 {
            let mut body = Vec::new();
            for id in 0..KEYS {
                if choices.next(2) == 0 {
                    continue;
                }
                // A version's content is a function of its key and instant:
                // writers sending the same one send it alike.
                let hour = u32::try_from(choices.next(HOURS)).unwrap();
                sent.entry(id).or_default().insert(hour);
                body.push(version(id, &format!("{id}@{hour}"), hour));
            }
            // Each body in its own order.
            for i in (1..body.len()).rev() {
                body.swap(
                    i,
                    usize::try_from(choices.next(u64::try_from(i + 1).unwrap())).unwrap(),
                );
            }
            bodies.push(body);
        }
        let client = app.client.clone();
        let url = app.url("/rows?table=accounts");
        writers.push(tokio::spawn(async move {
            for body in bodies {
                let r = client
                    .post(&url)
                    .header("content-type", "application/x-ndjson")
                    .header("idempotency-key", fresh_key())
                    .body(ndjson(&body))
                    .send()
                    .await
                    .unwrap();
                assert_eq!(
                    r.status(),
                    200,
                    "writer {writer}: {}",
                    r.text().await.unwrap()
                );
            }
        }));
    }
    for writer in writers {
        writer.await.unwrap();
    }

    let versions = history(&app, "").await;
    let current = app.rows("accounts", "2026-10-12").await;
    for (id, hours) in &sent {
        let of: Vec<Value> = versions
            .iter()
            .filter(|v| v["id"] == *id)
            .cloned()
            .collect();
        let expected: Vec<String> = hours.iter().map(|&h| at(h)).collect();
        assert_eq!(
            field(&of, "_valid_from"),
            expected.iter().collect::<Vec<_>>(),
            "key {id}, seed {seed}"
        );
        for v in &of {
            let hour = &v["_valid_from"].as_str().unwrap()[11..13];
            assert_eq!(
                v["status"],
                format!("{id}@{}", hour.parse::<u32>().unwrap())
            );
        }
        assert_contiguous(&of);
        let stored = current.iter().find(|r| r["id"] == *id).unwrap();
        assert_eq!(
            stored["at"],
            of.last().unwrap()["_valid_from"],
            "key {id}, seed {seed}"
        );
    }
    assert_eq!(
        versions.len(),
        sent.values().map(BTreeSet::len).sum::<usize>()
    );
}

#[tokio::test]
async fn a_plain_table_and_a_monthly_one_keep_history_by_their_keys() {
    let plain = ACCOUNTS.replace("\"partition_by\": \"ds\"", "\"partition_by\": null");
    let app = declared(&plain).await;
    merge(&app, "merge", &[version(1, "a", 1), version(2, "a", 1)]).await;
    merge(&app, "merge", &[version(1, "b", 2)]).await;
    let r = app
        .put_ndjson("/tables/accounts/rows", &[version(1, "b", 2)])
        .await;
    assert_eq!(r.status(), 200, "{}", r.text().await.unwrap());
    let versions = history(&app, "").await;
    let statuses = [json!("a"), json!("b"), json!("a"), Value::Null];
    assert_eq!(
        field(&versions, "status"),
        statuses.iter().collect::<Vec<_>>()
    );
    assert_eq!(field(&versions, "_deleted"), [false, false, false, true]);
    let r = app.get("/tables/accounts/history/rows?ds=2026-10-12").await;
    assert_eq!(r.status(), 400);

    let monthly = ACCOUNTS.replace(
        "\"partition_by\": \"ds\"",
        "\"partition_by\": \"ds\", \"grain\": \"month\"",
    );
    let app = declared(&monthly).await;
    let mut next_day = version(1, "b", 2);
    next_day["ds"] = json!("2026-10-13");
    merge(&app, "merge", &[version(1, "a", 1)]).await;
    merge(&app, "merge", &[next_day]).await;
    let versions = history(&app, "key=1&ds=2026-10").await;
    assert_eq!(field(&versions, "status"), ["a", "b"]);
    assert_eq!(field(&versions, "ds"), ["2026-10-12", "2026-10-13"]);
    assert_contiguous(&versions);
    assert!(history(&app, "ds=2026-11").await.is_empty());
}

#[tokio::test]
async fn a_range_put_and_a_staged_load_record_what_they_change() {
    let app = declared(ACCOUNTS).await;
    let on = |day: &str, mut row: Value| {
        row["ds"] = json!(day);
        row
    };
    let (d12, d13) = ("2026-10-12", "2026-10-13");
    merge(
        &app,
        "merge",
        &[version(1, "a", 1), on(d13, version(2, "a", 1))],
    )
    .await;
    let body = ndjson(&[version(1, "b", 2), on(d13, version(3, "a", 1))]);
    let range = format!("/partitions/accounts?from={d12}&to={d13}");
    let r = app.put(&range, "application/x-ndjson", body).await;
    assert_eq!(r.status(), 200, "{}", r.text().await.unwrap());
    assert_eq!(field(&history(&app, "key=1").await, "status"), ["a", "b"]);
    let two = history(&app, &format!("key=2&ds={d13}")).await;
    assert_eq!(field(&two, "_deleted"), [false, true]);

    let request = json!({"table": "accounts", "target": {"range": {"from": d12, "to": d13}}});
    let r = app
        .client
        .post(app.url("/loads"))
        .header("idempotency-key", fresh_key())
        .json(&request)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 201);
    let load_id = json_body(r).await["load_id"].as_str().unwrap().to_string();
    for (n, day, row) in [
        (1, d12, version(1, "c", 3)),
        (2, d13, on(d13, version(3, "a", 1))),
    ] {
        let path = format!("/loads/{load_id}/parts/{n}?ds={day}");
        let r = app.put_ndjson(&path, &[row]).await;
        assert_eq!(r.status(), 200, "part {n}");
    }
    let r = app
        .client
        .post(app.url(&format!("/loads/{load_id}/publish")))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200, "{}", r.text().await.unwrap());
    let one = history(&app, "key=1").await;
    assert_eq!(field(&one, "status"), ["a", "b", "c"]);
    assert_eq!(one[2]["_load_id"], load_id.as_str());
    assert_eq!(history(&app, "key=3").await.len(), 1, "unchanged");
}

#[tokio::test]
async fn a_versions_table_with_history_records_each_stored_version_once_and_no_conflict() {
    let declaration = r#"{"columns": {"id": "bigint", "ds": "date", "status": "text",
      "at": "timestamptz"}, "partition_by": "ds", "primary_key": ["id"], "cursor": "at",
      "write_mode": "versions", "history": "scd2"}"#;
    let app = declared(declaration).await;
    let trail = [version(1, "pending", 1), version(1, "shipped", 5)];
    let first = merge(&app, "versions", &trail).await;
    assert_eq!(first["inserted"], 2);
    // A late version, then the whole trail again in another order.
    merge(&app, "versions", &[version(1, "paid", 3)]).await;
    let again = merge(&app, "versions", &[trail[1].clone(), trail[0].clone()]).await;
    assert_eq!(again["already_present"], 2);
    // A conflict under quarantine is held, and history does not take it.
    let r = app
        .post_rows(
            "table=accounts&bad_rows=quarantine",
            Some(&fresh_key()),
            &[version(1, "lost", 3)],
        )
        .await;
    assert_eq!(r.status(), 200);
    assert_eq!(json_body(r).await["conflicts"], 1);

    let versions = history(&app, "key=1").await;
    assert_eq!(
        field(&versions, "status"),
        [&json!("pending"), &json!("paid"), &json!("shipped")]
    );
    assert_contiguous(&versions);
    let at_four = history(&app, &format!("key=1&as_of={}", at(4).replace('+', "%2B"))).await;
    assert_eq!(field(&at_four, "status"), [&json!("paid")]);
}

#[tokio::test]
async fn a_key_a_put_removed_and_a_later_version_brought_back_is_current_again() {
    let app = declared(ACCOUNTS).await;
    merge(&app, "merge", &[version(2, "a", 1)]).await;
    let r = app.put_ndjson(DAY, &[version(9, "other", 1)]).await;
    assert_eq!(r.status(), 200, "{}", r.text().await.unwrap());
    merge(&app, "merge", &[version(2, "back", 5)]).await;
    let versions = history(&app, "key=2").await;
    assert_eq!(
        field(&versions, "_deleted"),
        [&json!(false), &json!(true), &json!(false)]
    );
    assert_contiguous(&versions);
    assert_eq!(versions[2]["status"], "back");
    let now = history(&app, &format!("key=2&as_of={}", at(6).replace('+', "%2B"))).await;
    assert_eq!(field(&now, "status"), [&json!("back")]);
}
