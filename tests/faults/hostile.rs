//! Hostile bodies, names and dates: each answered 4xx with nothing written,
//! the server's peak RSS under 200 MB at default settings.

use std::time::Duration;

use crate::scenario::*;
use crate::support::*;

const DAY: &str = "2026-10-12";
const RSS_LIMIT: u64 = 200 * 1000 * 1000;
const IDLE_TIMEOUT_SECS: u64 = 2;

const DOCS: &str =
    r#"{"columns": {"id": "bigint", "ds": "date", "doc": "jsonb"}, "partition_by": "ds"}"#;

/// What a case expects.
#[derive(Clone, Copy, Debug)]
enum Expect {
    /// A 4xx, and nothing written.
    Refused,
    /// This very status, and nothing written.
    Status(u16),
    /// A 4xx whose code is this one, and nothing written.
    Code(&'static str),
    /// Not a 5xx; what it does is reported.
    NoFailure,
    /// 200 with `"changed": false` (the same rows as a body sent before).
    Unchanged,
    /// A 2xx: the body is fine, however large its records.
    Accepted,
}

struct Case {
    name: String,
    method: &'static str,
    path: String,
    headers: Vec<(&'static str, String)>,
    body: RawBody,
    expect: Expect,
}

fn case(name: &str, method: &'static str, path: &str, content_type: &str, body: Vec<u8>) -> Case {
    let mut headers = vec![("content-type", content_type.to_string())];
    if method == "POST" {
        headers.push(("idempotency-key", format!("hostile-{}", fnv(name))));
    }
    Case {
        name: name.to_string(),
        method,
        path: path.to_string(),
        headers,
        body: RawBody::Whole(body),
        expect: Expect::Refused,
    }
}

impl Case {
    fn expect(mut self, expect: Expect) -> Case {
        self.expect = expect;
        self
    }

    fn gzipped(mut self) -> Case {
        self.headers.push(("content-encoding", "gzip".into()));
        self
    }
}

fn fnv(s: &str) -> u64 {
    s.bytes().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3)
    })
}

const NDJSON: &str = "application/x-ndjson";
const JSON: &str = "application/json";
const CSV: &str = "text/csv";

fn put_day(table: &str) -> String {
    format!("/partitions/{table}/{DAY}")
}

