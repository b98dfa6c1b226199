//! `examples/cdc_from_postgres.py` as written, against a source Postgres of
//! the test's own (`wal_level=logical`) and the real server: inserts,
//! updates (several of one key in one transaction, a key changed), deletes;
//! the example killed with `kill -9` midway and started again; the idem
//! table ends equal to the source table, and a rerun sends nothing.

use std::process::Stdio;
use std::time::{Duration, Instant};

use serde_json::Value;
use tokio::process::{Child, Command};

use crate::helpers::*;
use crate::support::*;

const ITEMS: &str = r#"{"columns": {"id": "bigint", "name": "text", "qty": "bigint",
  "price": "numeric", "active": "boolean", "seen_at": "timestamptz", "change_lsn": "bigint"},
  "partition_by": null, "primary_key": ["id"], "cursor": "change_lsn"}"#;

const SOURCE_ITEMS: &str = "create table items (id bigint primary key, name text, \
    qty integer, price numeric(10,2), active boolean, seen_at timestamptz)";

/// Round `r`'s transaction on the source: new rows, an update of many, two
/// updates of one key, a delete and a re-insert of one key, a row inserted
/// and deleted, a key changed, deletes.
fn round(r: u64) -> String {
    let first = r * 10 + 1;
    format!(
        "begin;
         insert into items select g, 'item ' || g || ' it''s', g % 7, g * 1.25, g % 2 = 0,
           timestamptz '2026-12-01 10:00:00+00' + g * interval '1 minute'
           from generate_series({first}, {first} + 9) g;
         update items set qty = qty + 1, active = not active where id % 3 = {r} % 3;
         update items set name = name || ' x' where id = {first};
         update items set name = name || ' y', price = null where id = {first};
         delete from items where id = {first} + 1;
         insert into items values ({first} + 1, E'again\\nline two', 42, 0.10, null, null);
         insert into items values (100000 + {r}, 'short-lived', 0, 0, true, now());
         delete from items where id = 100000 + {r};
         update items set id = id + 50000 where id = {first} + 2;
         delete from items where id % 5 = {r} % 5 and id < {first};
         commit;"
    )
}

struct Source {
    pg: Postgres,
}

impl Source {
    fn conninfo(&self) -> String {
        format!(
            "host=127.0.0.1 port={} user=postgres dbname=idem",
            self.pg.port
        )
    }

