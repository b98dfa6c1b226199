//! The web console in a real browser: headless Chromium, driven over
//! WebDriver, against the real server and Postgres. Each test saves
//! screenshots of the pages it passes (see `browser`).

use serde_json::{json, Value};

use crate::browser::Browser;
use crate::helpers::*;
use crate::support::*;

const EVENTS: &str = QUARANTINED_EVENTS;

async fn put_day(app: &TestApp, table: &str, ds: &str, rows: usize) {
    let body: String = (0..rows)
        .map(|i| format!("{{\"id\": {i}, \"ds\": \"{ds}\", \"qty\": 1}}\n"))
        .collect();
    let r = app
        .put(
            &format!("/partitions/{table}/{ds}"),
            "application/x-ndjson",
            body,
        )
        .await;
    assert_eq!(r.status(), 200, "{}", r.text().await.unwrap());
}

/// A daily table of events, keyed by `id`, whose bad rows refuse the load.
const REFUSING_EVENTS: &str = r#"{"columns": {"id": "bigint", "ds": "date", "qty": "integer"},
  "primary_key": ["id"]}"#;

/// A load of `table` refused for a bad row: the ledger has it, the
/// partition stays as it was.
async fn refused_load(app: &TestApp, table: &str, ds: &str) {
    let body = format!("{{\"id\": 1, \"ds\": \"{ds}\", \"qty\": \"many\"}}\n");
    let path = format!("/partitions/{table}/{ds}");
    let r = app.put(&path, "application/x-ndjson", body).await;
    assert_eq!(r.status(), 422, "{}", r.text().await.unwrap());
}

/// A table without partitions, with a few rows.
async fn plain_table(app: &TestApp, table: &str) {
    let declaration = r#"{"columns": {"id": "bigint", "name": "text"},
      "partition_by": null, "primary_key": ["id"]}"#;
    assert_eq!(app.declare(table, declaration).await.status(), 201);
    let rows = "{\"id\": 1, \"name\": \"Ada\"}\n{\"id\": 2, \"name\": \"Grace\"}\n";
    let r = app
        .client
        .post(app.url(&format!("/rows?table={table}")))
        .header("content-type", "application/x-ndjson")
        .header("idempotency-key", format!("{table}-rows"))
        .body(rows)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200, "{}", r.text().await.unwrap());
}

/// The text of each element `selector` finds, in order.
async fn texts(browser: &Browser, selector: &str) -> Vec<String> {
    let mut texts = Vec::new();
    for element in browser.all(selector).await {
        texts.push(element.text().await.unwrap());
    }
    texts
}

/// Asserts that the calendar's columns, a week each, are all as wide,
/// those whose heading names a month too, and the cells in them.
async fn weeks_are_equally_wide(browser: &Browser) {
    let mut widths = Vec::new();
    for selector in [
        "table.calendar tbody tr:first-child > td",
        "table.calendar thead th",
    ] {
        for element in browser.all(selector).await {
            widths.push(element.rectangle().await.unwrap().2);
        }
    }
    // 2026, from Thursday 1 January to Thursday 31 December.
    assert_eq!(widths.len(), 2 * 53);
    let narrowest = widths.iter().copied().fold(f64::INFINITY, f64::min);
    let widest = widths.iter().copied().fold(0.0, f64::max);
    assert!(widest - narrowest < 0.5, "{widths:?}");
}

/// What `GET /tables` answers `client`.
async fn tables_status(app: &TestApp, client: &reqwest::Client) -> u16 {
    let r = client.get(app.url("/tables")).send().await.unwrap();
    r.status().as_u16()
}

