//! `kill -9` during a staged load of a week (`POST /loads`, eight parts,
//! one publish): killed while its parts upload, the live week is untouched
//! and the parts sent again publish exactly their union; killed while it
//! publishes (some kills aimed at the commit), the week is wholly old or
//! wholly new, never a mix, and the publish retried finishes the load
//! exactly once. No stage outlives the sweeps.

use std::time::{Duration, Instant};

use futures::StreamExt as _;
use serde_json::{json, Value};

use crate::scenario::*;
use crate::support::*;

const FROM: &str = "2026-10-12";
const TO: &str = "2026-10-18";
const DAYS: u32 = 7;
const ROWS: i64 = 1_000;
/// Parts in flight at once, as `idem backfill --parallel 4` sends them.
const PARALLEL: usize = 4;

fn day(d: u32) -> String {
    format!("2026-10-{:02}", 12 + d)
}

/// Parts of a load: one per day, but the first day's rows come in two
/// (so that its partition is copied from both, and they stay in
/// `idem_staging` until the load is done with them).
const PARTS: u32 = DAYS + 1;

/// The day of part `n` (0-based) and its body in version `version`: the
/// day's rows (half of them for the first day's two parts), their status
/// the version.
fn part_body(version: usize, n: u32) -> (String, String) {
    let d = if n < DAYS { n } else { 0 };
    let mut first = 1 + i64::from(d) * 100_000 + 300 * version as i64;
    let rows = if d == 0 { ROWS / 2 } else { ROWS };
    if n == DAYS {
        first += ROWS / 2;
    }
    let body = (first..first + rows)
        .map(|id| order_line(id, &day(d), &format!("v{version}")))
        .collect();
    (day(d), body)
}

type Answer = Result<(u16, Value), String>;

async fn answer_of(request: reqwest::RequestBuilder) -> Answer {
    let r = request.send().await.map_err(|e| e.to_string())?;
    let status = r.status().as_u16();
    let text = r.text().await.map_err(|e| e.to_string())?;
    Ok((status, serde_json::from_str(&text).unwrap_or_default()))
}

async fn open_load(client: &reqwest::Client, idem: &Idem, key: &str) -> String {
    let request = json!({"table": "orders", "target": {"range": {"from": FROM, "to": TO}}});
    let opened = client
        .post(idem.url("/loads"))
        .header("idempotency-key", key)
        .json(&request);
    let (status, load) = answer_of(opened).await.expect("the load opens");
    assert_eq!(status, 201, "{load}");
    load["load_id"].as_str().expect("a load id").to_string()
}

/// Sends the parts of `version`, `PARALLEL` at once, on a task of its
/// own; each part's answer.
fn upload(
    client: &reqwest::Client,
    base: &str,
    load_id: &str,
    version: usize,
) -> tokio::task::JoinHandle<Vec<Answer>> {
    let (client, base, load_id) = (client.clone(), base.to_string(), load_id.to_string());
    tokio::spawn(async move {
        futures::stream::iter(0..PARTS)
            .map(|n| {
                let (ds, body) = part_body(version, n);
                let request = client
                    .put(format!("{base}/loads/{load_id}/parts/{}?ds={ds}", n + 1))
                    .header("content-type", "application/x-ndjson")
                    .body(body);
                answer_of(request)
            })
            .buffer_unordered(PARALLEL)
            .collect()
            .await
    })
}

async fn upload_all(client: &reqwest::Client, idem: &Idem, load_id: &str, version: usize) {
    for answer in join(upload(client, &idem.base, load_id, version)).await {
        let (status, receipt) = answer.expect("a part is answered");
        assert_eq!(status, 200, "a part: {receipt}");
    }
}

fn publish(client: &reqwest::Client, base: &str, load_id: &str) -> tokio::task::JoinHandle<Answer> {
    let request = client.post(format!("{base}/loads/{load_id}/publish"));
    tokio::spawn(answer_of(request))
}

/// The week through the API, day by day.
async fn read_week(client: &reqwest::Client, idem: &Idem) -> Vec<Read> {
    let mut week = Vec::new();
    for d in 0..DAYS {
        week.push(read_partition(client, idem, "orders", &day(d)).await);
    }
    week
}

