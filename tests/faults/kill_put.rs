//! `kill -9` during `PUT /partitions`: whenever the process dies, the day
//! is the old body or the new body, never a mix, never empty; no stage
//! outlives the sweeps; the restarted process is ready.
//! The Citus suite runs it too, on the cluster's coordinator.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;

use crate::scenario::*;
use crate::support::*;

const DAY: &str = "2026-10-12";
const ROWS: i64 = 20_000;

/// Two bodies for one day: different rows and different values.
fn body(version: usize) -> String {
    let first = 1 + 500 * version as i64;
    (first..first + ROWS)
        .map(|id| order_line(id, DAY, &format!("v{version}")))
        .collect()
}

/// A PUT whose body is streamed, noting when its last byte was handed over.
struct Put {
    answer: tokio::task::JoinHandle<Result<(u16, serde_json::Value), String>>,
    started: Instant,
    body_sent: Arc<Mutex<Option<Instant>>>,
}

fn start_put(client: &reqwest::Client, idem: &Idem, body: &str) -> Put {
    let chunks: Vec<Bytes> = body
        .as_bytes()
        .chunks(64 * 1024)
        .map(Bytes::copy_from_slice)
        .collect();
    let body_sent = Arc::new(Mutex::new(None));
    let sent = body_sent.clone();
    let stream = futures::stream::unfold(chunks.into_iter(), move |mut rest| {
        let sent = sent.clone();
        async move {
            match rest.next() {
                Some(chunk) => Some((Ok::<_, std::io::Error>(chunk), rest)),
                None => {
                    *sent.lock().unwrap() = Some(Instant::now());
                    None
                }
            }
        }
    });
    let request = client
        .put(idem.url(&format!("/partitions/orders/{DAY}")))
        .header("content-type", "application/x-ndjson")
        .body(reqwest::Body::wrap_stream(stream));
    let started = Instant::now();
    let answer = tokio::spawn(async move {
        let r = request.send().await.map_err(|e| e.to_string())?;
        let status = r.status().as_u16();
        let text = r.text().await.map_err(|e| e.to_string())?;
        Ok((status, serde_json::from_str(&text).unwrap_or_default()))
    });
    Put {
        answer,
        started,
        body_sent,
    }
}

