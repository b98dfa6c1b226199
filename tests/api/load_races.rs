//! Loads of a week racing other writers and readers: a PUT of one day
//! against a publish of its week, two processes publishing one load, a
//! reader polling the week during publishes, and a load left open past its
//! time swept with its staged rows.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt as _;
use serde_json::{json, Value};
use sqlx::PgPool;

use crate::helpers::*;
use crate::support::*;

const FROM: &str = "2026-10-12";
const TO: &str = "2026-10-18";
const DAYS: u32 = 7;

fn day(d: u32) -> String {
    format!("2026-10-{:02}", 12 + d)
}

/// `rows` orders of day `d`, their status `status`.
fn day_body(d: u32, rows: i64, status: &str) -> String {
    let first = 1 + i64::from(d) * 100_000;
    (first..first + rows)
        .map(|id| order_line(id, &day(d), status))
        .collect()
}

async fn open_week(client: &reqwest::Client, base: &str, key: &str) -> String {
    let request = json!({"table": "orders", "target": {"range": {"from": FROM, "to": TO}}});
    let r = client
        .post(format!("{base}/loads"))
        .header("idempotency-key", key)
        .json(&request)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 201);
    json_body(r).await["load_id"].as_str().unwrap().to_string()
}

/// Sends part `d + 1` = `body(d)` for each day, four at once.
async fn send_parts(
    client: &reqwest::Client,
    base: &str,
    load_id: &str,
    body: impl Fn(u32) -> String,
) {
    let answers: Vec<u16> = futures::stream::iter(0..DAYS)
        .map(|d| {
            client
                .put(format!(
                    "{base}/loads/{load_id}/parts/{}?ds={}",
                    d + 1,
                    day(d)
                ))
                .header("content-type", "application/x-ndjson")
                .body(body(d))
                .send()
        })
        .buffer_unordered(4)
        .map(|r| r.unwrap().status().as_u16())
        .collect()
        .await;
    assert_eq!(answers, vec![200; 7]);
}

async fn publish(client: &reqwest::Client, base: &str, load_id: &str) -> (u16, Value) {
    let r = client
        .post(format!("{base}/loads/{load_id}/publish"))
        .send()
        .await
        .unwrap();
    (r.status().as_u16(), json_body(r).await)
}

/// Each day of the week in ONE statement: its rows, their statuses and the
/// loads they come from.
async fn week(db: &PgPool) -> Vec<(String, i64, Vec<String>, Vec<uuid::Uuid>)> {
    sqlx::query_as(
        "select ds::text, count(*), array_agg(distinct status), array_agg(distinct _load_id)
           from idem_data.orders where ds between $1::date and $2::date group by ds order by ds",
    )
    .bind(FROM)
    .bind(TO)
    .fetch_all(db)
    .await
    .unwrap()
}