fn same_week(a: &[Read], b: &[Read]) -> bool {
    a.iter()
        .zip(b)
        .all(|(a, b)| a.status == 200 && a.lines == b.lines && a.etag == b.etag)
}

/// The load every row of the week comes from, read in ONE statement (one
/// snapshot): panics unless each of the 7 days holds `ROWS` rows of one load
/// and all 7 days the same one.
async fn week_load(db: &sqlx::PgPool, context: &str) -> String {
    let days: Vec<(String, i64, Vec<uuid::Uuid>)> = sqlx::query_as(
        "select ds::text, count(*), array_agg(distinct _load_id) from idem_data.orders
          where ds between $1::date and $2::date group by ds order by ds",
    )
    .bind(FROM)
    .bind(TO)
    .fetch_all(db)
    .await
    .expect("read the week");
    assert_eq!(days.len(), 7, "{context}: days present: {days:?}");
    for (ds, rows, loads) in &days {
        assert_eq!(*rows, ROWS, "{context}: {ds} holds {rows} rows");
        assert_eq!(loads.len(), 1, "{context}: {ds} mixes loads {loads:?}");
        assert_eq!(loads, &days[0].2, "{context}: days of two loads: {days:?}");
    }
    days[0].2[0].to_string()
}

async fn ledger_rows(db: &sqlx::PgPool, load_id: &str) -> i64 {
    sqlx::query_scalar("select count(*) from idem.loads where load_id = $1::uuid")
        .bind(load_id)
        .fetch_one(db)
        .await
        .expect("read the ledger")
}