/// Percent-encodes everything but unreserved characters.
fn encode(s: &str) -> String {
    s.bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() || b"-_.~".contains(&b) {
                (b as char).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect()
}

/// A gzip body of `head` and then `unit` repeated to about 1 GiB unpacked,
/// in about 2 MB: gzip members of 1 MiB each, one compressed and sent a
/// thousand times (a gzip stream may hold several members, and idem reads
/// them all).
fn gzip_bomb(head: &str, unit: &str) -> Vec<u8> {
    let block = unit.repeat((1 << 20) / unit.len());
    let member = gzip_at(block.as_bytes(), flate2::Compression::best());
    let mut body = gzip_at(head.as_bytes(), flate2::Compression::best());
    for _ in 0..1_000 {
        body.extend_from_slice(&member);
    }
    body
}

/// Rows with 2,000 fields.
fn wide_ndjson() -> Vec<u8> {
    let fields: Vec<String> = (0..2_000).map(|i| format!("\"f{i}\":{i}")).collect();
    format!("{{{}}}\n", fields.join(",")).into_bytes()
}

fn wide_csv() -> Vec<u8> {
    let header: Vec<String> = (0..2_000).map(|i| format!("f{i}")).collect();
    let row: Vec<String> = (0..2_000).map(|i| i.to_string()).collect();
    format!("{}\n{}\n", header.join(","), row.join(",")).into_bytes()
}

fn cases() -> Vec<Case> {
    use Expect::*;
    let digits = "9".repeat(131_073);
    let fraction = format!("0.{}", "1".repeat(20_000));
    let nested = format!("{}{}", "[".repeat(100_000), "]".repeat(100_000));
    let hostile = "a\"; drop table x; --";
    let long_name = "a".repeat(10 * 1024);
    let orders = put_day("orders");
    let rows = |table: &str| format!("/rows?table={}", encode(table));
    let mut cases = vec![
        // Huge numerics: Postgres's numeric holds 131,072 digits before
        // the point and 16,383 after.
        case(
            "numeric of 131,073 digits (NDJSON number)",
            "PUT",
            &orders,
            NDJSON,
            format!("{{\"order_id\":1,\"amount\":{digits}}}\n").into_bytes(),
        ),
        case(
            "numeric of 131,073 digits (CSV)",
            "PUT",
            &orders,
            CSV,
            format!("order_id,amount\n1,{digits}\n").into_bytes(),
        ),
        case(
            "numeric of 131,073 digits (POST)",
            "POST",
            &rows("orders"),
            NDJSON,
            format!("{{\"order_id\":1,\"ds\":\"{DAY}\",\"amount\":\"{digits}\"}}\n").into_bytes(),
        ),
        case(
            "numeric with 20,000 digits after the point",
            "PUT",
            &orders,
            NDJSON,
            format!("{{\"order_id\":1,\"amount\":\"{fraction}\"}}\n").into_bytes(),
        ),
        // Deep nesting.
        case(
            "100k '[' as an NDJSON line",
            "PUT",
            &orders,
            NDJSON,
            format!("{nested}\n").into_bytes(),
        ),
        case(
            "100k '[' in a jsonb value (NDJSON)",
            "PUT",
            &put_day("docs"),
            NDJSON,
            format!("{{\"id\":1,\"doc\":{nested}}}\n").into_bytes(),
        ),
        case(
            "100k '[' as a JSON array element",
            "PUT",
            &orders,
            JSON,
            format!("[{nested}]").into_bytes(),
        ),
        case(
            "100k '[' in a jsonb value (JSON array)",
            "PUT",
            &put_day("docs"),
            JSON,
            format!("[{{\"id\":1,\"doc\":{nested}}}]").into_bytes(),
        ),
        case(
            "100k '[' in a jsonb value (CSV)",
            "PUT",
            &put_day("docs"),
            CSV,
            format!("id,doc\n1,{nested}\n").into_bytes(),
        ),
        case(
            "100k '[' into an undeclared table (inferred)",
            "PUT",
            &put_day("nested_new"),
            NDJSON,
            format!("{{\"id\":1,\"doc\":{nested}}}\n").into_bytes(),
        ),
        case(
            "100k '[' as the whole JSON body",
            "PUT",
            &orders,
            JSON,
            nested.clone().into_bytes(),
        ),
        // Invalid UTF-8.
        case(
            "invalid UTF-8 in an NDJSON string",
            "PUT",
            &orders,
            NDJSON,
            b"{\"order_id\":1,\"note\":\"a\xff\xfeb\"}\n".to_vec(),
        ),
        case(
            "invalid UTF-8 in a JSON array",
            "PUT",
            &orders,
            JSON,
            b"[{\"order_id\":1,\"note\":\"\xc3\x28\"}]".to_vec(),
        ),
        case(
            "invalid UTF-8 in a CSV field",
            "PUT",
            &orders,
            CSV,
            b"order_id,note\n1,a\xffb\n".to_vec(),
        ),
        case(
            "invalid UTF-8 in a CSV header",
            "PUT",
            &orders,
            CSV,
            b"order_id,n\xffote\n1,x\n".to_vec(),
        ),
        case(
            "invalid UTF-8 into an undeclared table",
            "POST",
            &rows("utf8_new"),
            NDJSON,
            [
                format!("{{\"ds\":\"{DAY}\",\"note\":\"a").as_bytes(),
                b"\xff\"}\n",
            ]
            .concat(),
        ),
        // Byte order marks: whatever idem does, not a 500.
        case(
            "UTF-8 BOM before NDJSON",
            "PUT",
            &put_day("orders").replace(DAY, "2026-10-14"),
            NDJSON,
            b"\xef\xbb\xbf{\"order_id\":1}\n".to_vec(),
        )
        .expect(NoFailure),
        case(
            "UTF-8 BOM before a JSON array",
            "PUT",
            &put_day("orders").replace(DAY, "2026-10-14"),
            JSON,
            b"\xef\xbb\xbf[{\"order_id\":1}]".to_vec(),
        )
        .expect(NoFailure),
        case(
            "UTF-8 BOM before CSV",
            "PUT",
            &put_day("orders").replace(DAY, "2026-10-14"),
            CSV,
            b"\xef\xbb\xbforder_id\n1\n".to_vec(),
        )
        .expect(NoFailure),
        // CRLF line endings: the same rows as with LF (sent first, in setup).
        case(
            "CRLF line endings (NDJSON)",
            "PUT",
            &put_day("orders").replace(DAY, "2026-10-13"),
            NDJSON,
            crlf_rows(false).replace('\n', "\r\n").into_bytes(),
        )
        .expect(Unchanged),
        case(
            "CRLF line endings (CSV)",
            "PUT",
            &put_day("orders").replace(DAY, "2026-10-13"),
            CSV,
            crlf_rows(true).replace('\n', "\r\n").into_bytes(),
        )
        .expect(Unchanged),
        // NUL bytes.
        case(
            "NUL as \\u0000 in a text value",
            "PUT",
            &orders,
            NDJSON,
            b"{\"order_id\":1,\"note\":\"a\\u0000b\"}\n".to_vec(),
        ),
        case(
            "NUL as a raw byte in a JSON string",
            "PUT",
            &orders,
            NDJSON,
            b"{\"order_id\":1,\"note\":\"a\x00b\"}\n".to_vec(),
        ),
        case(
            "NUL as a raw byte in a CSV field",
            "PUT",
            &orders,
            CSV,
            b"order_id,note\n1,a\x00b\n".to_vec(),
        ),
        case(
            "NUL in a CSV header",
            "PUT",
            &orders,
            CSV,
            b"order_id,no\x00te\n1,x\n".to_vec(),
        ),
        case(
            "NUL as \\u0000 in a jsonb value",
            "PUT",
            &put_day("docs"),
            NDJSON,
            b"{\"id\":1,\"doc\":{\"k\":\"\\u0000\"}}\n".to_vec(),
        ),
        case(
            "NUL as \\u0000 in a jsonb key",
            "PUT",
            &put_day("docs"),
            NDJSON,
            b"{\"id\":1,\"doc\":{\"\\u0000\":1}}\n".to_vec(),
        ),
        // Hostile names, in paths, queries, declarations and bodies.
        case(
            "table pg_catalog (PUT)",
            "PUT",
            &put_day("pg_catalog"),
            NDJSON,
            b"{\"a\":1}\n".to_vec(),
        )
        .expect(Code("invalid_name")),
        case(
            "table pg_catalog (POST)",
            "POST",
            &rows("pg_catalog"),
            NDJSON,
            format!("{{\"a\":1,\"ds\":\"{DAY}\"}}\n").into_bytes(),
        )
        .expect(Code("invalid_name")),
        case(
            "table pg_catalog (declared)",
            "PUT",
            "/tables/pg_catalog",
            JSON,
            br#"{"columns":{"a":"text"}}"#.to_vec(),
        )
        .expect(Code("invalid_name")),
        case(
            "table a\"; drop table x; -- (PUT)",
            "PUT",
            &put_day(&encode(hostile)),
            NDJSON,
            b"{\"a\":1}\n".to_vec(),
        )
        .expect(Code("invalid_name")),
        case(
            "table a\"; drop table x; -- (POST)",
            "POST",
            &rows(hostile),
            NDJSON,
            format!("{{\"a\":1,\"ds\":\"{DAY}\"}}\n").into_bytes(),
        )
        .expect(Code("invalid_name")),
        case(
            "table a\"; drop table x; -- (declared)",
            "PUT",
            &format!("/tables/{}", encode(hostile)),
            JSON,
            br#"{"columns":{"a":"text"}}"#.to_vec(),
        )
        .expect(Code("invalid_name")),
        case(
            "10 KB table name (PUT)",
            "PUT",
            &put_day(&long_name),
            NDJSON,
            b"{\"a\":1}\n".to_vec(),
        )
        .expect(Code("invalid_name")),
        case(
            "10 KB table name (POST)",
            "POST",
            &rows(&long_name),
            NDJSON,
            format!("{{\"a\":1,\"ds\":\"{DAY}\"}}\n").into_bytes(),
        )
        .expect(Code("invalid_name")),
        case(
            "column a\"; drop table x; -- (declared)",
            "PUT",
            "/tables/hostile_columns",
            JSON,
            format!(
                "{{\"columns\":{{{}:\"text\"}}}}",
                serde_json::to_string(hostile).unwrap()
            )
            .into_bytes(),
        )
        .expect(Code("invalid_name")),
        case(
            "10 KB column name (declared)",
            "PUT",
            "/tables/hostile_columns",
            JSON,
            format!("{{\"columns\":{{\"{long_name}\":\"text\"}}}}").into_bytes(),
        )
        .expect(Code("invalid_name")),
        case(
            "column a\"; drop table x; -- in a row (declared table)",
            "PUT",
            &orders,
            NDJSON,
            format!(
                "{{\"order_id\":1,{}:1}}\n",
                serde_json::to_string(hostile).unwrap()
            )
            .into_bytes(),
        ),
        case(
            "column a\"; drop table x; -- in a row (undeclared table)",
            "PUT",
            &put_day("names_new"),
            NDJSON,
            format!(
                "{{\"id\":1,{}:1}}\n",
                serde_json::to_string(hostile).unwrap()
            )
            .into_bytes(),
        ),
        case(
            "10 KB column name in a row (undeclared table)",
            "POST",
            &rows("names_new"),
            NDJSON,
            format!("{{\"ds\":\"{DAY}\",\"{long_name}\":1}}\n").into_bytes(),
        ),
        case(
            "column a\"; drop table x; -- in a CSV header",
            "PUT",
            &orders,
            CSV,
            format!("order_id,\"{}\"\n1,x\n", hostile.replace('"', "\"\"")).into_bytes(),
        ),
        case(
            "system column _load_id in a row",
            "PUT",
            &orders,
            NDJSON,
            b"{\"order_id\":1,\"_load_id\":\"00000000-0000-0000-0000-000000000000\"}\n".to_vec(),
        ),
        // Hostile dates, in the path and in rows.
        case(
            "day 0000-01-01",
            "PUT",
            &put_day("orders").replace(DAY, "0000-01-01"),
            NDJSON,
            b"{\"order_id\":1}\n".to_vec(),
        )
        .expect(Code("invalid_ds")),
        case(
            "day 2026-02-30",
            "PUT",
            &put_day("orders").replace(DAY, "2026-02-30"),
            NDJSON,
            b"{\"order_id\":1}\n".to_vec(),
        )
        .expect(Code("invalid_ds")),
        case(
            "day 99999-01-01",
            "PUT",
            &put_day("orders").replace(DAY, "99999-01-01"),
            NDJSON,
            b"{\"order_id\":1}\n".to_vec(),
        )
        .expect(Code("invalid_ds")),
        case(
            "row ds 0000-01-01 (POST)",
            "POST",
            &rows("orders"),
            NDJSON,
            b"{\"order_id\":1,\"ds\":\"0000-01-01\"}\n".to_vec(),
        ),
        case(
            "row ds 2026-02-30 (POST)",
            "POST",
            &rows("orders"),
            NDJSON,
            b"{\"order_id\":1,\"ds\":\"2026-02-30\"}\n".to_vec(),
        ),
        case(
            "row ds 99999-01-01 (POST)",
            "POST",
            &rows("orders"),
            NDJSON,
            b"{\"order_id\":1,\"ds\":\"99999-01-01\"}\n".to_vec(),
        ),
        case(
            "row ds 0000-01-01 (undeclared table)",
            "POST",
            &rows("dates_new"),
            NDJSON,
            b"{\"id\":1,\"ds\":\"0000-01-01\"}\n".to_vec(),
        ),
        case(
            "row ds 99999-01-01 (CSV)",
            "POST",
            &rows("orders"),
            CSV,
            b"order_id,ds\n1,99999-01-01\n".to_vec(),
        ),
        // Gzip bombs, one per format.
        case(
            "gzip bomb, NDJSON (1 GiB in 2 MB)",
            "PUT",
            &orders,
            NDJSON,
            gzip_bomb("", "{\"order_id\":1}\n"),
        )
        .gzipped()
        .expect(Status(413)),
        case(
            "gzip bomb, JSON array",
            "PUT",
            &orders,
            JSON,
            gzip_bomb("[", "{\"order_id\":1},"),
        )
        .gzipped()
        .expect(Status(413)),
        case(
            "gzip bomb, CSV",
            "PUT",
            &orders,
            CSV,
            gzip_bomb("order_id,note\n", "1,x\n"),
        )
        .gzipped()
        .expect(Status(413)),
        case(
            "gzip bomb, NDJSON (POST)",
            "POST",
            &rows("orders"),
            NDJSON,
            gzip_bomb("", &format!("{{\"order_id\":1,\"ds\":\"{DAY}\"}}\n")),
        )
        .gzipped()
        .expect(Status(413)),
        // 2,000 fields.
        case(
            "2,000-field row, declared table (NDJSON)",
            "PUT",
            &orders,
            NDJSON,
            wide_ndjson(),
        ),
        case(
            "2,000-field row, declared table (CSV)",
            "PUT",
            &orders,
            CSV,
            wide_csv(),
        ),
        case(
            "2,000-field row, undeclared table (NDJSON)",
            "PUT",
            &put_day("wide_new"),
            NDJSON,
            wide_ndjson(),
        ),
        case(
            "2,000-field row, undeclared table (CSV)",
            "PUT",
            &put_day("wide_csv_new"),
            CSV,
            wide_csv(),
        ),
    ];
    // A slow body: a few bytes, then nothing.
    for (method, path) in [("PUT", orders.clone()), ("POST", rows("orders"))] {
        let mut c = case(
            &format!("slow body ({method}): 10 bytes, then nothing"),
            method,
            &path,
            NDJSON,
            vec![],
        );
        c.body = RawBody::Stall {
            sent: b"{\"order_id".to_vec(),
            declared: 1_000,
        };
        cases.push(c.expect(Status(408)));
    }
    cases
}

/// The rows the CRLF cases send again, with LF.
fn crlf_rows(csv: bool) -> String {
    if csv {
        "order_id,status,note\n1,paid,a\n2,paid,\"two, lines\"\n".to_string()
    } else {
        "{\"order_id\":1,\"status\":\"paid\",\"note\":\"a\"}\n{\"order_id\":2,\"status\":\"paid\",\"note\":\"two, lines\"}\n".to_string()
    }
}

/// What is written, as far as a refused request could have touched it.
async fn written(db: &sqlx::PgPool) -> Vec<i64> {
    let row: (i64, i64, i64, i64, i64, i64) = sqlx::query_as(
        "select (select count(*) from idem.loads where status in ('published', 'unchanged')),
                (select count(*) from idem.partitions),
                (select coalesce(sum(row_count), 0)::bigint from idem.partitions),
                (select count(*) from idem.tables),
                (select count(*) from pg_tables where schemaname in ('idem_data', 'idem_parts', 'idem_staging')),
                (select count(*) from idem.idempotency_keys)",
    )
    .fetch_one(db)
    .await
    .expect("look at what is written");
    vec![row.0, row.1, row.2, row.3, row.4, row.5]
}

const WRITTEN: [&str; 6] = [
    "completed loads",
    "partitions",
    "rows",
    "tables",
    "Postgres tables",
    "idempotency keys",
];

/// Runs `cases` against a fresh idem; returns the failures (each one line).
async fn run_cases(scenario: &str, cases: Vec<Case>) -> Vec<String> {
    let pg = Postgres::start().await;
    let db = db(&pg.url).await;
    let client = client();
    let idle = IDLE_TIMEOUT_SECS.to_string();
    let idem = Idem::start(
        &pg.url,
        &scenario.replace(' ', "-"),
        &[("IDEM_BODY_IDLE_TIMEOUT_SECS", idle.as_str())],
    )
    .await;
    declare(&client, &idem, "orders", ORDERS).await;
    declare(&client, &idem, "docs", DOCS).await;
    for (ds, csv, content_type) in [("2026-10-13", false, NDJSON)] {
        let r = client
            .put(idem.url(&format!("/partitions/orders/{ds}")))
            .header("content-type", content_type)
            .body(crlf_rows(csv))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200, "setup: {}", r.text().await.unwrap());
    }
    let started_rss = idem.peak_rss();
    report!("{scenario}: idem started, peak RSS {}", mb(started_rss));

    let mut failures = Vec::new();
    let mut peak = started_rss;
    for c in cases {
        let before = written(&db).await;
        let headers: Vec<(&str, &str)> = c.headers.iter().map(|(k, v)| (*k, v.as_str())).collect();
        let sent = match &c.body {
            RawBody::Whole(b) => mb(b.len() as u64),
            RawBody::Stall { sent, .. } => format!("{} bytes", sent.len()),
        };
        let answer = raw_request(
            &idem.addr,
            c.method,
            &c.path,
            &headers,
            c.body,
            CLIENT_DEADLINE,
        )
        .await;
        let rss = idem.peak_rss();
        let peak_before = peak;
        peak = peak.max(rss);
        let after = written(&db).await;
        let mut problems: Vec<String> = Vec::new();
        if let Ok(a) = &answer {
            let problem = a.header("content-type") == Some("application/problem+json");
            if (400..600).contains(&a.status) && !problem {
                problems.push(format!(
                    "a refusal as {:?}, not problem+json",
                    a.header("content-type")
                ));
            }
        }
        let (status, code, detail, elapsed) = match &answer {
            Ok(a) => (
                a.status,
                a.code(),
                a.body.chars().take(300).collect::<String>(),
                a.elapsed,
            ),
            Err(e) => {
                problems.push(format!("no answer: {e}"));
                (0, String::new(), String::new(), Duration::ZERO)
            }
        };
        let refused = matches!(
            c.expect,
            Expect::Refused | Expect::Status(_) | Expect::Code(_)
        );
        match c.expect {
            _ if status >= 500 => problems.push(format!("answered {status}")),
            Expect::Refused if !(400..500).contains(&status) => {
                problems.push(format!("expected a 4xx, got {status}"))
            }
            Expect::Status(s) if status != s => {
                problems.push(format!("expected {s}, got {status}"))
            }
            Expect::Code(code_expected) if code != code_expected => {
                problems.push(format!("expected {code_expected}, got {status} {code}"))
            }
            Expect::Accepted if !(200..300).contains(&status) => {
                problems.push(format!("expected a 2xx, got {status}"))
            }
            Expect::Unchanged if status != 200 || !detail.contains("\"changed\":false") => {
                problems.push(format!("expected 200 unchanged, got {status}"))
            }
            _ => {}
        }
        if refused && status != 0 && before != after {
            let changed: Vec<String> = WRITTEN
                .iter()
                .zip(before.iter().zip(&after))
                .filter(|(_, (b, a))| b != a)
                .map(|(what, (b, a))| format!("{what} {b} -> {a}"))
                .collect();
            problems.push(format!("something was written: {}", changed.join(", ")));
        }
        if let Expect::Status(408) = c.expect {
            let idle = Duration::from_secs(IDLE_TIMEOUT_SECS);
            if status == 408 && !(elapsed >= idle && elapsed < idle * 5) {
                problems.push(format!("408 after {elapsed:?}, not about {idle:?}"));
            }
        }
        if rss >= RSS_LIMIT && peak_before < RSS_LIMIT {
            problems.push(format!("peak RSS {} is over 200 MB", mb(rss)));
        }
        let verdict = if problems.is_empty() { "ok" } else { "FAIL" };
        report!(
            "{scenario}: {verdict:4} {} ({sent}): {status} {code} in {elapsed:.1?}, peak RSS so far {}{}",
            c.name,
            mb(peak),
            if problems.is_empty() { String::new() } else { format!(" -- {}; answer: {detail}", problems.join("; ")) }
        );
        if matches!(c.expect, Expect::NoFailure) && problems.is_empty() {
            report!("{scenario}:      what it does: {detail}");
        }
        if !problems.is_empty() {
            failures.push(format!(
                "{}: {}; answer: {status} {detail}",
                c.name,
                problems.join("; ")
            ));
        }
    }
    for cause in idem.failures_logged() {
        report!("{scenario}: logged cause of a 5xx: {cause}");
    }
    assert_eq!(readyz(&client, &idem).await, 200, "{scenario}: still ready");
    report!(
        "{scenario}: peak RSS {} over all cases (limit 200 MB); {} failure(s)",
        mb(peak),
        failures.len()
    );
    drop(idem);
    failures
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_bodies_names_and_dates_are_refused_in_bounded_memory() {
    let failures = run_cases("hostile bodies", cases()).await;
    assert!(
        failures.is_empty(),
        "hostile bodies:\n{}",
        failures.join("\n")
    );
}

/// A record larger than `IDEM_MAX_RECORD_BYTES` (4 MiB by default) is a bad
/// row, read in no more memory than the limit.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn records_are_bad_rows_over_the_record_limit_and_good_under_it() {
    let big = "x".repeat(20 << 20);
    let orders = put_day("orders");
    let cases = vec![
        case(
            "20 MB NDJSON line",
            "PUT",
            &orders,
            NDJSON,
            format!("{{\"order_id\":1,\"note\":\"{big}\"}}\n").into_bytes(),
        )
        .expect(Expect::Code("bad_rows")),
        case(
            "20 MB NDJSON line (POST)",
            "POST",
            "/rows?table=orders",
            NDJSON,
            format!("{{\"order_id\":1,\"ds\":\"{DAY}\",\"note\":\"{big}\"}}\n").into_bytes(),
        )
        .expect(Expect::Code("bad_rows")),
        case(
            "20 MB JSON array element",
            "PUT",
            &orders,
            JSON,
            format!("[{{\"order_id\":1,\"note\":\"{big}\"}}]").into_bytes(),
        )
        .expect(Expect::Code("bad_rows")),
        case(
            "20 MB CSV field",
            "PUT",
            &orders,
            CSV,
            format!("order_id,note\n1,{big}\n").into_bytes(),
        )
        // A CSV record's end cannot be found without reading it whole: the
        // body ends there, with the line the record starts on.
        .expect(Expect::Code("record_too_large")),
        case(
            "20 MB NDJSON line without a newline, to an undeclared table",
            "PUT",
            &put_day("big_new"),
            NDJSON,
            format!("{{\"id\":1,\"note\":\"{big}\"}}").into_bytes(),
        )
        .expect(Expect::Code("bad_rows")),
        // Under the limit: a good row, also as the first record of a table
        // whose types are inferred from the body.
        case(
            "2 MB first record (under the limit) to an undeclared table",
            "PUT",
            &put_day("two_mb_new"),
            NDJSON,
            format!(
                "{{\"id\":1,\"note\":\"{}\"}}\n{{\"id\":2,\"note\":\"y\"}}\n",
                &big[..2 << 20]
            )
            .into_bytes(),
        )
        .expect(Expect::Accepted),
    ];
    drop(big);
    let failures = run_cases("record limit", cases).await;
    assert!(
        failures.is_empty(),
        "records over the limit:\n{}",
        failures.join("\n")
    );
}

