//! Values idem would otherwise change without a word: a double that
//! underflows, a jsonb `null` taken for SQL NULL, a timestamp before year 1,
//! and `±infinity` in date and timestamp columns. Each is refused as
//! Postgres refuses it, or stored as sent and given back so that a `PUT` of
//! the export changes nothing.

use serde_json::{json, Value};

use crate::helpers::*;
use crate::support::*;

/// `j` stands before `note`, so a row's jsonb value is not its last one.
const VALUES: &str = r#"{"columns": {"id": "bigint", "ds": "date", "f": "double precision",
    "j": "jsonb", "d": "date", "t": "timestamptz", "note": "text"},
    "partition_by": "ds", "primary_key": ["id"]}"#;
const DAY: &str = "/partitions/vals/2026-10-12";

async fn declared() -> TestApp {
    let app = spawn_app().await;
    let r = app.declare("vals", VALUES).await;
    assert_eq!(r.status(), 201, "{}", r.text().await.unwrap());
    app
}

/// Each row as Postgres prints it, with whether `j` is SQL NULL: the text
/// of a jsonb `null` and of SQL NULL differ only there.
async fn stored(app: &TestApp) -> Vec<String> {
    sqlx::query_scalar(
        "select row(id, f, j, j is null, d, t, note)::text from idem_data.vals order by id",
    )
    .fetch_all(&app.db)
    .await
    .unwrap()
}

async fn export(app: &TestApp, accept: &str) -> String {
    let r = app
        .client
        .get(app.url(DAY))
        .header("accept", accept)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    r.text().await.unwrap()
}

/// Every export format sent back answers `changed: false` and leaves the
/// stored rows as they were.
async fn assert_every_export_round_trips(app: &TestApp) {
    let before = stored(app).await;
    for (accept, content_type) in [
        ("application/x-ndjson", "application/x-ndjson"),
        ("application/json", "application/json"),
        ("text/csv", "text/csv"),
    ] {
        let body = export(app, accept).await;
        let again = json_body(app.put(DAY, content_type, body.clone()).await).await;
        assert_eq!(again["changed"], false, "{accept}: {again}\n{body}");
        assert_eq!(again["rejected"], 0, "{accept}: {again}");
        assert_eq!(stored(app).await, before, "{accept}\n{body}");
    }
}

async fn refused_column(r: reqwest::Response) -> (Value, String) {
    assert_eq!(r.status(), 422);
    let problem = json_body(r).await;
    assert_eq!(problem["code"], "bad_rows", "{problem}");
    let error = problem["errors"][0].clone();
    let message = error["message"].as_str().unwrap().to_string();
    (error, message)
}

#[tokio::test]
async fn a_double_that_underflows_to_zero_is_a_bad_row_in_every_body() {
    let app = declared().await;
    let ndjson_number = "{\"id\":1,\"note\":\"ok\"}\n{\"id\":2,\"f\":1e-400}\n";
    let ndjson_string = "{\"id\":1,\"note\":\"ok\"}\n{\"id\":2,\"f\":\"4.9e-325\"}\n";
    let json_array = r#"[{"id":1},{"id":2,"f":-1e-400}]"#;
    let csv = "id,f\n1,1\n2,1e-400\n";
    for (content_type, body) in [
        ("application/x-ndjson", ndjson_number),
        ("application/x-ndjson", ndjson_string),
        ("application/json", json_array),
        ("text/csv", csv),
    ] {
        let (error, message) = refused_column(app.put(DAY, content_type, body).await).await;
        assert_eq!(error["column"], "f", "{body}");
        assert_eq!(error["record"], 2, "{body}");
        assert!(
            message.contains("out of range for double precision"),
            "{body}: {message}"
        );
    }
    let r = app
        .client
        .post(app.url("/rows?table=vals"))
        .header("content-type", "application/x-ndjson")
        .header("idempotency-key", "underflow")
        .body("{\"id\":3,\"ds\":\"2026-10-12\",\"f\":1e-400}\n")
        .send()
        .await
        .unwrap();
    let (error, _) = refused_column(r).await;
    assert_eq!(error["line"], 1);
    assert_eq!(
        sqlx::query_scalar::<_, i64>("select count(*) from idem_data.vals")
            .fetch_one(&app.db)
            .await
            .unwrap(),
        0
    );

    // What Postgres keeps, idem keeps: the smallest subnormal, and zeros
    // written with any exponent.
    let body = "{\"id\":1,\"f\":5e-324}\n{\"id\":2,\"f\":\"2.2e-308\"}\n{\"id\":3,\"f\":0e-400}\n";
    let r = app.put(DAY, "application/x-ndjson", body).await;
    assert_eq!(r.status(), 200, "{}", r.text().await.unwrap());
    let floats: Vec<String> = sqlx::query_scalar("select f::text from idem_data.vals order by id")
        .fetch_all(&app.db)
        .await
        .unwrap();
    assert_eq!(floats, ["5e-324", "2.2e-308", "0"]);
    assert_every_export_round_trips(&app).await;
}