async fn staged_tables(db: &PgPool) -> i64 {
    sqlx::query_scalar("select count(*) from pg_tables where schemaname = 'idem_staging'")
        .fetch_one(db)
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_put_of_one_day_racing_a_publish_of_its_week_ends_as_one_of_them_whole() {
    let app = spawn_app().await;
    app.declare_orders().await;
    let (put_day, load_rows, put_rows) = (3, 300, 250);
    let mut won = [0; 2]; // the load's rows, the PUT's
    for round in 0..4u64 {
        let (load, put) = (format!("load{round}"), format!("put{round}"));
        let load_id = open_week(&app.client, &app.base, &format!("race-{round}")).await;
        send_parts(&app.client, &app.base, &load_id, |d| {
            day_body(d, load_rows, &load)
        })
        .await;
        let putting = async {
            // The PUT starts a little later each round, to meet the
            // publish at another step.
            tokio::time::sleep(Duration::from_millis(15 * round)).await;
            let path = format!("/partitions/orders/{}", day(put_day));
            app.put(
                &path,
                "application/x-ndjson",
                day_body(put_day, put_rows, &put),
            )
            .await
            .status()
        };
        let (put_status, (publish_status, receipt)) =
            tokio::join!(putting, publish(&app.client, &app.base, &load_id));
        assert_eq!(put_status, 200, "round {round}");
        assert_eq!(publish_status, 200, "round {round}: {receipt}");

        let days = week(&app.db).await;
        assert_eq!(days.len(), 7);
        for (d, (ds, rows, statuses, loads)) in (0..DAYS).zip(&days) {
            assert_eq!(loads.len(), 1, "round {round}: {ds} mixes loads");
            let whole_load = *rows == load_rows && statuses == std::slice::from_ref(&load);
            let whole_put = *rows == put_rows && statuses == std::slice::from_ref(&put);
            if d != put_day {
                assert!(
                    whole_load,
                    "round {round}: {ds} is {rows} rows of {statuses:?}"
                );
            } else {
                assert!(
                    whole_load || whole_put,
                    "round {round}: {ds} is {rows} rows of {statuses:?}"
                );
                won[usize::from(whole_put)] += 1;
            }
        }
    }
    eprintln!(
        "races: a PUT of one day against a publish of its week: the day ended whole, as the \
         load's {} times, as the PUT's {} times",
        won[0], won[1]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_processes_publishing_one_load_at_once_publish_it_once_and_answer_one_receipt() {
    let (_options, url, _database) = fresh_database_url().await;
    let first = Idem::start(&url, "load-races-publish-1", &[]).await;
    let second = Idem::start(&url, "load-races-publish-2", &[]).await;
    let client = client();
    let db = PgPool::connect(&url).await.unwrap();
    declare_orders(&client, &first.base).await;
    for round in 0..3 {
        let load_id = open_week(&client, &first.base, &format!("twice-{round}")).await;
        let status = format!("r{round}");
        send_parts(&client, &first.base, &load_id, |d| {
            day_body(d, 200, &status)
        })
        .await;
        let ((a_status, a), (b_status, b)) = tokio::join!(
            publish(&client, &first.base, &load_id),
            publish(&client, &second.base, &load_id)
        );
        assert_eq!((a_status, b_status), (200, 200), "round {round}: {a} {b}");
        let replayed = [&a, &b].map(|r| r["replayed"].as_bool().unwrap());
        assert_eq!(
            replayed.iter().filter(|r| **r).count(),
            1,
            "round {round}: {a} {b}"
        );
        let without_replayed = |r: &Value| {
            let mut r = r.clone();
            r.as_object_mut().unwrap().remove("replayed");
            r
        };
        assert_eq!(without_replayed(&a), without_replayed(&b), "round {round}");
        assert_eq!(a["status"], "published");
        let ledger: i64 =
            sqlx::query_scalar("select count(*) from idem.loads where load_id = $1::uuid")
                .bind(&load_id)
                .fetch_one(&db)
                .await
                .unwrap();
        assert_eq!(ledger, 1, "round {round}: ledger rows of the load");
        let days = week(&db).await;
        assert!(days.iter().all(
            |(_, rows, statuses, _)| *rows == 200 && statuses == std::slice::from_ref(&status)
        ));
    }
    assert_eq!(staged_tables(&db).await, 0);
}

/// Rows of day `d` in version `version`: each version's days have counts
/// of their own, so a week of two versions shows in the counts too.
fn version_rows(version: usize, d: u32) -> i64 {
    20 + i64::from(d) + 10 * version as i64
}

fn version_body(version: usize, d: u32) -> String {
    day_body(d, version_rows(version, d), &format!("b{version}"))
}

/// Polls the week, one statement a read, until `stop`: how many loads its
/// rows come from and each day's rows. Panics on a week of two loads or
/// of counts that are neither version's; returns how many reads it made.
async fn poll_week(db: PgPool, stop: Arc<AtomicBool>) -> usize {
    let versions: Vec<Vec<i64>> = (0..2)
        .map(|v| (0..DAYS).map(|d| version_rows(v, d)).collect())
        .collect();
    let mut reads = 0;
    while !stop.load(Ordering::SeqCst) {
        let (loads, counts): (i64, Vec<i64>) = sqlx::query_as(
            "select (select count(distinct _load_id) from idem_data.orders
                      where ds between $1::date and $2::date),
                    (select coalesce(array_agg(n order by ds), '{}')
                       from (select ds, count(*) n from idem_data.orders
                              where ds between $1::date and $2::date group by ds) t)",
        )
        .bind(FROM)
        .bind(TO)
        .fetch_one(&db)
        .await
        .expect("the week is readable during publishes");
        assert_eq!(
            loads, 1,
            "read {reads}: the week holds days of {loads} loads: {counts:?}"
        );
        assert!(
            versions.contains(&counts),
            "read {reads}: day counts {counts:?}"
        );
        reads += 1;
    }
    reads
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reader_polling_the_week_during_twenty_publishes_never_sees_days_of_two_loads() {
    let app = spawn_app().await;
    app.declare_orders().await;
    let range = format!("/partitions/orders?from={FROM}&to={TO}");
    let whole = |v| (0..DAYS).map(|d| version_body(v, d)).collect::<String>();
    let r = app.put(&range, "application/x-ndjson", whole(1)).await;
    assert_eq!(r.status(), 200);
    let stop = Arc::new(AtomicBool::new(false));
    let reader = tokio::spawn(poll_week(app.db.clone(), stop.clone()));
    for round in 0..20 {
        let version = round % 2;
        // Each body goes both ways: a range PUT, and a staged load of 7 parts.
        if (round / 2) % 2 == 0 {
            let r = app
                .put(&range, "application/x-ndjson", whole(version))
                .await;
            assert_eq!(r.status(), 200, "round {round}");
        } else {
            let load_id = open_week(&app.client, &app.base, &format!("poll-{round}")).await;
            send_parts(&app.client, &app.base, &load_id, |d| {
                version_body(version, d)
            })
            .await;
            let (status, receipt) = publish(&app.client, &app.base, &load_id).await;
            assert_eq!(status, 200, "round {round}: {receipt}");
            assert_eq!(receipt["changed"], true, "round {round}");
        }
    }
    stop.store(true, Ordering::SeqCst);
    let reads = reader
        .await
        .unwrap_or_else(|e| std::panic::resume_unwind(e.into_panic()));
    assert!(reads > 20, "the reader read the week {reads} times");
    eprintln!(
        "races: a reader read the week {reads} times during 20 publishes: one load each time"
    );
}

#[tokio::test]
async fn a_load_past_its_time_is_expired_and_its_staged_rows_dropped() {
    let settings = idem::config::Settings {
        load_ttl: 1,
        ..idem::config::Settings::default()
    };
    let app = spawn_app_with(settings.clone()).await;
    app.declare_orders().await;
    let load_id = open_week(&app.client, &app.base, "late").await;
    let part = |n: u32| {
        let path = format!("/loads/{load_id}/parts/{n}?ds={}", day(0));
        let app = &app;
        async move {
            app.put(&path, "application/x-ndjson", day_body(0, 10, "late"))
                .await
        }
    };
    assert_eq!(part(1).await.status(), 200);
    assert_eq!(staged_tables(&app.db).await, 1);
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    // A restart: the new process expires what is past its time at once.
    let _restarted = spawn_app_on(app.options.clone(), settings).await;
    let mut status = Value::Null;
    for _ in 0..50 {
        status = json_body(app.get(&format!("/loads/{load_id}")).await).await["status"].clone();
        if status == "expired" {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(status, "expired");
    let r = part(2).await;
    assert_eq!(r.status(), 409);
    let problem = json_body(r).await;
    assert_eq!(problem["code"], "load_not_open");
    assert!(
        problem["detail"].as_str().unwrap().contains("expired"),
        "{problem}"
    );
    let (status, problem) = publish(&app.client, &app.base, &load_id).await;
    assert_eq!(status, 409);
    assert_eq!(problem["code"], "load_not_open");
    assert_eq!(
        staged_tables(&app.db).await,
        0,
        "the load's part is left in idem_staging"
    );
    assert_eq!(app.count("orders", &day(0)).await, 0);
}

#[tokio::test]
async fn the_parts_of_a_published_load_left_by_a_kill_after_its_commit_are_swept() {
    let app = spawn_app().await;
    app.declare_orders().await;
    let load_id = open_week(&app.client, &app.base, "left").await;
    send_parts(&app.client, &app.base, &load_id, |d| day_body(d, 5, "x")).await;
    assert_eq!(publish(&app.client, &app.base, &load_id).await.0, 200);
    // A process killed between the publish's commit and the drop of the
    // load's parts leaves them in idem_staging, registered to a published
    // load: as here.
    let names: Vec<String> =
        sqlx::query_scalar("select stage_name from idem.load_parts where load_id = $1::uuid")
            .bind(&load_id)
            .fetch_all(&app.db)
            .await
            .unwrap();
    assert_eq!(names.len(), 7);
    for name in &names {
        sqlx::query(&format!(
            "create table idem_staging.\"{name}\" (order_id bigint)"
        ))
        .execute(&app.db)
        .await
        .unwrap();
    }
    // The next process's sweep at its start.
    let _next = spawn_app_on(app.options.clone(), idem::config::Settings::default()).await;
    assert_eq!(
        staged_tables(&app.db).await,
        0,
        "the parts of a published load outlive the sweep"
    );
    let (status, receipt) = publish(&app.client, &app.base, &load_id).await;
    assert_eq!((status, &receipt["replayed"]), (200, &json!(true)));
}
