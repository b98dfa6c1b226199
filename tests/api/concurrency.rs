//! Many writers into one day at once: merges of overlapping keys with
//! random cursors, tombstones, insert_missing and appends, and a PUT racing
//! them. Whatever the interleaving, the day's registered count and hash are
//! those of its rows, the cursor rule holds, and re-sending the day as it
//! stands changes nothing.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};

use serde_json::{json, Value};

use crate::helpers::*;
use crate::support::*;
use idem::ingest::ContentHash;

const DAY: &str = "2026-10-12";
const WRITERS: usize = 32;
const REQUESTS: usize = 100;
/// Keys merged with random cursors; then keys only tombstones touch; then
/// keys only insert_missing sends.
const MERGED: std::ops::Range<i64> = 1..151;
const TOMBSTONED: std::ops::Range<i64> = 151..201;
const MISSING: std::ops::Range<i64> = 201..261;

const EVENTS: &str = r#"{"columns": {"batch": "text", "n": "bigint", "ds": "date"},
  "partition_by": "ds"}"#;

/// A version of an order whose cursor is `cursor` seconds into the day.
fn version(id: i64, cursor: u32, writer: usize) -> Value {
    let mut row = order(id, &format!("v{cursor}"), &at(cursor));
    row["note"] = json!(format!("writer {writer}"));
    row
}

fn at(cursor: u32) -> String {
    format!(
        "{DAY}T{:02}:{:02}:{:02}Z",
        cursor / 3600,
        cursor / 60 % 60,
        cursor % 60
    )
}

/// A small deterministic generator, one per writer.
struct Lcg(u64);

impl Lcg {
    fn below(&mut self, n: u64) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (self.0 >> 33) % n
    }

    fn key(&mut self, range: &std::ops::Range<i64>) -> i64 {
        let span = u64::try_from(range.end - range.start).unwrap();
        range.start + i64::try_from(self.below(span)).unwrap()
    }
}

/// What the writers sent, for the checks afterwards.
#[derive(Default)]
struct Sent {
    /// The largest cursor merged into each key (answered 200).
    largest: BTreeMap<i64, u32>,
    tombstoned: BTreeSet<i64>,
    /// Every version insert_missing sent of a key.
    missing: BTreeMap<i64, Vec<Value>>,
    appended: u64,
}

async fn post(app: &TestApp, query: &str, key: &str, rows: &[Value]) -> Value {
    let r = app.post_rows(query, Some(key), rows).await;
    assert_eq!(r.status(), 200, "{}", r.text().await.unwrap());
    json_body(r).await
}

/// One writer's requests: a mix of merges (2 to 5 rows of overlapping keys),
/// tombstones, insert_missing and appends.
async fn writer(app: Arc<TestApp>, sent: Arc<Mutex<Sent>>, writer: usize) {
    let mut rng = Lcg(writer as u64 * 7919 + 1);
    for request in 0..REQUESTS {
        let key = format!("w{writer}-r{request}");
        match rng.below(10) {
            0..=5 => {
                let rows: Vec<(i64, u32)> = (0..2 + rng.below(4))
                    .map(|_| {
                        (
                            rng.key(&MERGED),
                            u32::try_from(1 + rng.below(80_000)).unwrap(),
                        )
                    })
                    .collect();
                let body: Vec<Value> = rows.iter().map(|&(id, c)| version(id, c, writer)).collect();
                post(&app, "table=orders&mode=merge", &key, &body).await;
                let mut sent = sent.lock().unwrap();
                for (id, cursor) in rows {
                    let largest = sent.largest.entry(id).or_default();
                    *largest = (*largest).max(cursor);
                }
            }
            6 => {
                let id = rng.key(&TOMBSTONED);
                let mut tombstone = version(id, 86_000, writer);
                tombstone["_deleted"] = json!(true);
                post(&app, "table=orders&mode=merge", &key, &[tombstone]).await;
                sent.lock().unwrap().tombstoned.insert(id);
            }
            7 => {
                let id = rng.key(&MISSING);
                let row = version(id, u32::try_from(rng.below(80_000)).unwrap(), writer);
                post(
                    &app,
                    "table=orders&mode=insert_missing",
                    &key,
                    std::slice::from_ref(&row),
                )
                .await;
                sent.lock()
                    .unwrap()
                    .missing
                    .entry(id)
                    .or_default()
                    .push(row);
            }
            _ => {
                let rows: Vec<Value> = (0..3)
                    .map(|n| json!({"batch": key, "n": n, "ds": DAY}))
                    .collect();
                post(&app, "table=events&mode=append", &key, &rows).await;
                sent.lock().unwrap().appended += 3;
            }
        }
    }
}

