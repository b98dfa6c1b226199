//! `kill -9` during an expire round: whenever the process dies, each
//! partition past retention is wholly there (registry row, table, rows) or
//! wholly gone, and the ledger has an `expire` row exactly for each one
//! gone; the next process's rounds finish the work, dropping nothing twice.

use std::time::{Duration, Instant};

use sqlx::PgPool;

use crate::scenario::*;
use crate::support::*;

const DAYS: usize = 240;
const ROWS: usize = 50;

const EVENTS: &str = r#"{"columns": {"id": "bigint", "ds": "date", "kind": "text"}}"#;
const EVENTS_KEPT_A_WEEK: &str =
    r#"{"columns": {"id": "bigint", "ds": "date", "kind": "text"}, "retention": "P7D"}"#;

/// The days loaded: from 2025-01-01, all long past a week's retention.
fn days() -> Vec<String> {
    let first = chrono::NaiveDate::from_ymd_opt(2025, 1, 1).unwrap();
    (0..DAYS)
        .map(|d| (first + chrono::Duration::days(d as i64)).to_string())
        .collect()
}

/// Each day as the database holds it: registered, its table there, its
/// rows, and its `expire` ledger rows.
#[derive(Debug, PartialEq)]
struct DayState {
    registered: bool,
    table: bool,
    rows: i64,
    expired: i64,
}

async fn day_state(db: &PgPool, ds: &str) -> DayState {
    let digits = ds.replace('-', "");
    let (registered, table, expired): (bool, bool, i64) = sqlx::query_as(
        "select exists (select from idem.partitions where table_name = 'events' and ds = $1),
                to_regclass($2) is not null,
                (select count(*) from idem.loads
                  where table_name = 'events' and mode = 'expire' and ds::text = $1)",
    )
    .bind(ds)
    .bind(format!("idem_parts.events__{digits}"))
    .fetch_one(db)
    .await
    .unwrap();
    let rows = if table {
        sqlx::query_scalar(&format!("select count(*) from idem_parts.events__{digits}"))
            .fetch_one(db)
            .await
            .unwrap()
    } else {
        0
    };
    DayState {
        registered,
        table,
        rows,
        expired,
    }
}

/// Every day wholly there (no expire row) or wholly gone (one); how many
/// are gone.
async fn check_days(db: &PgPool, round: usize) -> usize {
    let mut gone = 0;
    for ds in days() {
        let state = day_state(db, &ds).await;
        let there = DayState {
            registered: true,
            table: true,
            rows: ROWS as i64,
            expired: 0,
        };
        let dropped = DayState {
            registered: false,
            table: false,
            rows: 0,
            expired: 1,
        };
        assert!(
            state == there || state == dropped,
            "round {round}: {ds} is neither there nor gone: {state:?}"
        );
        gone += usize::from(state == dropped);
    }
    gone
}

async fn expire_rows(db: &PgPool) -> i64 {
    sqlx::query_scalar("select count(*) from idem.loads where mode = 'expire'")
        .fetch_one(db)
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_9_during_an_expire_round_leaves_each_partition_there_or_gone() {
    let mut rng = Rng::for_scenario("kill -9 during an expire round");
    let pg = ScenarioDatabase::start().await;
    let db = db(pg.url()).await;
    let client = client();
    // Rounds an hour apart: the first, at start, finds no retention yet.
    let idem = Idem::start(
        pg.url(),
        "kill-expire-0",
        &[("IDEM_RETENTION_EVERY_SECS", "3600")],
    )
    .await;
    declare(&client, &idem, "events", EVENTS).await;
    for ds in days() {
        let body: String = (0..ROWS)
            .map(|i| format!("{{\"id\": {i}, \"ds\": \"{ds}\", \"kind\": \"k\"}}\n"))
            .collect();
        let r = client
            .put(idem.url(&format!("/partitions/events/{ds}")))
            .header("content-type", "application/x-ndjson")
            .body(body)
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200, "{ds}");
    }
    declare(&client, &idem, "events", EVENTS_KEPT_A_WEEK).await;
    idem.kill9().await;
    assert_eq!(check_days(&db, 0).await, 0);

    // Each process runs a round at once (and every second after), and is
    // killed at a random moment of it.
    let env = [("IDEM_RETENTION_EVERY_SECS", "1")];
    let (mut gone, mut cut_short) = (0, 0);
    for round in 1..=30 {
        let idem = Idem::start(pg.url(), &format!("kill-expire-{round}"), &env).await;
        let started = Instant::now();
        let wait = rng.between(Duration::from_millis(10), Duration::from_millis(300));
        while started.elapsed() < wait && expire_rows(&db).await < DAYS as i64 {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        idem.kill9().await;
        let now_gone = check_days(&db, round).await;
        assert!(now_gone >= gone, "round {round}: a dropped day came back");
        cut_short += usize::from(gone < now_gone && now_gone < DAYS);
        eprintln!("round {round}: {now_gone} of {DAYS} days gone");
        gone = now_gone;
        if gone == DAYS {
            break;
        }
    }
    assert!(
        cut_short >= 2,
        "the kills fell in the middle of {cut_short} rounds only"
    );
    // What the kills left, the next process's rounds finish.
    let idem = Idem::start(pg.url(), "kill-expire-last", &env).await;
    let deadline = Instant::now() + Duration::from_secs(60);
    while expire_rows(&db).await < DAYS as i64 && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(check_days(&db, 99).await, DAYS);
    assert_eq!(expire_rows(&db).await, DAYS as i64, "one expire row a day");
    let r = client.get(idem.url("/tables/events")).send().await.unwrap();
    let table: serde_json::Value = r.json().await.unwrap();
    assert_eq!(table["partitions"], 0, "{table}");
    idem.kill9().await;
}