    async fn psql(&self, sql: &str) -> String {
        let out = Command::new("psql")
            .args(["-X", "-q", "-A", "-t", "-v", "ON_ERROR_STOP=1", "-d"])
            .arg(self.conninfo())
            .args(["-c", sql])
            .output()
            .await
            .expect("run psql");
        assert!(
            out.status.success(),
            "psql: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    }

    /// The source's rows, as the idem table should hold them, in the form
    /// idem gives them.
    async fn rows(&self) -> Vec<Value> {
        let text = self
            .psql(
                "select coalesce(json_agg(json_build_object('id', id, 'name', name, 'qty', qty, \
                 'price', price::float8, 'active', active, 'seen_at', \
                 to_char(seen_at at time zone 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS\"+00:00\"')) \
                 order by id), '[]') from items",
            )
            .await;
        serde_json::from_str(&text).unwrap()
    }
}

/// The example, with `more` arguments, its stderr kept in `log`.
fn example(app: &TestApp, source: &Source, log: &std::path::Path, more: &[&str]) -> Child {
    let root = env!("CARGO_MANIFEST_DIR");
    Command::new("python3")
        .arg(format!("{root}/examples/cdc_from_postgres.py"))
        .args(["--source", &source.conninfo(), "--slot", "idem_cdc"])
        .args(["--table", "public.items=items", "--poll", "0.05"])
        .args(more)
        .env("IDEM_URL", &app.base)
        .env("IDEM_TOKEN", ADMIN_TOKEN)
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(log).unwrap())
        .kill_on_drop(true)
        .spawn()
        .expect("run python3")
}

/// The idem table's rows, `change_lsn` left out (numerics are JSON
/// numbers, times RFC 3339 in UTC, as the source query gives them).
async fn idem_rows(app: &TestApp) -> Vec<Value> {
    let r = app.get("/tables/items/rows").await;
    assert_eq!(r.status(), 200);
    let mut rows: Vec<Value> = r
        .text()
        .await
        .unwrap()
        .lines()
        .map(|line| {
            let mut row: Value = serde_json::from_str(line).unwrap();
            row.as_object_mut().unwrap().remove("change_lsn");
            row
        })
        .collect();
    rows.sort_by_key(|row| row["id"].as_i64());
    rows
}

/// The idem rows equal the source rows (prices as numbers: 520 and 520.0
/// are one price); else the rows that differ.
fn assert_same(idem: &[Value], source: &[Value]) {
    let price_as_f64 = |rows: &[Value]| -> Vec<Value> {
        let mut rows = rows.to_vec();
        for row in &mut rows {
            if let Some(price) = row["price"].as_f64() {
                row["price"] = Value::from(price);
            }
        }
        rows
    };
    let (idem, source) = (&price_as_f64(idem), &price_as_f64(source));
    let differing: Vec<(Option<&Value>, Option<&Value>)> = (0..idem.len().max(source.len()))
        .map(|i| (idem.get(i), source.get(i)))
        .filter(|(a, b)| a != b)
        .take(3)
        .collect();
    assert!(
        differing.is_empty(),
        "{} idem rows, {} source rows; first differences (idem, source): {differing:?}",
        idem.len(),
        source.len()
    );
}

async fn channel_commits(app: &TestApp) -> u64 {
    let r = app.get("/channels/idem_cdc.items").await;
    match r.status().as_u16() {
        404 => 0,
        200 => json_body(r).await["commits"].as_u64().unwrap_or(0),
        other => panic!("GET /channels/idem_cdc.items: {other}"),
    }
}

async fn wait_until<F, Fut>(what: &str, mut done: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let started = Instant::now();
    while !done().await {
        assert!(started.elapsed() < Duration::from_secs(60), "{what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test]
async fn the_cdc_example_killed_midway_and_restarted_makes_the_idem_table_equal_the_source() {
    let app = spawn_app().await;
    let r = app.declare("items", ITEMS).await;
    assert!(r.status().is_success(), "{}", r.text().await.unwrap());
    let source = Source {
        pg: Postgres::start_with(
            "-c wal_level=logical -c max_replication_slots=4 -c max_wal_senders=4",
        )
        .await,
    };
    source.psql(SOURCE_ITEMS).await;
    let logs = tempfile::tempdir().unwrap();
    let first_log = logs.path().join("first.log");
    let running = example(&app, &source, &first_log, &[]);
    wait_until("the example creates its slot", || async {
        source
            .psql("select count(*) from pg_replication_slots where slot_name = 'idem_cdc'")
            .await
            == "1"
    })
    .await;

    // Transactions while it runs; the kill once a few are in idem.
    for r in 0..30 {
        source.psql(&round(r)).await;
    }
    wait_until("the example commits transactions", || async {
        channel_commits(&app).await >= 3
    })
    .await;
    kill(running).await;
    let at_kill = channel_commits(&app).await;

    // More while it is down; then it runs again until the slot is drained.
    for r in 30..45 {
        source.psql(&round(r)).await;
    }
    let second_log = logs.path().join("second.log");
    let status = example(&app, &source, &second_log, &["--once"])
        .wait()
        .await
        .unwrap();
    let log = std::fs::read_to_string(&second_log).unwrap();
    assert!(status.success(), "{log}");
    let expected = source.rows().await;
    assert!(expected.len() > 50, "{}", expected.len());
    assert_same(&idem_rows(&app).await, &expected);
    // Each source transaction committed once on the channel, whether the
    // slot gave it once or again after the kill.
    let commits = channel_commits(&app).await;
    assert_eq!(commits, 45, "{at_kill} commits at the kill; {log}");

    // Again: nothing new in the slot, nothing sent, nothing changed.
    let third_log = logs.path().join("third.log");
    let status = example(&app, &source, &third_log, &["--once"])
        .wait()
        .await
        .unwrap();
    assert!(status.success());
    assert_eq!(channel_commits(&app).await, commits);
    assert_same(&idem_rows(&app).await, &expected);
}