/// The day's rows read back, its ETag and row count, and a recomputation
/// of its content hash from the stored rows' hashes.
struct Day {
    /// The rows as sent, and parsed (numbers as f64: only for looking).
    text: String,
    lines: Vec<Value>,
    etag: String,
    row_count: u64,
    recomputed: ContentHash,
}

async fn read_day(app: &TestApp, table: &str) -> Day {
    let r = app.get(&format!("/partitions/{table}/{DAY}")).await;
    assert_eq!(r.status(), 200);
    let etag = r.headers()["etag"]
        .to_str()
        .unwrap()
        .trim_matches('"')
        .to_string();
    let row_count = r.headers()["idem-row-count"]
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    let text = r.text().await.unwrap();
    let lines = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let hashes: Vec<Vec<u8>> = sqlx::query_scalar(&format!(
        "select \"_row_hash\" from idem_data.{table} where ds = '{DAY}'"
    ))
    .fetch_all(&app.db)
    .await
    .unwrap();
    let mut recomputed = ContentHash::default();
    for hash in hashes {
        recomputed.add(&hash.try_into().unwrap());
    }
    Day {
        text,
        lines,
        etag,
        row_count,
        recomputed,
    }
}

/// The registry agrees with the rows, and the rows sent back change nothing.
async fn assert_settled(app: &TestApp, table: &str) -> Day {
    let day = read_day(app, table).await;
    assert_eq!(day.row_count, day.recomputed.rows(), "{table}: row count");
    assert_eq!(u64::try_from(day.lines.len()).unwrap(), day.row_count);
    assert_eq!(
        day.etag,
        day.recomputed.hex(),
        "{table}: ETag of the stored rows"
    );
    // The text itself: parsed, `10.50` would come back as `10.5`.
    let path = format!("/partitions/{table}/{DAY}");
    let again = app
        .put(&path, "application/x-ndjson", day.text.clone())
        .await;
    assert_eq!(again.status(), 200);
    let again = json_body(again).await;
    assert_eq!(
        again["changed"], false,
        "{table}: re-sending the day as read: {again}"
    );
    assert_eq!(again["content_sha256"].as_str(), Some(day.etag.as_str()));
    day
}

async fn start() -> Arc<TestApp> {
    let app = spawn_app().await;
    app.declare_orders().await;
    assert!(app.declare("events", EVENTS).await.status().is_success());
    // The day starts with every merged and tombstoned key at cursor 0.
    let first: Vec<Value> = MERGED
        .chain(TOMBSTONED)
        .map(|id| version(id, 0, 0))
        .collect();
    assert_eq!(
        app.put_ndjson(&format!("/partitions/orders/{DAY}"), &first)
            .await
            .status(),
        200
    );
    Arc::new(app)
}

