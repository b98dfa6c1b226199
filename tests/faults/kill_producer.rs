//! `kill -9` of the producer: `idem post --channel NAME --offset-from-line`
//! killed at random moments (some right after a batch committed, before its
//! answer was read) and started again until it finishes: every line of the
//! file is stored exactly once, and the channel's committed offset is the
//! file's line count.

use std::io::Write as _;
use std::time::{Duration, Instant};

use crate::scenario::*;
use crate::support::*;

const CHANNEL: &str = "feed-file";
const BATCH_ROWS: &str = "40";

/// No key: a line stored twice would show as two rows.
const FEED: &str = r#"{"columns": {"n": "bigint", "text": "text"}, "partition_by": null}"#;

/// The channel's commits, straight from its table (0 before the first).
async fn commits(db: &sqlx::PgPool) -> i64 {
    sqlx::query_scalar(
        "select coalesce(max(commits), 0)::bigint from idem.channels where name = $1",
    )
    .bind(CHANNEL)
    .fetch_one(db)
    .await
    .unwrap()
}

fn producer(idem: &Idem, file: &str) -> tokio::process::Child {
    spawn_idem(&[
        "post",
        "feed",
        file,
        "--channel",
        CHANNEL,
        "--offset-from-line",
        "--batch-rows",
        BATCH_ROWS,
        "--url",
        &idem.base,
        "--token",
        ADMIN_TOKEN,
        "--quiet",
    ])
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_9_of_a_channel_producer_leaves_every_line_stored_once() {
    let lines = u64::try_from(rounds(10_000, 100_000)).unwrap();
    let kills = rounds(8, 60);
    let mut rng = Rng::for_scenario("kill -9 of the producer");
    let pg = Postgres::start().await;
    let db = db(&pg.url).await;
    let client = client();
    let idem = Idem::start(&pg.url, "kill-producer", &[]).await;
    declare(&client, &idem, "feed", FEED).await;
    let mut file = tempfile::Builder::new()
        .suffix(".ndjson")
        .tempfile()
        .unwrap();
    for n in 1..=lines {
        writeln!(file, "{{\"n\": {n}, \"text\": \"line {n}\"}}").unwrap();
    }
    let path = file.path().to_str().unwrap().to_string();

    // Each run is killed after a random while, or (every other kill) the
    // moment a batch commits, before the producer reads its answer; runs
    // go on until one finishes.
    let deadline = Instant::now() + Duration::from_secs(if long() { 900 } else { 240 });
    let (mut runs, mut kills_done, mut kills_at_commit) = (0, 0, 0);
    let finished = loop {
        assert!(Instant::now() < deadline, "the producer did not finish");
        runs += 1;
        let mut running = producer(&idem, &path);
        if kills_done >= kills {
            break running.wait().await.unwrap();
        }
        if kills_done % 2 == 0 {
            tokio::time::sleep(rng.between(Duration::from_millis(5), Duration::from_millis(150)))
                .await;
        } else {
            let before = commits(&db).await;
            let waiting = Instant::now();
            while commits(&db).await == before && waiting.elapsed() < Duration::from_secs(5) {
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
            kills_at_commit += 1;
        }
        if let Some(status) = running.try_wait().unwrap() {
            break status;
        }
        kill(running).await;
        kills_done += 1;
    };
    assert!(finished.success(), "the last run: {finished}");

    // Every line exactly once.
    let (rows, distinct, lowest, highest): (i64, i64, i64, i64) =
        sqlx::query_as("select count(*), count(distinct n), min(n), max(n) from idem_data.feed")
            .fetch_one(&db)
            .await
            .unwrap();
    let lines_i64 = i64::try_from(lines).unwrap();
    assert_eq!(
        (rows, distinct, lowest, highest),
        (lines_i64, lines_i64, 1, lines_i64),
        "rows, distinct lines, first and last line"
    );
    // The channel's offset is the file's last line.
    let channel = json_body(
        client
            .get(idem.url(&format!("/channels/{CHANNEL}")))
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(channel["committed_offset"], lines.to_string(), "{channel}");
    let commits = commits(&db).await;
    report!(
        "kill -9 of the producer: {lines} lines in batches of {BATCH_ROWS}, {runs} runs of \
         `idem post --channel --offset-from-line`, {kills_done} killed ({kills_at_commit} the \
         moment a batch committed); every line stored exactly once, {commits} channel commits, \
         committed offset {} = the line count",
        channel["committed_offset"]
    );
}
