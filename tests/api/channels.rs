//! Channels (`POST /rows?channel=&offset=`, `/channels`): an offset commits
//! once with its rows, an offset not greater than the committed one writes
//! nothing, per token, whatever the producers racing on one channel.

use std::collections::BTreeMap;

use serde_json::{json, Value};

use crate::helpers::*;
use crate::support::*;

/// `POST /rows?{query}` with `client`, the rows as NDJSON; the status and
/// the answer's JSON.
async fn post_with(
    client: &reqwest::Client,
    app: &TestApp,
    query: &str,
    key: Option<&str>,
    body: String,
) -> (u16, Value) {
    let mut request = client
        .post(app.url(&format!("/rows?{query}")))
        .header("content-type", "application/x-ndjson")
        .body(body);
    if let Some(key) = key {
        request = request.header("idempotency-key", key);
    }
    let r = request.send().await.unwrap();
    (r.status().as_u16(), json_body(r).await)
}

/// The admin's `POST /rows?{query}` of `rows`.
async fn post(app: &TestApp, query: &str, rows: &[Value]) -> (u16, Value) {
    post_with(&app.client, app, query, None, ndjson(rows)).await
}

/// `GET {path}` with `client`: the status and the answer's JSON.
async fn get_with(client: &reqwest::Client, app: &TestApp, path: &str) -> (u16, Value) {
    let r = client.get(app.url(path)).send().await.unwrap();
    (r.status().as_u16(), json_body(r).await)
}

async fn orders_count(app: &TestApp) -> i64 {
    sqlx::query_scalar("select count(*) from idem_data.orders")
        .fetch_one(&app.db)
        .await
        .unwrap()
}

fn orders(ids: std::ops::RangeInclusive<i64>) -> Vec<Value> {
    ids.map(|id| order(id, "paid", "2026-10-12T01:00:00Z"))
        .collect()
}

