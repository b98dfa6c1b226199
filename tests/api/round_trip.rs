//! What idem gives back, it takes back unchanged: a partition read in either
//! format and sent again answers `"changed": false` and leaves every value
//! as it was; values Postgres stores alike give the same content hash.

use serde_json::{json, Value};

use crate::helpers::*;
use crate::support::*;

const EVERY_TYPE: &str = r#"{"columns": {"id": "integer", "ds": "date", "txt": "text", "big": "bigint",
    "i": "integer", "f": "double precision", "n": "numeric", "b": "boolean", "d": "date",
    "t": "timestamptz", "j": "jsonb", "u": "uuid"}, "partition_by": "ds", "primary_key": ["id"]}"#;
const DAY: &str = "/partitions/every/2026-10-12";

fn tricky_rows() -> Vec<Value> {
    vec![
        json!({"id": 1, "txt": "", "big": -9_000_000_000_000_i64, "i": 2_147_483_647, "f": 0.1,
               "n": "1.50", "b": true, "d": "2026-10-12", "t": "2026-10-12T09:00:00+02:00",
               "j": "hello", "u": "A0EEBC99-9C0B-4EF8-BB6D-6BB9BD380A11"}),
        json!({"id": 2, "txt": null, "big": null, "i": null, "f": null, "n": null, "b": null,
               "d": null, "t": null, "j": null, "u": null}),
        json!({"id": 3, "txt": "comma, \"quote\"\nnewline\r\nand CRLF", "n": 1.5, "f": 1e300,
               "t": "2026-10-12 09:00Z", "j": {"b": [1, "x", null, 1.50], "a": {"z": "\"\""}},
               "b": false}),
        json!({"id": 4, "txt": "Grüße 東京 🚀", "n": "1e2", "t": "2026-10-11 23:30:00.123456-05:30",
               "j": [1, "two", 3.0, 1e2], "f": -0.5}),
        json!({"id": 5, "txt": " padded ", "n": "-0.00", "t": "2026-10-12 01:02+0100", "j": 42}),
        json!({"id": 6, "txt": "\"", "n": "NaN", "f": "Infinity", "j": ""}),
        json!({"id": 7, "txt": ",", "n": 0.000_001_5, "j": {}, "t": "1999-12-31 23:59:59.999999+14"}),
        json!({"id": 8, "txt": "\\N", "n": "123456789012345678901234567890.000100", "j": []}),
    ]
}

/// Every user column of the table as Postgres prints it, row by row: the
/// row's text tells NULL (nothing) from the empty string (`""`).
async fn stored(app: &TestApp) -> Vec<String> {
    sqlx::query_scalar(
        "select row(id, ds, txt, big, i, f, n, b, d, t, j, u)::text from idem_data.every order by id",
    )
    .fetch_all(&app.db)
    .await
    .unwrap()
}

async fn export(app: &TestApp, accept: &str) -> (String, String) {
    let r = app
        .client
        .get(app.url(DAY))
        .header("accept", accept)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let etag = r.headers()["etag"].to_str().unwrap().to_string();
    (etag, r.text().await.unwrap())
}