/// Stages left once a sweep has run: waits a little for the next process's
/// start-up sweep (a killed process's sessions end a moment after it), then
/// restarts idem once for another.
async fn stages_after_sweep(
    db: &sqlx::PgPool,
    pg: &ScenarioDatabase,
    idem: Idem,
    name: &str,
) -> (i64, Idem) {
    let started = Instant::now();
    while stages(db).await > 0 && started.elapsed() < Duration::from_secs(2) {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    if stages(db).await == 0 {
        return (0, idem);
    }
    idem.kill9().await;
    let idem = Idem::start(pg.url(), name, &[]).await;
    (stages(db).await, idem)
}

/// A week and its live load, published cleanly twice (version 0, then 1):
/// what each version reads back as, its load id, how long the seven parts
/// take to upload and how long the publish takes.
struct Warm {
    expected: [Vec<Read>; 2],
    loads: [String; 2],
    upload: Duration,
    publish: Duration,
}

async fn warm_up(client: &reqwest::Client, idem: &Idem, db: &sqlx::PgPool, name: &str) -> Warm {
    let (mut upload, mut publishing) = (Duration::ZERO, Duration::ZERO);
    let mut expected = Vec::new();
    let mut loads = Vec::new();
    for version in 0..2 {
        let load_id = open_load(client, idem, &format!("{name}-warm-{version}")).await;
        let started = Instant::now();
        upload_all(client, idem, &load_id, version).await;
        upload = upload.max(started.elapsed());
        let started = Instant::now();
        let (status, receipt) = join(publish(client, &idem.base, &load_id))
            .await
            .expect("the publish is answered");
        publishing = publishing.max(started.elapsed());
        assert_eq!(status, 200, "{receipt}");
        assert_eq!(week_load(db, "warm-up").await, load_id);
        expected.push(read_week(client, idem).await);
        loads.push(load_id);
    }
    assert!(!same_week(&expected[0], &expected[1]));
    Warm {
        expected: expected.try_into().unwrap_or_else(|_| unreachable!()),
        loads: loads.try_into().unwrap_or_else(|_| unreachable!()),
        upload,
        publish: publishing,
    }
}

async fn start_scenario(name: &str) -> (ScenarioDatabase, sqlx::PgPool, reqwest::Client, Idem) {
    let pg = ScenarioDatabase::start().await;
    let db = db(pg.url()).await;
    let client = client();
    let idem = Idem::start(pg.url(), &format!("{name}-0"), &[]).await;
    declare(&client, &idem, "orders", ORDERS).await;
    (pg, db, client, idem)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_9_during_part_uploads_leaves_the_week_untouched_and_the_parts_sent_again_publish() {
    let rounds = rounds(4, 20);
    let mut rng = Rng::for_scenario("kill -9 during load parts");
    let (pg, db, client, mut idem) = start_scenario("kill-parts").await;
    let warm = warm_up(&client, &idem, &db, "kill-parts").await;
    report!(
        "kill -9 during load parts: {PARTS} parts (a day each, the first day in two) of {ROWS} rows a day upload ({PARALLEL} at once) within \
         {:?}, publish within {:?}",
        warm.upload,
        warm.publish
    );
    let (mut current, mut live) = (1, warm.loads[1].clone());
    let (mut in_flight, mut parts_done_before) = (0, 0);
    for round in 0..rounds {
        let new = 1 - current;
        let load_id = open_load(&client, &idem, &format!("parts-{round}")).await;
        let sending = upload(&client, &idem.base, &load_id, new);
        tokio::time::sleep(rng.between(Duration::ZERO, warm.upload * 3 / 4)).await;
        in_flight += usize::from(!sending.is_finished());
        idem.kill9().await;
        let answered = tokio::time::timeout(CLIENT_DEADLINE, sending)
            .await
            .expect("the parts end once the process is gone")
            .expect("the upload task");
        parts_done_before += answered
            .iter()
            .filter(|a| matches!(a, Ok((200, _))))
            .count();
        idem = Idem::start(pg.url(), &format!("kill-parts-{}", round + 1), &[]).await;

        // Nothing of the load is live before its publish.
        assert_eq!(week_load(&db, &format!("round {round}")).await, live);
        assert!(same_week(
            &read_week(&client, &idem).await,
            &warm.expected[current]
        ));

        // The client sends every part again, the same bytes, and publishes.
        upload_all(&client, &idem, &load_id, new).await;
        let (status, receipt) = join(publish(&client, &idem.base, &load_id))
            .await
            .expect("the publish is answered");
        assert_eq!(status, 200, "round {round}: {receipt}");
        assert_eq!(receipt["status"], "published", "round {round}");
        assert_eq!(receipt["rows_written"], ROWS * 7, "round {round}");
        assert_eq!(week_load(&db, &format!("round {round}")).await, load_id);
        let week = read_week(&client, &idem).await;
        assert!(
            same_week(&week, &warm.expected[new]),
            "round {round}: the week is not exactly the union of the parts"
        );
        assert_eq!(ledger_rows(&db, &load_id).await, 1, "round {round}");
        (current, live) = (new, load_id);
    }
    let (left, idem) = stages_after_sweep(&db, &pg, idem, "kill-parts-last").await;
    assert_eq!(left, 0, "tables left in idem_staging");
    assert_eq!(readyz(&client, &idem).await, 200);
    report!(
        "kill -9 during load parts: {rounds} rounds, {rounds} kills ({in_flight} with parts in \
         flight, {parts_done_before} parts answered 200 before a kill); the live week untouched \
         each time, the parts sent again published exactly their union, one ledger row per \
         load, 0 tables left in idem_staging after a sweep"
    );
}

/// Waits until the load shows as published in `idem.staged_loads` (its
/// publish has committed) or the publish is answered; whether it showed.
async fn wait_commit(
    db: &sqlx::PgPool,
    load_id: &str,
    publishing: &tokio::task::JoinHandle<Answer>,
) -> bool {
    let deadline = Instant::now() + CLIENT_DEADLINE;
    while Instant::now() < deadline && !publishing.is_finished() {
        let status: String =
            sqlx::query_scalar("select status from idem.staged_loads where load_id = $1::uuid")
                .bind(load_id)
                .fetch_one(db)
                .await
                .expect("read the load's status");
        if status == "published" {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    false
}

/// When a round kills the process, from the moment its publish is sent:
/// the moment its commit shows (before its answer and the drop of its
/// parts), within the last half of a publish's usual time, or anywhere in it.
async fn wait_to_kill(
    rng: &mut Rng,
    round: usize,
    publish: Duration,
    at_commit: impl std::future::Future<Output = bool>,
) -> bool {
    let end = publish + publish / 10;
    match round % 3 {
        0 => return at_commit.await,
        1 => tokio::time::sleep(rng.between(publish / 2, end)).await,
        _ => tokio::time::sleep(rng.between(Duration::ZERO, end)).await,
    }
    false
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_9_during_a_publish_leaves_the_week_wholly_old_or_new_and_a_retry_publishes_once() {
    let rounds = rounds(6, 30);
    let mut rng = Rng::for_scenario("kill -9 during load publish");
    let (pg, db, client, mut idem) = start_scenario("kill-publish").await;
    let warm = warm_up(&client, &idem, &db, "kill-publish").await;
    report!(
        "kill -9 during load publish: a publish of 7 days × {ROWS} rows is answered within {:?}",
        warm.publish
    );
    let (mut current, mut live) = (1, warm.loads[1].clone());
    let (mut acknowledged, mut at_commit, mut outcome) = (0, 0, [0usize; 2]);
    for round in 0..rounds {
        let new = 1 - current;
        let load_id = open_load(&client, &idem, &format!("publish-{round}")).await;
        upload_all(&client, &idem, &load_id, new).await;
        let publishing = publish(&client, &idem.base, &load_id);
        let committed = wait_commit(&db, &load_id, &publishing);
        at_commit += usize::from(wait_to_kill(&mut rng, round, warm.publish, committed).await);
        idem.kill9().await;
        let answer = tokio::time::timeout(CLIENT_DEADLINE, publishing)
            .await
            .expect("the publish ends once the process is gone")
            .expect("the publish task");
        let answered = matches!(answer, Ok((200, _)));
        acknowledged += usize::from(answered);
        idem = Idem::start(pg.url(), &format!("kill-publish-{}", round + 1), &[]).await;

        let context = format!("round {round}, after the kill");
        let now = week_load(&db, &context).await;
        let published = if now == load_id {
            true
        } else {
            assert_eq!(now, live, "{context}: the week is of a third load");
            false
        };
        if answered {
            assert!(published, "round {round}: a publish answered 200 was lost");
        }
        outcome[usize::from(published)] += 1;

        // The client retries the publish: it finishes the load, once.
        let (status, receipt) = join(publish(&client, &idem.base, &load_id))
            .await
            .expect("the retried publish is answered");
        assert_eq!(status, 200, "round {round}: {receipt}");
        assert_eq!(receipt["status"], "published", "round {round}");
        assert_eq!(receipt["replayed"], published, "round {round}: {receipt}");
        assert_eq!(receipt["load_id"], load_id.as_str());
        let view = client
            .get(idem.url(&format!("/loads/{load_id}")))
            .send()
            .await
            .expect("the load's view");
        assert_eq!(view.json::<Value>().await.unwrap()["status"], "published");
        assert_eq!(ledger_rows(&db, &load_id).await, 1, "round {round}: ledger");
        assert_eq!(week_load(&db, &format!("round {round}")).await, load_id);
        assert!(
            same_week(&read_week(&client, &idem).await, &warm.expected[new]),
            "round {round}: the week is not exactly the load's"
        );
        (current, live) = (new, load_id);
    }
    let (left, idem) = stages_after_sweep(&db, &pg, idem, "kill-publish-last").await;
    assert_eq!(left, 0, "tables left in idem_staging");
    assert_eq!(readyz(&client, &idem).await, 200);
    report!(
        "kill -9 during load publish: {rounds} rounds, {rounds} kills ({at_commit} the moment \
         its commit showed, {acknowledged} after its 200); the week read in one statement was \
         wholly old ({}) or wholly new ({}), never a mix; every retried publish answered the \
         load's receipt (replayed when it had committed), one ledger row per load, 0 tables \
         left in idem_staging after a sweep",
        outcome[0],
        outcome[1]
    );
}