/// A CSV header of `names` names, and one row of as many values.
fn header_of(names: usize) -> Vec<u8> {
    let header: Vec<String> = (0..names).map(|i| format!("c{i}")).collect();
    let row = vec!["1"; names];
    format!("{}\n{}\n", header.join(","), row.join(",")).into_bytes()
}

/// A header of 100,000 names (889 KB) to a table nobody declared is
/// refused as too wide for the CPU a declared table's refusal of it costs:
/// the names are counted once each, and the count stops where a table's
/// width ends (a check over every pair of names took 22 s of CPU here).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_header_far_wider_than_a_table_is_refused_in_time_linear_in_its_names() {
    const CPU_LIMIT: Duration = Duration::from_secs(3);
    let pg = Postgres::start().await;
    let db = db(&pg.url).await;
    let client = client();
    let idem = Idem::start(&pg.url, "wide-header", &[]).await;
    declare(&client, &idem, "orders", ORDERS).await;
    let before = written(&db).await;
    let mut spent = Vec::new();
    for (table, names, code) in [
        ("orders", 100_000, "malformed_body"),
        ("wide_header_new", 12_500, "table_too_wide"),
        ("wide_header_new", 100_000, "table_too_wide"),
    ] {
        let body = header_of(names);
        let size = mb(body.len() as u64);
        let cpu = idem.cpu_time();
        let headers = [("content-type", CSV)];
        let path = put_day(table);
        let answer = raw_request(
            &idem.addr,
            "PUT",
            &path,
            &headers,
            RawBody::Whole(body),
            CLIENT_DEADLINE,
        )
        .await
        .expect("an answer");
        let cpu = idem.cpu_time() - cpu;
        report!(
            "wide header: {names} names ({size}) to {table}: {} {} for {cpu:?} of CPU",
            answer.status,
            answer.code()
        );
        assert_eq!(answer.code(), code, "{table}: {}", answer.body);
        spent.push(cpu);
    }
    assert_eq!(written(&db).await, before, "nothing was written");
    assert!(
        spent[2] < CPU_LIMIT,
        "100,000 names to an undeclared table took {:?} of CPU (limit {CPU_LIMIT:?})",
        spent[2]
    );
}

