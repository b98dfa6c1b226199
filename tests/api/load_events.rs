//! `GET /loads/events`: every committed load announced once, in order, to
//! a client that disconnects and resumes from its `Last-Event-ID`, on any
//! idem process; loads refused or rolled back never announced.

use std::time::Duration;

use futures::StreamExt;
use reqwest::Method;
use serde_json::{json, Value};

use crate::helpers::*;

/// One Server-Sent Event: its `id`, `event` and `data` (as JSON).
#[derive(Debug)]
struct Sse {
    id: i64,
    event: String,
    data: Value,
}

/// An open event stream, read event by event.
struct Stream {
    body: futures::stream::BoxStream<'static, reqwest::Result<bytes::Bytes>>,
    buffer: String,
}

impl Stream {
    async fn open(app: &TestApp, query: &str, last_event_id: Option<i64>) -> Stream {
        let mut request = app.client.get(app.url(&format!("/loads/events{query}")));
        if let Some(id) = last_event_id {
            request = request.header("last-event-id", id.to_string());
        }
        let r = request.send().await.unwrap();
        assert_eq!(r.status(), 200);
        assert_eq!(r.headers()["content-type"], "text/event-stream");
        Stream {
            body: r.bytes_stream().boxed(),
            buffer: String::new(),
        }
    }

    /// The next `load` event (heartbeats skipped), within 10 s.
    async fn next_load(&mut self) -> Sse {
        loop {
            if let Some(end) = self.buffer.find("\n\n") {
                let block: String = self.buffer.drain(..end + 2).collect();
                let (mut id, mut event, mut data) = (None, String::new(), String::new());
                for line in block.lines() {
                    if let Some(v) = line.strip_prefix("id:") {
                        id = v.trim().parse().ok();
                    } else if let Some(v) = line.strip_prefix("event:") {
                        event = v.trim().to_string();
                    } else if let Some(v) = line.strip_prefix("data:") {
                        data.push_str(v.trim());
                    }
                }
                if event == "load" {
                    return Sse {
                        id: id.expect("a load event has an id"),
                        event,
                        data: serde_json::from_str(&data).unwrap(),
                    };
                }
                continue;
            }
            let chunk = tokio::time::timeout(Duration::from_secs(10), self.body.next())
                .await
                .expect("an event within 10 s")
                .expect("the stream is open")
                .unwrap();
            self.buffer.push_str(&String::from_utf8_lossy(&chunk));
        }
    }

    /// Nothing but heartbeats for `quiet`.
    async fn stays_quiet(&mut self, quiet: Duration) {
        let next = tokio::time::timeout(quiet, self.next_load()).await;
        assert!(next.is_err(), "an event came: {:?}", next.unwrap());
    }
}

fn order_row(id: i64, ds: &str) -> Value {
    json!({"order_id": id, "ds": ds, "customer_id": 1, "status": "paid",
           "amount": 1.5, "updated_at": "2026-10-12T01:00:00Z", "note": null})
}

/// The committed (published or unchanged) loads of `orders`, oldest first.
async fn committed_loads(app: &TestApp) -> Vec<String> {
    sqlx::query_scalar(
        "select load_id::text from idem.loads
          where table_name = 'orders' and status in ('published', 'unchanged')
          order by finished_at",
    )
    .fetch_all(&app.db)
    .await
    .unwrap()
}