async fn run_writers(app: &Arc<TestApp>, sent: &Arc<Mutex<Sent>>) {
    let tasks: Vec<_> = (0..WRITERS)
        .map(|w| tokio::spawn(writer(app.clone(), sent.clone(), w)))
        .collect();
    for task in tasks {
        task.await.expect("a writer finished");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn thirty_two_writers_into_one_day_leave_it_exact() {
    let app = start().await;
    let sent = Arc::new(Mutex::new(Sent::default()));
    run_writers(&app, &sent).await;
    let sent = std::mem::take(&mut *sent.lock().unwrap());

    let day = assert_settled(&app, "orders").await;
    let by_id: BTreeMap<i64, &Value> = day
        .lines
        .iter()
        .map(|row| (row["order_id"].as_i64().unwrap(), row))
        .collect();
    for id in MERGED {
        let expected = sent.largest.get(&id).copied().unwrap_or(0);
        // A version's status names its cursor.
        assert_eq!(
            by_id[&id]["status"],
            format!("v{expected}"),
            "order {id}: the largest cursor wins"
        );
    }
    for id in TOMBSTONED {
        assert_eq!(
            by_id.contains_key(&id),
            !sent.tombstoned.contains(&id),
            "order {id}"
        );
    }
    for id in MISSING {
        match (sent.missing.get(&id), by_id.get(&id)) {
            (None, stored) => assert!(stored.is_none(), "order {id} was never sent"),
            // One of the versions sent (status and note tell which).
            (Some(versions), Some(stored)) => assert!(
                versions
                    .iter()
                    .any(|v| v["status"] == stored["status"] && v["note"] == stored["note"]),
                "order {id}: {stored} is none of {versions:?}"
            ),
            (Some(_), None) => panic!("order {id} was sent with insert_missing and is absent"),
        }
    }
    let events = assert_settled(&app, "events").await;
    assert_eq!(events.row_count, sent.appended);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_put_racing_the_writers_keeps_its_body_and_the_writes_after_it() {
    let app = start().await;
    let sent = Arc::new(Mutex::new(Sent::default()));
    let writers = {
        let (app, sent) = (app.clone(), sent.clone());
        tokio::spawn(async move { run_writers(&app, &sent).await })
    };
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    // The PUT's body: keys of their own, cursor 1 (older than every merge).
    let body: Vec<Value> = (1000..1100).map(|id| version(id, 1, 99)).collect();
    let put = json_body(
        app.put_ndjson(&format!("/partitions/orders/{DAY}"), &body)
            .await,
    )
    .await;
    let put_load = put["load_id"].as_str().unwrap().to_string();
    writers.await.unwrap();

    let day = assert_settled(&app, "orders").await;
    let ids: BTreeSet<i64> = day
        .lines
        .iter()
        .map(|r| r["order_id"].as_i64().unwrap())
        .collect();
    assert!(
        (1000..1100).all(|id| ids.contains(&id)),
        "the PUT's rows stay: no writer touches them"
    );
    // Every other row was written by a POST that committed after the swap:
    // its load id is a POST's, not the first PUT's.
    let first_put: Vec<String> = sqlx::query_scalar(
        "select load_id::text from idem.loads where mode = 'replace' and load_id::text <> $1",
    )
    .bind(&put_load)
    .fetch_all(&app.db)
    .await
    .unwrap();
    let loads: Vec<String> = sqlx::query_scalar(&format!(
        "select distinct \"_load_id\"::text from idem_data.orders where ds = '{DAY}'"
    ))
    .fetch_all(&app.db)
    .await
    .unwrap();
    assert!(loads.contains(&put_load));
    assert!(
        loads.iter().all(|l| !first_put.contains(l)),
        "no row of the day before the PUT survives it"
    );
}

/// Small POSTs sent at once are written together (several per
/// transaction), yet each is answered and recorded as if alone: its own
/// counts, its own ledger row and key, a replay of its own answer; and with
/// batching off, the same requests leave the same day.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn posts_written_together_are_each_answered_and_recorded_alone() {
    let batched = spawn_app().await;
    let alone = spawn_app_with(idem::config::Settings {
        batch_writes: false,
        ..Default::default()
    })
    .await;
    let mut days = Vec::new();
    for (app, batching) in [(batched, true), (alone, false)] {
        let app = Arc::new(app);
        app.declare_orders().await;
        // Request i inserts order 1000 + i and, from the second on, updates
        // order 1000 + i - 1 (a newer version): 40 requests at once.
        let sends = (0..40i64).map(|i| {
            let app = app.clone();
            async move {
                let mut rows = vec![version(1000 + i, 10, 0)];
                if i > 0 {
                    rows.push(version(1000 + i - 1, 20, 1));
                }
                let key = format!("together-{i}");
                let receipt = post(&app, "table=orders&mode=merge", &key, &rows).await;
                (i, key, rows, receipt)
            }
        });
        let answers = futures::future::join_all(sends).await;
        for (i, key, rows, receipt) in &answers {
            assert_eq!(receipt["rows_received"], json!(rows.len()), "request {i}");
            let written =
                receipt["inserted"].as_u64().unwrap() + receipt["updated"].as_u64().unwrap();
            assert_eq!(receipt["rows_written"], json!(written), "request {i}");
            let load = json_body(
                app.get(&format!("/loads/{}", receipt["load_id"].as_str().unwrap()))
                    .await,
            )
            .await;
            assert_eq!(
                load["rows_written"], receipt["rows_written"],
                "request {i}'s ledger row"
            );
            assert_eq!(load["idempotency_key"], json!(key));
            let replay = app
                .post_rows("table=orders&mode=merge", Some(key), rows)
                .await;
            assert_eq!(replay.headers()["idempotent-replayed"], "true");
            let mut replayed = json_body(replay).await;
            replayed["replayed"] = json!(false);
            assert_eq!(&replayed, receipt, "request {i}'s replay is its own answer");
        }
        // Every order ends at its newest version, and the day is exact.
        let inserted: u64 = answers
            .iter()
            .map(|a| a.3["inserted"].as_u64().unwrap())
            .sum();
        let deltas: i64 = answers
            .iter()
            .map(|a| a.3["partitions"][0]["row_delta"].as_i64().unwrap())
            .sum();
        assert_eq!(inserted, 40);
        assert_eq!(deltas, 40);
        days.push(assert_settled(&app, "orders").await);
        let metrics = app.get("/metrics").await.text().await.unwrap();
        let figure = |name: &str| -> u64 {
            metrics
                .lines()
                .find(|l| l.starts_with(&format!("{name}{{table=\"orders\"}}")))
                .map_or(0, |l| l.rsplit(' ').next().unwrap().parse().unwrap())
        };
        let (batches, posts) = (
            figure("idem_post_batches_total"),
            figure("idem_post_batches_posts_total"),
        );
        if batching {
            assert!(
                posts > batches,
                "some batch wrote several POSTs ({posts} in {batches})"
            );
        } else {
            assert_eq!(posts, 0, "no batches when batching is off");
        }
    }
    assert_eq!(days[0].etag, days[1].etag, "batched or not, the same day");
    assert_eq!(days[0].row_count, 40);
}

/// A server decodes small POSTs for the table definition it read last; a
/// table changed since (here by a declaration, as another process's would)
/// is found before anything is written, and the POST is written for the
/// table as it is: a value only the widened column holds, a field only the
/// new column takes, and a value both hold, stored in the new type. The
/// same as a server that writes each POST alone.
#[tokio::test]
async fn a_post_after_the_table_changed_is_written_for_the_table_as_it_is() {
    for batch_writes in [true, false] {
        let settings = idem::config::Settings {
            batch_writes,
            ..Default::default()
        };
        let app = spawn_app_with(settings).await;
        let declare = |columns: &'static str| {
            let app = &app;
            async move {
                let declaration = format!(
                    r#"{{"columns": {{{columns}}}, "partition_by": "ds", "primary_key": ["id"]}}"#
                );
                assert!(app
                    .declare("counts", &declaration)
                    .await
                    .status()
                    .is_success());
            }
        };
        let post = |key: &'static str, row: Value| {
            let app = &app;
            async move {
                let r = app.post_rows("table=counts", Some(key), &[row]).await;
                assert_eq!(r.status(), 200, "{key}: {}", r.text().await.unwrap());
            }
        };
        let row = |id: i64, n: i64| json!({"id": id, "ds": DAY, "n": n});
        declare(r#""id": "bigint", "ds": "date", "n": "integer""#).await;
        post("c-1", row(1, 1)).await;
        // Widened: a row that decodes for the old definition too.
        declare(r#""id": "bigint", "ds": "date", "n": "bigint""#).await;
        post("c-2", row(2, 2)).await;
        post("c-3", row(3, 5_000_000_000)).await;
        // A new column: a row the old definition refuses.
        declare(r#""id": "bigint", "ds": "date", "n": "bigint", "extra": "text""#).await;
        post("c-4", json!({"id": 4, "ds": DAY, "n": 4, "extra": "new"})).await;
        let stored: Vec<(i64, i64, Option<String>)> =
            sqlx::query_as("select id, n, extra from idem_data.counts order by id")
                .fetch_all(&app.db)
                .await
                .unwrap();
        let expected = [
            (1, 1, None),
            (2, 2, None),
            (3, 5_000_000_000, None),
            (4, 4, Some("new".to_string())),
        ];
        assert_eq!(stored, expected, "batch_writes {batch_writes}");
    }
}