/// `stream` (an Arrow IPC stream with compressed buffers) with its first
/// record batch's first compressed buffer stating `unpacked` bytes.
fn stating_unpacked(mut stream: Vec<u8>, unpacked: i64) -> Vec<u8> {
    let mut at = 0;
    loop {
        assert_eq!(stream[at..at + 4], [0xFF; 4], "a message at {at}");
        let length = i32::from_le_bytes(stream[at + 4..at + 8].try_into().unwrap());
        let metadata_end = at + 8 + usize::try_from(length).unwrap();
        let message = arrow_ipc::root_as_message(&stream[at + 8..metadata_end]).unwrap();
        let body_length = usize::try_from(message.bodyLength()).unwrap();
        if let Some(batch) = message.header_as_record_batch() {
            let buffer = batch
                .buffers()
                .unwrap()
                .iter()
                .find(|b| b.length() >= 8)
                .expect("a compressed buffer");
            let prefix = metadata_end + usize::try_from(buffer.offset()).unwrap();
            stream[prefix..prefix + 8].copy_from_slice(&unpacked.to_le_bytes());
            return stream;
        }
        at = metadata_end + body_length;
    }
}

/// Compressed Arrow streams whose buffers state more than a batch may
/// hold once unpacked (a petabyte, or one byte past `i64`'s half): refused
/// as too large before anything is unpacked, the server's memory as it was.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn compressed_arrow_batches_that_state_huge_sizes_are_refused_before_unpacking() {
    let mut cases = Vec::new();
    for codec in ["zstd", "lz4"] {
        let stream = written_by_pyarrow(&format!(
            "t = pa.table({{'order_id': pa.array(range(1, 1001), pa.int64()), \
               'ds': pa.array([datetime.date(2026, 10, 12)] * 1000)}})\n\
             options = ipc.IpcWriteOptions(compression={codec:?})\n\
             with ipc.new_stream(out, t.schema, options=options) as w:\n    w.write_table(t)"
        ));
        for (what, unpacked) in [("1 PB", 1_i64 << 50), ("2^62 bytes", 1 << 62)] {
            cases.push(
                case(
                    &format!("{codec} Arrow batch stating {what} unpacked"),
                    "PUT",
                    &put_day("orders"),
                    "application/vnd.apache.arrow.stream",
                    stating_unpacked(stream.clone(), unpacked),
                )
                .expect(Expect::Code("record_too_large")),
            );
        }
    }
    let failures = run_cases("arrow bombs", cases).await;
    assert!(failures.is_empty(), "arrow bombs:\n{}", failures.join("\n"));
}