#[tokio::test]
async fn sql_null_and_jsonb_null_are_stored_apart_and_round_trip_in_every_format() {
    let app = declared().await;
    let body = "{\"id\":1,\"j\":null,\"note\":\"json null\"}\n\
                {\"id\":2,\"note\":\"sql null\"}\n\
                {\"id\":3,\"j\":[null],\"note\":\"array\"}\n\
                {\"id\":4,\"j\":\"null\",\"note\":\"string\"}\n";
    let r = app.put(DAY, "application/x-ndjson", body).await;
    assert_eq!(r.status(), 200, "{}", r.text().await.unwrap());
    let jsonb: Vec<Option<String>> =
        sqlx::query_scalar("select j::text from idem_data.vals order by id")
            .fetch_all(&app.db)
            .await
            .unwrap();
    assert_eq!(
        jsonb,
        [
            Some("null".to_string()),
            None,
            Some("[null]".to_string()),
            Some("\"null\"".to_string())
        ]
    );

    // NDJSON and JSON leave a SQL-NULL jsonb out; other columns stay `null`.
    let rows: Vec<Value> = serde_json::from_str(&export(&app, "application/json").await).unwrap();
    let by_id = |id: i64| rows.iter().find(|r| r["id"] == id).unwrap().clone();
    assert_eq!(by_id(1)["j"], Value::Null);
    assert!(by_id(1).as_object().unwrap().contains_key("j"));
    assert!(!by_id(2).as_object().unwrap().contains_key("j"), "{rows:?}");
    assert!(by_id(2).as_object().unwrap().contains_key("f"), "{rows:?}");
    assert_eq!(by_id(2)["f"], Value::Null);
    // CSV writes SQL NULL as nothing and a jsonb null as `null`.
    let csv = export(&app, "text/csv").await;
    assert!(csv.contains("1,2026-10-12,,null,,,json null"), "{csv}");
    assert!(csv.contains("2,2026-10-12,,,,,sql null"), "{csv}");
    assert_every_export_round_trips(&app).await;
}

#[tokio::test]
async fn a_put_that_turns_a_jsonb_null_into_sql_null_or_back_changes_the_partition() {
    let app = declared().await;
    let json_null = "{\"id\":1,\"j\":null,\"note\":\"x\"}\n";
    let sql_null = "{\"id\":1,\"note\":\"x\"}\n";
    let (ndjson, csv) = ("application/x-ndjson", "text/csv");
    // (format, body, whether j is then SQL NULL, whether the PUT changed it)
    let steps = [
        (ndjson, json_null, false, true),
        (ndjson, sql_null, true, true),
        (ndjson, json_null, false, true),
        (csv, "id,j,note\n1,null,x\n", false, false),
        (csv, "id,j,note\n1,,x\n", true, true),
        (ndjson, sql_null, true, false),
        (csv, "id,j,note\n1,null,x\n", false, true),
    ];
    for (content_type, body, is_sql_null, changed) in steps {
        let answer = json_body(app.put(DAY, content_type, body).await).await;
        assert_eq!(answer["changed"], changed, "{body}: {answer}");
        let null: Vec<bool> = sqlx::query_scalar("select j is null from idem_data.vals")
            .fetch_all(&app.db)
            .await
            .unwrap();
        assert_eq!(null, [is_sql_null], "{body}: {answer}");
    }
}

#[tokio::test]
async fn a_merge_that_turns_a_jsonb_null_into_sql_null_or_back_counts_it_updated() {
    let app = declared().await;
    let json_null = json!({"id": 1, "ds": "2026-10-12", "j": null, "note": "x"});
    let sql_null = json!({"id": 1, "ds": "2026-10-12", "note": "x"});
    let steps = [
        ("one", &json_null, "inserted"),
        ("two", &sql_null, "updated"),
        ("three", &sql_null, "unchanged"),
        ("four", &json_null, "updated"),
    ];
    for (key, row, counted) in steps {
        let r = app
            .post_rows(
                "table=vals&mode=merge",
                Some(key),
                std::slice::from_ref(row),
            )
            .await;
        assert_eq!(r.status(), 200);
        let receipt = json_body(r).await;
        assert_eq!(receipt[counted], 1, "{key}: {receipt}");
    }
    let is_null: bool = sqlx::query_scalar("select j is null from idem_data.vals")
        .fetch_one(&app.db)
        .await
        .unwrap();
    assert!(!is_null);
}