impl Put {
    /// Waits until the body has been handed over (at most 30 s).
    async fn wait_body_sent(&self) -> Option<Instant> {
        let deadline = Instant::now() + CLIENT_DEADLINE;
        while Instant::now() < deadline {
            if let Some(at) = *self.body_sent.lock().unwrap() {
                return Some(at);
            }
            if self.answer.is_finished() {
                return None;
            }
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        None
    }
}

/// When a round kills the process.
#[derive(Clone, Copy, Debug)]
enum Moment {
    /// Anywhere between the request's start and a little past its usual end.
    Anywhere,
    /// The moment the body's last byte is handed over.
    BodyEnd,
    /// Some time after the body, while it is decoded, staged and swapped in.
    AfterBody,
    /// Within 5 ms of the stage's commit (it shows in `idem_staging`): at
    /// the swap.
    AtSwap,
}

/// Waits until a stage shows in `idem_staging` or the PUT is answered.
async fn wait_stage(db: &sqlx::PgPool, put: &Put) -> bool {
    let deadline = Instant::now() + CLIENT_DEADLINE;
    while Instant::now() < deadline && !put.answer.is_finished() {
        if stages(db).await > 0 {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    false
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_9_during_put_leaves_the_old_or_the_new_day() {
    let rounds = rounds(12, 60);
    let mut rng = Rng::for_scenario("kill -9 during PUT");
    let spool = tempfile::tempdir().expect("a spool folder");
    let spool_dir = spool.path().display().to_string();
    let env = [("IDEM_SPOOL_DIR", spool_dir.as_str())];
    let pg = ScenarioDatabase::start().await;
    let db = db(pg.url()).await;
    let client = client();
    let mut idem = Idem::start(pg.url(), "kill-put-0", &env).await;
    declare(&client, &idem, "orders", ORDERS).await;

    // What the day looks like after each body, and how long a PUT takes:
    // the whole request, and the part after its body.
    let bodies = [body(0), body(1)];
    let mut expected = Vec::new();
    let (mut total, mut tail, mut sending) = (Duration::ZERO, Duration::ZERO, Duration::ZERO);
    for b in &bodies {
        let put = start_put(&client, &idem, b);
        let sent = put.wait_body_sent().await.expect("the body is sent");
        let (status, answer) = put.answer.await.unwrap().expect("an answer");
        assert_eq!(status, 200, "{answer}");
        let answered = Instant::now();
        total = total.max(answered - put.started);
        tail = tail.max(answered.saturating_duration_since(sent));
        sending = sending.max(sent.saturating_duration_since(put.started));
        let read = read_partition(&client, &idem, "orders", DAY).await;
        assert_eq!(read.lines.len() as i64, ROWS);
        assert_eq!(read.etag.as_deref(), answer["content_sha256"].as_str());
        expected.push(read);
    }
    assert_ne!(expected[0].lines, expected[1].lines);
    report!(
        "kill -9 during PUT: a PUT of {ROWS} rows ({}) is answered within {total:?}, its body \
         handed over within {sending:?} (then spooled, staged and swapped in {tail:?})",
        mb(bodies[0].len() as u64)
    );

    let mut current = 1;
    let (mut kills_in_flight, mut answered_first) = (0, 0);
    let mut outcome = [0usize; 2]; // rounds that ended old, new
    let moments = [
        Moment::AtSwap,
        Moment::Anywhere,
        Moment::AtSwap,
        Moment::AfterBody,
        Moment::BodyEnd,
        Moment::AtSwap,
    ];
    let (mut at_swap, mut orphaned) = (0, 0);
    for round in 0..rounds {
        let new = 1 - current;
        let moment = moments[round % moments.len()];
        let put = start_put(&client, &idem, &bodies[new]);
        match moment {
            Moment::Anywhere => {
                tokio::time::sleep(rng.between(Duration::ZERO, total + total / 10)).await;
            }
            Moment::BodyEnd => {
                put.wait_body_sent().await;
            }
            Moment::AfterBody => {
                put.wait_body_sent().await;
                tokio::time::sleep(rng.between(Duration::ZERO, tail + tail / 10)).await;
            }
            Moment::AtSwap => {
                if wait_stage(&db, &put).await {
                    at_swap += 1;
                }
                tokio::time::sleep(rng.between(Duration::ZERO, Duration::from_millis(5))).await;
            }
        }
        let in_flight = !put.answer.is_finished();
        idem.kill9().await;
        let answer = tokio::time::timeout(CLIENT_DEADLINE, put.answer)
            .await
            .expect("the PUT ends once the process is gone")
            .unwrap();
        let acknowledged = matches!(answer, Ok((200, _)));
        if in_flight {
            kills_in_flight += 1;
        }
        if acknowledged {
            answered_first += 1;
        }

        // A stage whose owner died waits for the next process's sweep.
        orphaned += stages(&db).await;
        idem = Idem::start(pg.url(), &format!("kill-put-{}", round + 1), &env).await;
        let read = read_partition(&client, &idem, "orders", DAY).await;
        assert_eq!(
            read.status, 200,
            "round {round} ({moment:?}): the day is gone"
        );
        let now = if read.lines == expected[current].lines {
            current
        } else if read.lines == expected[new].lines {
            new
        } else {
            panic!(
                "round {round} ({moment:?}): the day is neither body: {} rows, old {} rows, new {} rows",
                read.lines.len(),
                expected[current].lines.len(),
                expected[new].lines.len()
            );
        };
        if acknowledged {
            assert_eq!(now, new, "round {round}: a PUT answered 200 was lost");
        }
        // The registry agrees with the rows: row count and ETag.
        assert_eq!(read.etag, expected[now].etag, "round {round}: ETag");
        let registered: (i64, String) = sqlx::query_as(
            "select row_count, content_sha256 from idem.partitions where table_name = 'orders' and ds = $1",
        )
        .bind(DAY)
        .fetch_one(&db)
        .await
        .expect("the day is registered");
        assert_eq!(registered.0, ROWS, "round {round}: registered row count");
        assert_eq!(Some(registered.1), expected[now].etag, "round {round}");
        assert_eq!(readyz(&client, &idem).await, 200, "round {round}: /readyz");
        outcome[usize::from(now == new)] += 1;
        current = now;
    }

    // Stages left by the kills go at the next start (nobody holds them) or
    // at the next sweep, every 30 s: within a minute and some.
    let started = Instant::now();
    let mut left = stages(&db).await;
    while left > 0 && started.elapsed() < Duration::from_secs(65) {
        tokio::time::sleep(Duration::from_millis(500)).await;
        left = stages(&db).await;
    }
    assert_eq!(left, 0, "stages still there after {:?}", started.elapsed());
    let spooled = std::fs::read_dir(spool.path()).unwrap().count();
    assert_eq!(spooled, 0, "spool files left behind");
    let ready = readyz(&client, &idem).await;
    assert_eq!(ready, 200);
    report!(
        "kill -9 during PUT: {rounds} rounds, {rounds} kills ({kills_in_flight} with the PUT in flight, \
         {at_swap} within 5 ms of its stage's commit, {answered_first} after its 200), content \
         always the old or the new body ({} old, {} new; every 200 kept), registry row count and \
         ETag agree, {orphaned} stages orphaned by kills, 0 left {:?} after the last round, \
         0 spool files, readyz {ready}",
        outcome[0],
        outcome[1],
        started.elapsed()
    );
    drop(idem);
}