#[tokio::test]
async fn a_read_token_signs_in_and_sees_only_its_tables() {
    let app = spawn_app().await;
    for table in ["sales_eu", "sales_us", "payroll"] {
        assert_eq!(app.declare(table, EVENTS).await.status(), 201);
        put_day(&app, table, "2026-10-12", 3).await;
    }
    let (_, secret) = make_token(
        &app.client,
        &app.base,
        &json!({"name": "analyst", "scopes": ["read"], "tables": ["sales_*"]}),
    )
    .await;
    let browser = Browser::start().await;
    browser.goto(&app.url("/console")).await;
    assert_eq!(browser.title().await, "Sign in · idem");
    browser.screenshot("sign-in").await;
    browser.sign_in(&app.base, &secret).await;
    assert_eq!(browser.title().await, "Tables · idem");
    let shown: Vec<String> = futures::future::join_all(
        browser
            .all("tr[data-table]")
            .await
            .iter()
            .map(|row| async { row.attr("data-table").await.unwrap().unwrap() }),
    )
    .await;
    assert_eq!(shown, ["sales_eu", "sales_us"]);
    assert!(browser.text(".who").await.contains("analyst"));
    // A read token has no Tokens section, and the page refuses it.
    assert!(browser.all("a[href='/console/tokens']").await.is_empty());
    browser.goto(&app.url("/console/tokens")).await;
    assert!(browser.title().await.starts_with("403"));
    browser.goto(&app.url("/console/tables/payroll")).await;
    assert!(browser.title().await.starts_with("403"));
    // Sign out: the session is gone, the pages send back to sign-in.
    browser.goto(&app.url("/console/tables")).await;
    browser.click("form.signout button").await;
    assert_eq!(browser.title().await, "Sign in · idem");
    browser.goto(&app.url("/console/tables")).await;
    assert_eq!(browser.title().await, "Sign in · idem");
    let sessions: i64 = sqlx::query_scalar("select count(*) from idem.console_sessions")
        .fetch_one(&app.db)
        .await
        .unwrap();
    assert_eq!(sessions, 0);
}

#[tokio::test]
async fn a_tables_calendar_shows_a_missing_day_and_a_shrunken_day() {
    let app = spawn_app().await;
    assert_eq!(app.declare("events", REFUSING_EVENTS).await.status(), 201);
    for day in 1..=20 {
        let ds = format!("2026-10-{day:02}");
        match day {
            10 => continue,
            15 => put_day(&app, "events", &ds, 2).await,
            _ => put_day(&app, "events", &ds, 20).await,
        }
    }
    refused_load(&app, "events", "2026-10-20").await;
    plain_table(&app, "customers").await;
    let browser = Browser::start().await;
    browser.sign_in(&app.base, ADMIN_TOKEN).await;
    let customers = browser
        .text("tr[data-table='customers'] td:nth-child(3)")
        .await;
    assert_eq!(customers, "whole");
    let events = browser.text("tr[data-table='events'] td.refused").await;
    assert!(events.ends_with("rejected"), "{events}");
    browser.screenshot("tables").await;
    browser.click("tr[data-table='events'] a").await;
    assert_eq!(browser.title().await, "events · idem");
    let class = |ds: &'static str| {
        let browser = &browser;
        async move {
            let cell = browser.css(&format!("td[data-ds='{ds}']")).await;
            cell.attr("class").await.unwrap().unwrap_or_default()
        }
    };
    assert!(class("2026-10-10").await.contains("missing"));
    let shrunk = class("2026-10-15").await;
    assert!(shrunk.contains("moved"), "{shrunk}");
    assert!(shrunk.contains("shade-1"), "{shrunk}");
    let normal = class("2026-10-14").await;
    assert!(
        !normal.contains("moved") && normal.contains("shade-4"),
        "{normal}"
    );
    // Before the first day and after the last nothing is expected.
    assert!(!class("2026-09-30").await.contains("missing"));
    assert!(!class("2026-10-21").await.contains("missing"));
    let chart = browser.css("figure.chart svg").await;
    let described = chart.attr("aria-label").await.unwrap().unwrap();
    assert!(
        described.contains("from 2026-10-01 to 2026-10-20"),
        "{described}"
    );
    assert_eq!(
        browser.all("figure.chart polyline").await.len(),
        2,
        "a gap at the missing day"
    );
    assert_eq!(
        texts(&browser, "figure.chart text.y-tick").await,
        ["0", "5", "10", "15", "20"]
    );
    assert_eq!(
        texts(&browser, "figure.chart text.x-label").await,
        ["2026-10-01", "2026-10-20"]
    );
    assert_eq!(
        browser.all("figure.chart circle").await.len(),
        19,
        "a dot a day"
    );
    weeks_are_equally_wide(&browser).await;
    browser.screenshot("table").await;
    browser.screenshot_of("figure.chart", "table-chart").await;
    // A day's cell leads to the loads that wrote it.
    browser.click("td[data-ds='2026-10-15'] a").await;
    assert_eq!(browser.title().await, "Loads · idem");
    let rows = browser.all("tr[data-load]").await;
    assert_eq!(rows.len(), 1);
    assert!(rows[0].text().await.unwrap().contains("2026-10-15"));
    browser.screenshot("loads").await;
}