#[tokio::test]
async fn an_offset_commits_once_and_the_same_or_a_lower_one_writes_nothing() {
    let app = spawn_app().await;
    app.declare_orders().await;
    let (status, first) = post(&app, "table=orders&channel=c1&offset=5", &orders(1..=2)).await;
    assert_eq!(status, 200, "{first}");
    assert_eq!(first["committed"], true);
    assert_eq!(first["channel"], "c1");
    assert_eq!(first["offset"], "5");
    assert_eq!(first["offset_kind"], "integer");
    assert_eq!(first["committed_offset"], "5");
    assert_eq!(first["inserted"], 2);
    assert_eq!(first["replayed"], false);

    for offset in ["5", "005", "3", "0"] {
        let query = format!("table=orders&channel=c1&offset={offset}");
        let (status, skipped) = post(&app, &query, &orders(3..=4)).await;
        assert_eq!(status, 200, "{skipped}");
        assert_eq!(
            skipped,
            // The offset in its written form: no leading zeros.
            json!({"table": "orders", "channel": "c1",
                   "offset": offset.parse::<u64>().unwrap().to_string(),
                   "offset_kind": "integer", "committed": false, "committed_offset": "5",
                   "replayed": false})
        );
    }
    assert_eq!(
        orders_count(&app).await,
        2,
        "a skipped offset writes nothing"
    );

    let (_, next) = post(&app, "table=orders&channel=c1&offset=10", &orders(3..=4)).await;
    assert_eq!(next["committed"], true, "{next}");
    assert_eq!(next["committed_offset"], "10");
    assert_eq!(orders_count(&app).await, 4);
    assert_eq!(
        app.loads_with_key("channel:c1@5").await,
        vec![("published".to_string(), 2)],
        "one ledger entry, named by the channel and offset"
    );

    let metrics = app.get("/metrics").await.text().await.unwrap();
    assert!(metrics.contains(r#"idem_channel_commits_total{table="orders"} 2"#));
    assert!(metrics.contains(r#"idem_channel_offsets_skipped_total{table="orders"} 4"#));
}

#[tokio::test]
async fn get_channels_shows_where_each_channel_stands() {
    let app = spawn_app().await;
    app.declare_orders().await;
    let (status, missing) = get_with(&app.client, &app, "/channels/c1").await;
    assert_eq!(
        (status, missing["code"].as_str()),
        (404, Some("channel_not_found"))
    );
    post(&app, "table=orders&channel=c1&offset=1", &orders(1..=1)).await;
    let (_, last) = post(&app, "table=orders&channel=c1&offset=7", &orders(2..=2)).await;
    post(&app, "table=orders&channel=c0&offset=a", &orders(3..=3)).await;

    let (status, c1) = get_with(&app.client, &app, "/channels/c1").await;
    assert_eq!(status, 200, "{c1}");
    assert_eq!(c1["name"], "c1");
    assert_eq!(c1["offset_kind"], "integer");
    assert_eq!(c1["committed_offset"], "7");
    assert_eq!(c1["table"], "orders");
    assert_eq!(c1["load_id"], last["load_id"]);
    assert_eq!(c1["commits"], 2);
    assert!(c1["committed_at"].is_string());

    let (status, list) = get_with(&app.client, &app, "/channels").await;
    assert_eq!(status, 200);
    let names: Vec<&str> = list
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["c0", "c1"]);
    assert_eq!(list[0]["offset_kind"], "text");
    assert_eq!(list[1], c1);
    let paged = all_pages(&app, "/channels?limit=1", 1).await;
    assert_eq!(
        paged,
        list.as_array().unwrap().clone(),
        "pages of one, by name"
    );
    for bad in ["/channels/-x", "/channels?cursor=%00"] {
        let (status, problem) = get_with(&app.client, &app, bad).await;
        assert_eq!(
            (status, problem["code"].as_str()),
            (400, Some("invalid_request")),
            "{bad}"
        );
    }
}

#[tokio::test]
async fn delete_resets_a_channel_and_only_an_admin_may() {
    let app = spawn_app().await;
    app.declare_orders().await;
    let grants = json!({"name": "producer", "scopes": ["write", "read"]});
    let (producer_id, secret) = make_token(&app.client, &app.base, &grants).await;
    let producer = client_with_token(&secret);
    let body = ndjson(&orders(1..=1));
    let query = "table=orders&channel=c1&offset=9";
    let (status, _) = post_with(&producer, &app, query, None, body.clone()).await;
    assert_eq!(status, 200);

    let r = producer
        .delete(app.url("/channels/c1"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 403, "a write token cannot reset its channel");
    let reset = format!("/channels/c1?principal={producer_id}");
    let r = app.client.delete(app.url(&reset)).send().await.unwrap();
    assert_eq!(r.status(), 204);
    let (status, _) = get_with(&producer, &app, "/channels/c1").await;
    assert_eq!(status, 404, "reset");
    let r = app.client.delete(app.url(&reset)).send().await.unwrap();
    assert_eq!(r.status(), 204, "a reset of nothing is a 204 too");
    let not_a_principal = "/channels/c1?principal=x%00y";
    let r = app
        .client
        .delete(app.url(not_a_principal))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 400);

    // Reset, the channel takes any offset, of any kind, again.
    let query = "table=orders&channel=c1&offset=0/1";
    let (_, again) = post_with(&producer, &app, query, None, body).await;
    assert_eq!(again["committed"], true, "{again}");
    assert_eq!(again["offset_kind"], "lsn");
    // The admin's own channel of that name is another channel.
    let r = app
        .client
        .delete(app.url("/channels/c1"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 204);
    let (_, still) = get_with(&producer, &app, "/channels/c1").await;
    assert_eq!(still["committed_offset"], "0/1");
}

#[tokio::test]
async fn each_token_has_its_own_channels() {
    let app = spawn_app().await;
    app.declare_orders().await;
    let mut clients = Vec::new();
    for name in ["a", "b"] {
        // Only the write scope: a producer reads its own channel all the same.
        let grants = json!({"name": name, "scopes": ["write"]});
        let (_, secret) = make_token(&app.client, &app.base, &grants).await;
        clients.push(client_with_token(&secret));
    }
    let (a, b) = (&clients[0], &clients[1]);
    let body = |ids| ndjson(&orders(ids));
    let (_, first) = post_with(
        a,
        &app,
        "table=orders&channel=c&offset=5",
        None,
        body(1..=1),
    )
    .await;
    assert_eq!(first["committed"], true);
    let (_, other) = post_with(
        b,
        &app,
        "table=orders&channel=c&offset=1",
        None,
        body(2..=2),
    )
    .await;
    assert_eq!(
        other["committed"], true,
        "b's channel c is not a's: {other}"
    );
    let (_, again) = post_with(
        b,
        &app,
        "table=orders&channel=c&offset=1",
        None,
        body(2..=2),
    )
    .await;
    assert_eq!(again["committed"], false);

    let (status, seen_by_a) = get_with(a, &app, "/channels/c").await;
    assert_eq!(status, 200, "{seen_by_a}");
    assert_eq!(seen_by_a["committed_offset"], "5");
    let (_, seen_by_b) = get_with(b, &app, "/channels").await;
    assert_eq!(seen_by_b.as_array().unwrap().len(), 1);
    assert_eq!(seen_by_b[0]["committed_offset"], "1");
    let (status, _) = get_with(&app.client, &app, "/channels/c").await;
    assert_eq!(status, 404, "the admin has no channel c");
}

#[tokio::test]
async fn lsn_offsets_compare_as_wal_positions_not_as_text() {
    let app = spawn_app().await;
    app.declare_orders().await;
    let query = |offset: &str| format!("table=orders&channel=slot&offset={offset}");
    let (_, first) = post(&app, &query("9/FFFFFFFF"), &orders(1..=1)).await;
    assert_eq!(first["offset_kind"], "lsn", "{first}");
    let (_, later) = post(&app, &query("16/B374D848"), &orders(2..=2)).await;
    assert_eq!(later["committed"], true, "16/… is after 9/…: {later}");
    for earlier in ["A/0", "16/b374d848", "16/B374D847"] {
        let (status, skipped) = post(&app, &query(earlier), &orders(3..=3)).await;
        assert_eq!(status, 200);
        assert_eq!(skipped["committed"], false, "{earlier}: {skipped}");
        assert_eq!(skipped["committed_offset"], "16/B374D848");
    }
    let (_, next) = post(&app, &query("16/B374D849"), &orders(3..=3)).await;
    assert_eq!(next["committed"], true);
    assert_eq!(orders_count(&app).await, 3);
}

#[tokio::test]
async fn an_offset_or_kind_that_does_not_fit_the_channel_is_refused() {
    let app = spawn_app().await;
    app.declare_orders().await;
    let rows = orders(1..=1);
    post(&app, "table=orders&channel=c&offset=5", &rows).await;
    let refused = [
        ("table=orders&channel=c&offset=abc", 400, "invalid_request"),
        // Not even an LSN: refused before the channel is read.
        (
            "table=orders&channel=c&offset=6&offset_kind=lsn",
            400,
            "invalid_request",
        ),
        (
            "table=orders&channel=c&offset=0/6&offset_kind=lsn",
            409,
            "channel_kind",
        ),
        ("table=orders&channel=c", 400, "invalid_request"),
        ("table=orders&offset=6", 400, "invalid_request"),
        ("table=orders&channel=-c&offset=6", 400, "invalid_request"),
        (
            "table=orders&channel=d&offset=x&offset_kind=integer",
            400,
            "invalid_request",
        ),
        (
            "table=orders&channel=d&offset=1&offset_kind=number",
            400,
            "invalid_request",
        ),
        ("table=orders&channel=d&offset=", 400, "invalid_request"),
    ];
    for (query, status, code) in refused {
        let (got, problem) = post(&app, query, &orders(2..=2)).await;
        assert_eq!(
            (got, problem["code"].as_str()),
            (status, Some(code)),
            "{query}: {problem}"
        );
    }
    assert_eq!(orders_count(&app).await, 1);
    let (_, c) = get_with(&app.client, &app, "/channels/c").await;
    assert_eq!(
        (c["committed_offset"].as_str(), c["commits"].as_i64()),
        (Some("5"), Some(1))
    );
    let (_, fits) = post(
        &app,
        "table=orders&channel=c&offset=6&offset_kind=integer",
        &rows,
    )
    .await;
    assert_eq!(
        fits["committed"], true,
        "the kind it has may be named: {fits}"
    );
}

fn bad_order() -> Value {
    json!({"order_id": "not a number", "ds": "2026-10-12", "updated_at": "2026-10-12T01:00:00Z"})
}

#[tokio::test]
async fn a_refused_body_commits_no_offset_and_a_quarantined_one_commits_with_its_good_rows() {
    let app = spawn_app().await;
    app.declare_orders().await;
    let mixed = vec![order(1, "paid", "2026-10-12T01:00:00Z"), bad_order()];
    let (status, refused) = post(&app, "table=orders&channel=c&offset=1", &mixed).await;
    assert_eq!((status, refused["code"].as_str()), (422, Some("bad_rows")));
    let (status, _) = get_with(&app.client, &app, "/channels/c").await;
    assert_eq!(status, 404, "a refused write commits no offset");
    assert_eq!(orders_count(&app).await, 0);

    let query = "table=orders&channel=c&offset=1&bad_rows=quarantine";
    let (status, kept) = post(&app, query, &mixed).await;
    assert_eq!(status, 200, "{kept}");
    assert_eq!(
        (kept["committed"].as_bool(), kept["rejected"].as_i64()),
        (Some(true), Some(1))
    );
    assert_eq!(orders_count(&app).await, 1);
    let (_, c) = get_with(&app.client, &app, "/channels/c").await;
    assert_eq!(c["committed_offset"], "1");
    let (_, again) = post(&app, query, &mixed).await;
    assert_eq!(again["committed"], false, "{again}");
    let rejects: i64 = sqlx::query_scalar("select count(*) from idem.rejects")
        .fetch_one(&app.db)
        .await
        .unwrap();
    assert_eq!(rejects, 1, "a skipped offset keeps no reject either");
}

#[tokio::test]
async fn with_an_idempotency_key_both_the_key_and_the_channel_apply() {
    let app = spawn_app().await;
    app.declare_orders().await;
    let query = "table=orders&channel=c&offset=1";
    let body = ndjson(&orders(1..=2));
    let (_, first) = post_with(&app.client, &app, query, Some("k1"), body.clone()).await;
    assert_eq!(first["committed"], true, "{first}");
    let (_, replay) = post_with(&app.client, &app, query, Some("k1"), body.clone()).await;
    let mut expected = first.clone();
    expected["replayed"] = json!(true);
    assert_eq!(replay, expected, "the key answers its stored receipt");

    let (_, skipped) = post_with(&app.client, &app, query, Some("k2"), body.clone()).await;
    assert_eq!(
        skipped["committed"], false,
        "a new key, the same offset: {skipped}"
    );
    let (_, skip_replayed) = post_with(&app.client, &app, query, Some("k2"), body.clone()).await;
    assert_eq!(skip_replayed["committed"], false);
    assert_eq!(
        skip_replayed["replayed"], true,
        "the key stored what it answered"
    );
    let (status, reused) =
        post_with(&app.client, &app, query, Some("k2"), ndjson(&orders(3..=3))).await;
    assert_eq!(
        (status, reused["code"].as_str()),
        (422, Some("idempotency_key_reused"))
    );
    assert_eq!(orders_count(&app).await, 2);
    assert_eq!(
        app.loads_with_key("k1").await,
        vec![("published".to_string(), 2)]
    );
    assert_eq!(
        app.loads_with_key("k2").await,
        vec![],
        "a skip makes no load"
    );
    let (_, k2) = get_with(&app.client, &app, "/idempotency-keys/k2").await;
    assert_eq!(k2["load_id"], Value::Null, "{k2}");
}

#[tokio::test]
async fn a_channel_post_needs_no_key_and_any_other_post_still_does() {
    let app = spawn_app().await;
    app.declare_orders().await;
    let (status, problem) = post(&app, "table=orders", &orders(1..=1)).await;
    assert_eq!(
        (status, problem["code"].as_str()),
        (400, Some("idempotency_key_missing"))
    );
    let (status, receipt) = post(&app, "table=orders&channel=c&offset=1", &orders(1..=1)).await;
    assert_eq!(status, 200, "{receipt}");
    let r = app
        .client
        .post(app.url("/rows?table=orders&channel=c&offset=2"))
        .send()
        .await
        .unwrap();
    assert_eq!(
        r.status(),
        415,
        "a body's checks still hold: {}",
        r.text().await.unwrap()
    );
}

/// Events rows of one offset: its number in every row, so that a write
/// twice would show as twice the rows.
fn events_of(offset: u64, rows: u64) -> String {
    (0..rows)
        .map(|n| {
            event_line(
                &format!("o{offset}"),
                i64::try_from(n).unwrap(),
                "2026-10-12",
            )
        })
        .collect()
}

#[tokio::test]
async fn producers_racing_on_one_channel_write_each_offset_once() {
    let app = spawn_app().await;
    assert!(app.declare("events", EVENTS).await.status().is_success());
    const PRODUCERS: usize = 8;
    const OFFSETS: u64 = 12;
    const ROWS: u64 = 3;
    let mut producers = Vec::new();
    for _ in 0..PRODUCERS {
        let (client, base) = (app.client.clone(), app.base.clone());
        producers.push(tokio::spawn(async move {
            let mut answers = Vec::new();
            for offset in 1..=OFFSETS {
                let r = client
                    .post(format!(
                        "{base}/rows?table=events&channel=cdc&offset={offset}"
                    ))
                    .header("content-type", "application/x-ndjson")
                    .body(events_of(offset, ROWS))
                    .send()
                    .await
                    .unwrap();
                answers.push((offset, r.status().as_u16(), json_body(r).await));
            }
            answers
        }));
    }
    let mut commits: BTreeMap<u64, usize> = BTreeMap::new();
    for producer in producers {
        for (offset, status, answer) in producer.await.unwrap() {
            assert_eq!(status, 200, "offset {offset}: {answer}");
            if answer["committed"] == true {
                *commits.entry(offset).or_default() += 1;
            } else {
                assert_eq!(answer["committed"], false, "{answer}");
            }
        }
    }
    let every_offset_once: BTreeMap<u64, usize> = (1..=OFFSETS).map(|o| (o, 1)).collect();
    assert_eq!(commits, every_offset_once);
    let per_offset: Vec<(String, i64)> = sqlx::query_as(
        "select batch, count(*) from idem_data.events group by batch order by batch",
    )
    .fetch_all(&app.db)
    .await
    .unwrap();
    assert_eq!(per_offset.len(), usize::try_from(OFFSETS).unwrap());
    assert!(per_offset.iter().all(|(_, n)| *n == 3), "{per_offset:?}");
    let (_, channel) = get_with(&app.client, &app, "/channels/cdc").await;
    assert_eq!(channel["committed_offset"], OFFSETS.to_string());
    assert_eq!(channel["commits"], OFFSETS);
    let head = app
        .client
        .head(app.url("/partitions/events/2026-10-12"))
        .send()
        .await
        .unwrap();
    let counted = &head.headers()["idem-row-count"];
    assert_eq!(counted.to_str().unwrap(), (OFFSETS * ROWS).to_string());
}

#[tokio::test]
async fn producers_on_distinct_channels_into_one_table_all_commit() {
    let app = spawn_app().await;
    assert!(app.declare("events", EVENTS).await.status().is_success());
    const PRODUCERS: u64 = 16;
    const OFFSETS: u64 = 5;
    let mut producers = Vec::new();
    for p in 0..PRODUCERS {
        let (client, base) = (app.client.clone(), app.base.clone());
        producers.push(tokio::spawn(async move {
            let mut answers = Vec::new();
            for offset in 1..=OFFSETS {
                let query = format!("table=events&channel=p{p}&offset={offset}");
                let r = client
                    .post(format!("{base}/rows?{query}"))
                    .header("content-type", "application/x-ndjson")
                    .body(events_of(p * 100 + offset, 2))
                    .send()
                    .await
                    .unwrap();
                answers.push((r.status().as_u16(), json_body(r).await));
            }
            answers
        }));
    }
    for producer in producers {
        for (status, answer) in producer.await.unwrap() {
            assert_eq!(
                (status, &answer["committed"]),
                (200, &json!(true)),
                "{answer}"
            );
        }
    }
    let rows: i64 = sqlx::query_scalar("select count(*) from idem_data.events")
        .fetch_one(&app.db)
        .await
        .unwrap();
    assert_eq!(rows, i64::try_from(PRODUCERS * OFFSETS * 2).unwrap());
    let head = app
        .client
        .head(app.url("/partitions/events/2026-10-12"))
        .send()
        .await
        .unwrap();
    let counted = &head.headers()["idem-row-count"];
    assert_eq!(counted.to_str().unwrap(), rows.to_string());
    let (_, list) = get_with(&app.client, &app, "/channels").await;
    let offsets: Vec<&str> = list
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["committed_offset"].as_str().unwrap())
        .collect();
    assert_eq!(offsets, vec!["5"; 16]);
}

#[tokio::test]
async fn a_channel_post_to_an_undeclared_table_makes_it_once() {
    let app = spawn_app().await;
    let query = "table=clicks&channel=c&offset=1";
    let body = events_of(1, 2);
    let (status, first) = post_with(&app.client, &app, query, None, body.clone()).await;
    assert_eq!(status, 200, "{first}");
    assert_eq!(
        (first["mode"].as_str(), first["committed"].as_bool()),
        (Some("append"), Some(true))
    );
    let (_, again) = post_with(&app.client, &app, query, None, body).await;
    assert_eq!(again["committed"], false);
    let rows: i64 = sqlx::query_scalar("select count(*) from idem_data.clicks")
        .fetch_one(&app.db)
        .await
        .unwrap();
    assert_eq!(rows, 2);
}

#[tokio::test]
async fn a_reset_channel_sent_its_offsets_again_stores_no_row_twice() {
    let app = spawn_app().await;
    assert!(app.declare("events", EVENTS).await.status().is_success());
    let send = |offset: u64| {
        let (client, query) = (
            app.client.clone(),
            format!("table=events&channel=replayed&offset={offset}"),
        );
        let app = &app;
        async move { post_with(&client, app, &query, None, events_of(offset, 3)).await }
    };
    assert_eq!(send(1).await.0, 200);
    let r = app
        .client
        .delete(app.url("/channels/replayed"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 204);
    // The stream sent again from its start: the same rows, not new ones.
    let (status, again) = send(1).await;
    assert_eq!(status, 200, "{again}");
    assert_eq!(again["committed"], true);
    assert_eq!(again["inserted"], 0, "{again}");
    let (status, next) = send(2).await;
    assert_eq!((status, &next["inserted"]), (200, &json!(3)), "{next}");
    let stored: i64 = sqlx::query_scalar("select count(*) from idem_data.events")
        .fetch_one(&app.db)
        .await
        .unwrap();
    assert_eq!(stored, 6);
}

#[tokio::test]
async fn a_committed_offset_answers_a_bad_body_unread_and_bytes_that_are_not_utf8_are_no_offset() {
    let app = spawn_app().await;
    app.declare_orders().await;
    let (status, _) = post(&app, "table=orders&channel=c&offset=10", &orders(1..=1)).await;
    assert_eq!(status, 200);
    // Twice, so that the second goes the way of a table this process knows.
    for _ in 0..2 {
        let (status, skipped) = post_with(
            &app.client,
            &app,
            "table=orders&channel=c&offset=5",
            None,
            "not json at all {{{\n".into(),
        )
        .await;
        assert_eq!(status, 200, "{skipped}");
        assert_eq!(skipped["committed"], false);
    }
    let (status, problem) = post(&app, "table=orders&channel=t&offset=a%FFb", &orders(2..=2)).await;
    assert_eq!(status, 400, "{problem}");
    assert_eq!(orders_count(&app).await, 1);
}

#[tokio::test]
async fn a_dropped_tables_channels_go_with_it_so_the_same_offsets_write_again() {
    let app = spawn_app().await;
    app.declare_orders().await;
    let (status, _) = post(&app, "table=orders&channel=feed&offset=42", &orders(1..=2)).await;
    assert_eq!(status, 200);
    // Another table's channel stays.
    let (status, _) = post(
        &app,
        "table=other&channel=elsewhere&offset=7",
        &orders(3..=3),
    )
    .await;
    assert_eq!(status, 200);

    let r = app
        .client
        .delete(app.url("/tables/orders?confirm=orders"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(json_body(r).await["channels_removed"], 1);
    let (status, _) = get_with(&app.client, &app, "/channels/feed").await;
    assert_eq!(status, 404, "the dropped table's channel is gone");
    let (status, kept) = get_with(&app.client, &app, "/channels/elsewhere").await;
    assert_eq!((status, &kept["committed_offset"]), (200, &json!("7")));

    app.declare_orders().await;
    let (status, again) = post(&app, "table=orders&channel=feed&offset=42", &orders(1..=2)).await;
    assert_eq!(status, 200, "{again}");
    assert_eq!(
        (&again["committed"], &again["rows_written"]),
        (&json!(true), &json!(2)),
        "{again}"
    );
    assert_eq!(orders_count(&app).await, 2);
}

#[tokio::test]
async fn a_reset_takes_the_principals_the_spec_names_and_refuses_the_rest() {
    let app = spawn_app().await;
    let spec = app.get("/openapi.yaml").await.text().await.unwrap();
    let parameter = spec
        .split("- name: principal")
        .nth(1)
        .and_then(|rest| rest.split("responses:").next())
        .expect("the reset's principal parameter");
    for form in ["format: uuid", "enum: [admin, anonymous]"] {
        assert!(parameter.contains(form), "{form} in {parameter}");
    }
    for (principal, status) in [
        ("0193c7e4-5b1a-7c2e-9d41-6f0a2b3c4d5e", 204),
        ("admin", 204),
        ("anonymous", 204),
        ("someone", 400),
        ("", 400),
    ] {
        let path = format!("/channels/c1?principal={principal}");
        let r = app.client.delete(app.url(&path)).send().await.unwrap();
        assert_eq!(r.status(), status, "{principal:?}");
    }
}