#[tokio::test]
async fn the_duplicates_log_leaves_a_sql_null_jsonb_out_of_the_row() {
    let app = spawn_app().await;
    let declaration = VALUES.replace(
        r#""primary_key": ["id"]}"#,
        r#""primary_key": ["id"], "duplicates": "hold"}"#,
    );
    assert_eq!(app.declare("vals", &declaration).await.status(), 201);
    let body = "{\"id\":1,\"j\":null}\n{\"id\":1,\"note\":\"x\"}\n";
    let r = app.put(DAY, "application/x-ndjson", body).await;
    assert_eq!(r.status(), 200, "{}", r.text().await.unwrap());
    let logged = all_pages(&app, "/duplicates?table=vals&limit=100", 100).await;
    let rows: Vec<&Value> = logged.iter().map(|v| &v["row"]).collect();
    assert_eq!(rows.len(), 2, "{logged:?}");
    let json_null = rows.iter().find(|r| r["note"].is_null()).unwrap();
    let sql_null = rows.iter().find(|r| r["note"] == "x").unwrap();
    assert!(
        json_null.as_object().unwrap().contains_key("j"),
        "{json_null}"
    );
    assert!(
        !sql_null.as_object().unwrap().contains_key("j"),
        "{sql_null}"
    );
}

#[tokio::test]
async fn a_timestamp_before_year_1_is_a_bad_row_like_a_date() {
    let app = declared().await;
    for (n, t) in [
        "0000-12-31T00:00:00Z",
        "0001-01-01T00:00:00+01:00",
        "-0001-06-01 00:00:00Z",
    ]
    .into_iter()
    .enumerate()
    {
        let body = format!("{{\"id\":1}}\n{{\"id\":2,\"t\":{t:?}}}\n");
        let (error, message) =
            refused_column(app.put(DAY, "application/x-ndjson", body).await).await;
        assert_eq!(error["column"], "t", "{n}: {t}");
        assert_eq!(error["line"], 2, "{t}");
        assert!(message.contains("before 0001-01-01"), "{t}: {message}");
    }
    // The first instant of year 1 is held, and given back as PUT takes it.
    let r = app
        .put(
            DAY,
            "text/csv",
            "id,t\n1,0001-01-01T00:00:00Z\n2,0001-01-01 01:00:00+01\n",
        )
        .await;
    assert_eq!(r.status(), 200, "{}", r.text().await.unwrap());
    assert_every_export_round_trips(&app).await;
}

#[tokio::test]
async fn infinity_in_date_and_timestamptz_columns_is_stored_and_round_trips() {
    let app = declared().await;
    let body = "{\"id\":1,\"d\":\"infinity\",\"t\":\"-infinity\",\"note\":\"a\"}\n\
                {\"id\":2,\"d\":\"-Infinity\",\"t\":\" INFINITY \"}\n\
                {\"id\":3,\"d\":\"2026-10-12\",\"t\":\"2026-10-12T00:00:00Z\"}\n";
    let r = app.put(DAY, "application/x-ndjson", body).await;
    assert_eq!(r.status(), 200, "{}", r.text().await.unwrap());
    let stored_text: Vec<(String, String)> =
        sqlx::query_as("select d::text, t::text from idem_data.vals order by id")
            .fetch_all(&app.db)
            .await
            .unwrap();
    assert_eq!(stored_text[0], ("infinity".into(), "-infinity".into()));
    assert_eq!(stored_text[1], ("-infinity".into(), "infinity".into()));
    assert_every_export_round_trips(&app).await;

    // `psql \copy` writes them bare; the same rows from CSV are the same content.
    let csv = "id,d,t,note\n1,infinity,-infinity,a\n2,-infinity,infinity,\n3,2026-10-12,2026-10-12 00:00:00+00,\n";
    let answer = json_body(app.put(DAY, "text/csv", csv).await).await;
    assert_eq!(answer["changed"], false, "{answer}");

    // An infinite partition value falls in no partition.
    let (error, message) = refused_column(
        app.put(
            DAY,
            "application/x-ndjson",
            "{\"id\":1,\"ds\":\"infinity\"}\n",
        )
        .await,
    )
    .await;
    assert_eq!(error["column"], "ds");
    assert!(message.contains("infinity"), "{message}");
}