#[tokio::test]
async fn quarantined_rows_are_replayed_from_the_rejects_page_once_the_column_is_widened() {
    let app = spawn_app().await;
    assert_eq!(app.declare("events", EVENTS).await.status(), 201);
    // Ten quantities too large for an integer, and two good rows.
    let mut rows: Vec<Value> = (1..=10)
        .map(|i| json!({"id": i, "ds": "2026-10-12", "qty": 3_000_000_000i64 + i}))
        .collect();
    rows.push(json!({"id": 11, "ds": "2026-10-12", "qty": 1}));
    rows.push(json!({"id": 12, "ds": "2026-10-12", "qty": 2}));
    let receipt = json_body(app.put_ndjson("/partitions/events/2026-10-12", &rows).await).await;
    assert_eq!(receipt["rejected"], 10, "{receipt}");

    let browser = Browser::start().await;
    browser.sign_in(&app.base, ADMIN_TOKEN).await;
    browser
        .goto(&app.url("/console/rejects?table=events"))
        .await;
    let group = browser.css("tr[data-column='qty']").await;
    assert!(group.text().await.unwrap().ends_with("10"));
    let listed = browser.all("table.rejects tr[data-record]").await;
    assert_eq!(listed.len(), 10);
    // Each as it was sent.
    let first = browser.text("table.rejects tr[data-record] pre.raw").await;
    assert_eq!(first, r#"{"ds":"2026-10-12","id":1,"qty":3000000001}"#);
    browser.screenshot("rejects").await;

    let widened = EVENTS.replace(r#""qty": "integer""#, r#""qty": "bigint""#);
    assert_eq!(app.declare("events", &widened).await.status(), 200);
    browser
        .click("form[action='/console/rejects/replay'] button")
        .await;
    assert_eq!(browser.text("#written").await, "10");
    assert_eq!(browser.text("#still-pending").await, "0");
    assert!(browser
        .all("table.rejects tr[data-record]")
        .await
        .is_empty());
    browser.screenshot("rejects-replayed").await;
    assert_eq!(app.count("events", "2026-10-12").await, 12);
    let big: i64 = sqlx::query_scalar("select max(qty) from idem_data.events")
        .fetch_one(&app.db)
        .await
        .unwrap();
    assert_eq!(big, 3_000_000_010);
    // The replay is in the ledger under the key the page made.
    let loads = json_body(app.get("/loads?table=events").await).await;
    let replay = &loads[0];
    assert_eq!(replay["mode"], "replay", "{loads}");
    assert!(replay["idempotency_key"]
        .as_str()
        .unwrap()
        .starts_with("console-replay-"));
}

#[tokio::test]
async fn a_token_revoked_on_the_tokens_page_is_refused_by_the_api() {
    let app = spawn_app().await;
    let (id, secret) = make_token(
        &app.client,
        &app.base,
        &json!({"name": "loader", "scopes": ["write"], "tables": ["*"]}),
    )
    .await;
    let loader = client_with_token(&secret);
    assert_eq!(tables_status(&app, &loader).await, 200);
    let browser = Browser::start().await;
    browser.sign_in(&app.base, ADMIN_TOKEN).await;
    browser.goto(&app.url("/console/tokens")).await;
    // Make one from the page: its secret is shown once, and it works.
    browser
        .css("input[name='name']")
        .await
        .send_keys("reader")
        .await
        .unwrap();
    browser.click("form.create button").await;
    let made = browser.text("#new-secret").await;
    assert!(made.starts_with("idem_"), "{made}");
    let reader = client_with_token(&made);
    assert_eq!(tables_status(&app, &reader).await, 200);
    browser.screenshot("tokens").await;
    browser
        .click(&format!("tr[data-token='{id}'] button"))
        .await;
    assert!(browser.text(".outcome").await.contains(&id));
    // The list shows live tokens only.
    let row = format!("tr[data-token='{id}']");
    assert!(browser.all(&row).await.is_empty());
    let r = loader.get(app.url("/tables")).send().await.unwrap();
    assert_eq!(r.status(), 401);
    assert_eq!(json_body(r).await["detail"], "the bearer token was revoked");
}

#[tokio::test]
async fn duplicates_of_a_key_are_shown_side_by_side_with_their_differences() {
    let app = spawn_app().await;
    let held = r#"{"columns": {"id": "bigint", "ds": "date", "qty": "integer", "note": "text"},
      "primary_key": ["id"], "duplicates": "hold"}"#;
    assert_eq!(app.declare("events", held).await.status(), 201);
    let rows = [
        json!({"id": 1, "ds": "2026-10-12", "qty": 1, "note": "same"}),
        json!({"id": 1, "ds": "2026-10-12", "qty": 2, "note": "same"}),
        json!({"id": 2, "ds": "2026-10-12", "qty": 5, "note": "alone"}),
    ];
    let r = app.put_ndjson("/partitions/events/2026-10-12", &rows).await;
    assert_eq!(r.status(), 200, "{}", r.text().await.unwrap());
    let browser = Browser::start().await;
    browser.sign_in(&app.base, ADMIN_TOKEN).await;
    browser
        .goto(&app.url("/console/duplicates?table=events"))
        .await;
    let keys = browser.all("section.key").await;
    assert_eq!(keys.len(), 1);
    let differing = browser.all("table.versions tr.differs th").await;
    assert_eq!(differing.len(), 1);
    assert!(differing[0].text().await.unwrap().starts_with("qty"));
    assert_eq!(browser.all("table.versions thead th").await.len(), 3);
    browser.screenshot("duplicates").await;
}

#[tokio::test]
async fn days_past_retention_are_drawn_apart_from_missing_ones() {
    let app = spawn_app().await;
    let declaration = |retention: &str| {
        format!(
            r#"{{"columns": {{"id": "bigint", "ds": "date", "qty": "integer"}},
                "primary_key": ["id"]{retention}}}"#
        )
    };
    assert_eq!(app.declare("events", &declaration("")).await.status(), 201);
    let day =
        |days: i64| (chrono::Utc::now().date_naive() + chrono::Duration::days(days)).to_string();
    // Today's day 3 before is missing; 12 days before is loaded, then
    // dropped by a retention of 7 days.
    for days in [-12, -5, -4, -2, -1, 0] {
        put_day(&app, "events", &day(days), 5).await;
    }
    let r = app
        .declare("events", &declaration(r#", "retention": "P7D""#))
        .await;
    assert_eq!(r.status(), 200);
    assert_eq!(app.expire_now().await.len(), 1);
    let browser = Browser::start().await;
    browser.sign_in(&app.base, ADMIN_TOKEN).await;
    let class = |ds: String| {
        let (browser, app) = (&browser, &app);
        async move {
            browser
                .goto(&app.url(&format!("/console/tables/events?at={ds}")))
                .await;
            let cell = browser.css(&format!("td[data-ds='{ds}']")).await;
            cell.attr("class").await.unwrap().unwrap_or_default()
        }
    };
    for gone in [day(-12), day(-9)] {
        let class = class(gone.clone()).await;
        assert!(
            class.contains("expired") && !class.contains("missing"),
            "{gone}: {class}"
        );
    }
    let missing = class(day(-3)).await;
    assert!(
        missing.contains("missing") && !missing.contains("expired"),
        "{missing}"
    );
    let kept = class(day(-5)).await;
    assert!(
        !kept.contains("expired") && !kept.contains("missing"),
        "{kept}"
    );
}