#[tokio::test]
async fn a_client_that_resumes_sees_every_committed_load_once_in_order_from_any_process() {
    let app = spawn_app().await;
    app.declare_orders().await;
    let mut stream = Stream::open(&app, "?table=orders", None).await;

    // A PUT, the same PUT again (unchanged), a batched POST, and a POST
    // refused for a bad row: three announced.
    let day = "/partitions/orders/2026-10-12";
    for _ in 0..2 {
        let put = app.put_ndjson(day, &[order_row(1, "2026-10-12")]).await;
        assert_eq!(put.status(), 200);
    }
    let post = app
        .send_keyed(
            Method::POST,
            "/rows?table=orders",
            "k1",
            &[order_row(2, "2026-10-12")],
        )
        .await;
    assert_eq!(post.status(), 200);
    let bad = app
        .send_keyed(
            Method::POST,
            "/rows?table=orders",
            "k2",
            &[json!({"order_id": "x"})],
        )
        .await;
    assert_eq!(bad.status(), 422);
    let mut seen = Vec::new();
    for _ in 0..3 {
        seen.push(stream.next_load().await);
    }
    let statuses: Vec<&str> = seen
        .iter()
        .map(|e| e.data["status"].as_str().unwrap())
        .collect();
    assert_eq!(statuses, ["published", "unchanged", "published"]);
    stream.stays_quiet(Duration::from_millis(1500)).await;
    drop(stream);

    // While the client is away, another process writes.
    let other = spawn_app_on(app.options.clone(), Default::default()).await;
    let day2 = "/partitions/orders/2026-10-13";
    assert_eq!(
        other
            .put_ndjson(day2, &[order_row(3, "2026-10-13")])
            .await
            .status(),
        200
    );
    let post = other
        .send_keyed(
            Method::POST,
            "/rows?table=orders",
            "k3",
            &[order_row(4, "2026-10-13")],
        )
        .await;
    assert_eq!(post.status(), 200);

    // It resumes on that other process, after the last id it saw.
    let last = seen.last().unwrap().id;
    let mut stream = Stream::open(&other, "?table=orders", Some(last)).await;
    for _ in 0..2 {
        seen.push(stream.next_load().await);
    }
    // And hears, live, what the first process writes next.
    let post = app
        .send_keyed(
            Method::POST,
            "/rows?table=orders",
            "k5",
            &[order_row(5, "2026-10-13")],
        )
        .await;
    assert_eq!(post.status(), 200);
    seen.push(stream.next_load().await);
    stream.stays_quiet(Duration::from_millis(1500)).await;

    let ids: Vec<i64> = seen.iter().map(|e| e.id).collect();
    assert!(
        ids.windows(2).all(|w| w[0] < w[1]),
        "in order, each once: {ids:?}"
    );
    let announced: Vec<String> = seen
        .iter()
        .map(|e| e.data["load_id"].as_str().unwrap().to_string())
        .collect();
    let mut committed = committed_loads(&app).await;
    let mut sorted = announced.clone();
    sorted.sort();
    committed.sort();
    assert_eq!(sorted, committed, "every committed load, and nothing else");
    assert!(seen
        .iter()
        .all(|e| e.event == "load" && e.data["table"] == "orders"));
}

#[tokio::test]
async fn a_stream_is_bounded_per_token_and_its_last_event_id_checked() {
    let app = spawn_app().await;
    app.declare_orders().await;
    let r = app
        .client
        .get(app.url("/loads/events"))
        .header("last-event-id", "yesterday")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 400);
    let mut open = Vec::new();
    for _ in 0..idem::http::load_events::STREAMS_PER_TOKEN {
        open.push(Stream::open(&app, "", None).await);
    }
    let refused = app.get("/loads/events").await;
    assert_eq!(refused.status(), 429);
    assert!(refused.headers().contains_key("retry-after"));
    drop(open.pop());
    // The slot is given back once the server sees the stream closed.
    let mut answered = 0;
    for _ in 0..200 {
        let r = app.get("/loads/events").await;
        answered = r.status().as_u16();
        if answered == 200 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(answered, 200);
}

#[tokio::test]
async fn a_load_rolled_back_is_never_announced_and_a_committed_one_is_once() {
    let app = spawn_app().await;
    let mut listener = sqlx::postgres::PgListener::connect_with(&app.db)
        .await
        .unwrap();
    listener.listen("idem_loads").await.unwrap();
    let record = |status: &'static str| {
        format!(
            "insert into idem.loads (load_id, table_name, mode, status, started_at)
             values (gen_random_uuid(), 'orders', 'replace', '{status}', now())"
        )
    };
    let mut rolled_back = app.db.begin().await.unwrap();
    sqlx::query(&record("published"))
        .execute(&mut *rolled_back)
        .await
        .unwrap();
    rolled_back.rollback().await.unwrap();
    let mut committed = app.db.begin().await.unwrap();
    sqlx::query(&record("published"))
        .execute(&mut *committed)
        .await
        .unwrap();
    // A refusal is recorded, and not announced.
    sqlx::query(&record("rejected"))
        .execute(&mut *committed)
        .await
        .unwrap();
    committed.commit().await.unwrap();

    let told = tokio::time::timeout(Duration::from_secs(5), listener.recv())
        .await
        .expect("the committed load is told")
        .unwrap();
    let told: Value = serde_json::from_str(told.payload()).unwrap();
    assert_eq!(told.as_array().unwrap().len(), 1, "{told}");
    assert_eq!(told[0]["status"], "published");
    let more = tokio::time::timeout(Duration::from_millis(500), listener.recv()).await;
    assert!(more.is_err(), "only the committed load is told");
    // Announced once, whichever announcer (the server's own, or this
    // round) gives it its position.
    app.state.store.announce_loads().await.unwrap();
    let announced: Vec<String> = sqlx::query_scalar("select load_id::text from idem.load_events")
        .fetch_all(&app.db)
        .await
        .unwrap();
    assert_eq!(announced, [told[0]["load_id"].as_str().unwrap()]);
}