#[tokio::test]
async fn every_type_read_back_in_either_format_and_sent_again_changes_nothing() {
    let app = spawn_app().await;
    assert_eq!(app.declare("every", EVERY_TYPE).await.status(), 201);
    let r = app.put_ndjson(DAY, &tricky_rows()).await;
    assert_eq!(r.status(), 200, "{}", r.text().await.unwrap());
    let before = stored(&app).await;
    assert!(before[0].contains(r#",1.50,"#), "{}", before[0]);
    assert!(
        before[0].contains(r#""""hello""""#),
        "jsonb string: {}",
        before[0]
    );
    assert!(
        before[0].starts_with(r#"(1,2026-10-12,"","#),
        "{}",
        before[0]
    );
    assert!(before[1].starts_with("(2,2026-10-12,,"), "{}", before[1]);

    for (accept, content_type) in [
        ("application/x-ndjson", "application/x-ndjson"),
        ("application/json", "application/json"),
        ("text/csv", "text/csv"),
    ] {
        let (etag, body) = export(&app, accept).await;
        let again = json_body(app.put(DAY, content_type, body.clone()).await).await;
        assert_eq!(again["changed"], false, "{accept}: {again}\n{body}");
        assert_eq!(again["rejected"], 0, "{accept}: {again}");
        assert_eq!(stored(&app).await, before, "{accept}");
        assert_eq!(export(&app, accept).await.0, etag, "{accept}");
    }

    // The CSV export writes the empty string as `""` and NULL as nothing.
    let (_, csv) = export(&app, "text/csv").await;
    assert!(
        csv.lines().any(|l| l.starts_with("1,2026-10-12,\"\",")),
        "{csv}"
    );
    assert!(
        csv.lines().any(|l| l.starts_with("2,2026-10-12,,")),
        "{csv}"
    );
}

/// Each row as Postgres's `to_json` writes its values, a SQL-NULL jsonb
/// field left out, in the order the partition is stored (the order a read
/// of it answers in).
async fn rows_as_postgres_writes_them(app: &TestApp) -> Vec<String> {
    let columns = [
        "id", "ds", "txt", "big", "i", "f", "n", "b", "d", "t", "j", "u",
    ];
    let fields: Vec<String> = columns
        .iter()
        .map(|c| match *c {
            "j" => "coalesce(',\"j\":' || j::text, '')".to_string(),
            c => format!("',\"{c}\":' || coalesce(to_json({c})::text, 'null')"),
        })
        .collect();
    let sql = format!(
        "select '{{' || substr({}, 2) || '}}' from idem_data.every where ds = '2026-10-12' order by id",
        fields.join(" || ")
    );
    sqlx::query_scalar(&sql).fetch_all(&app.db).await.unwrap()
}

#[tokio::test]
async fn a_json_read_writes_each_row_as_postgres_writes_it() {
    let app = spawn_app().await;
    assert_eq!(app.declare("every", EVERY_TYPE).await.status(), 201);
    let mut rows = tricky_rows();
    rows.extend([
        json!({"id": 9, "d": "infinity", "t": "-infinity", "f": "-Infinity", "n": "-0.000123",
               "txt": "\u{1}\u{1f}\u{8}\u{c}\t\\", "big": 9_223_372_036_854_775_807_i64}),
        json!({"id": 10, "d": "-infinity", "t": "infinity", "f": "NaN", "n": "10000.0000",
               "i": -2_147_483_648_i64}),
        json!({"id": 11, "t": "2026-10-12T00:00:00.1Z", "f": 1.5e-7, "n": "0.00000001",
               "d": "0001-01-01", "u": "00000000-0000-0000-0000-000000000000"}),
    ]);
    let r = app.put_ndjson(DAY, &rows).await;
    assert_eq!(r.status(), 200, "{}", r.text().await.unwrap());
    let expected = rows_as_postgres_writes_them(&app).await;
    assert_eq!(expected.len(), rows.len());

    let (_, ndjson) = export(&app, "application/x-ndjson").await;
    assert_eq!(
        ndjson,
        expected
            .iter()
            .map(|r| format!("{r}\n"))
            .collect::<String>()
    );
    let (_, array) = export(&app, "application/json").await;
    assert_eq!(array, format!("[{}]\n", expected.join(",\n")));
}

async fn put_and_etag(app: &TestApp, content_type: &str, body: &str) -> (Value, String) {
    let answer = json_body(app.put(DAY, content_type, body.to_string()).await).await;
    assert_eq!(answer["rejected"], 0, "{answer}");
    let (etag, _) = export(app, "application/x-ndjson").await;
    (answer, etag)
}

#[tokio::test]
async fn values_postgres_stores_alike_give_the_same_etag() {
    let app = spawn_app().await;
    assert_eq!(app.declare("every", EVERY_TYPE).await.status(), 201);
    let (first, etag) = put_and_etag(
        &app,
        "application/x-ndjson",
        r#"{"id":1,"n":100,"t":"2026-10-12T09:00:00Z","j":{"a":1,"b":[100,"x"]}}"#,
    )
    .await;
    assert_eq!(first["changed"], true);
    for (content_type, body) in [
        (
            "application/x-ndjson",
            r#"{"id":1,"n":1e2,"t":"2026-10-12 11:00+02","j":{"b":[1e2,"x"],"a":1e0}}"#,
        ),
        (
            "application/json",
            r#"[{"j":{"b":[1.0E+2,"x"],"a":1},"t":"2026-10-12T04:00:00.000-0500","n":"1.0E+2","id":1}]"#,
        ),
        (
            "text/csv",
            "id,n,t,j\r\n1,1.0E+2,2026-10-12 09:00:00+00,\"{\"\"b\"\": [1e2, \"\"x\"\"], \"\"a\"\": 1}\"\r\n",
        ),
    ] {
        let (answer, same) = put_and_etag(&app, content_type, body).await;
        assert_eq!(answer["changed"], false, "{content_type} {body}: {answer}");
        assert_eq!(same, etag, "{content_type} {body}");
    }
    // 1.50 is displayed apart from 1.5: another value.
    let (answer, other) = put_and_etag(
        &app,
        "application/x-ndjson",
        r#"{"id":1,"n":"100.0","t":"2026-10-12T09:00:00Z","j":{"a":1,"b":[100,"x"]}}"#,
    )
    .await;
    assert_eq!(answer["changed"], true);
    assert_ne!(other, etag);
}

#[tokio::test]
async fn a_crlf_csv_with_bad_rows_names_their_physical_lines() {
    let app = spawn_app().await;
    app.declare_orders().await;
    let csv = "order_id,status,note\r\n\
               1,paid,\"two\r\nlines\"\r\n\
               x,paid,\r\n\
               \r\n\
               3,paid\r\n\
               4,paid,\"\"\r\n";
    let r = app
        .put("/partitions/orders/2026-10-12", "text/csv", csv)
        .await;
    assert_eq!(r.status(), 422);
    let body = json_body(r).await;
    let at: Vec<(u64, u64)> = body["errors"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| (e["line"].as_u64().unwrap(), e["record"].as_u64().unwrap()))
        .collect();
    assert_eq!(at, [(4, 2), (6, 3)], "{body}");
}

#[tokio::test]
async fn a_jsonb_value_in_a_json_body_is_the_json_value_itself() {
    let app = spawn_app().await;
    assert_eq!(app.declare("every", EVERY_TYPE).await.status(), 201);
    let body = r#"{"id": 1, "j": "hello"}
{"id": 2, "j": "\"hello\""}
{"id": 3, "j": 1.50}
{"id": 4, "j": {"k": [true]}}
{"id": 5, "j": null}
{"id": 6}
"#;
    let r = app.put(DAY, "application/x-ndjson", body).await;
    assert_eq!(r.status(), 200, "{}", r.text().await.unwrap());
    let stored: Vec<Option<String>> =
        sqlx::query_scalar("select j::text from idem_data.every order by id")
            .fetch_all(&app.db)
            .await
            .unwrap();
    assert_eq!(
        stored,
        [
            Some(r#""hello""#.to_string()),
            Some(r#""\"hello\"""#.to_string()),
            Some("1.50".to_string()),
            Some(r#"{"k": [true]}"#.to_string()),
            Some("null".to_string()),
            None
        ]
    );
}
