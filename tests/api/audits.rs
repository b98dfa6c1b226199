//! Audits (write-audit-publish checks): declared with a table and shown
//! with it, refused when they do not fit the table, and run in Postgres on
//! the rows of real partitions, each kind passing and failing with what it
//! expected, what it found and the rows that fail it.

use idem::period::{Grain, Period};
use idem::schema::{AuditReport, AuditResult, Audits, TableDef};
use idem::store::audits::{run_audits, StagedPartition};
use idem::store::sql::{partition_table, Ident};
use idem::store::StoreError;
use serde_json::{json, Value};

use crate::helpers::*;
use crate::support::*;

/// `ORDERS` with `audits` added.
fn orders_with(audits: &Value) -> String {
    ORDERS.replace(
        r#""cursor": "updated_at"}"#,
        &format!(r#""cursor": "updated_at", "audits": {audits}}}"#),
    )
}

#[tokio::test]
async fn a_table_declares_its_audits_shows_them_and_drops_them_when_declared_without() {
    let app = spawn_app().await;
    let audits = json!({"min_rows": 1, "max_rows": 1000, "not_null": ["status"],
                        "unique": ["customer_id", "status"],
                        "accepted_values": {"status": ["new", "paid"]},
                        "range": {"amount": {"min": 0, "max": "99.99"}},
                        "max_change_ratio": 0.5});
    let r = app.declare("orders", &orders_with(&audits)).await;
    assert_eq!(r.status(), 201, "{}", r.text().await.unwrap());
    let table = json_body(app.get("/tables/orders").await).await;
    assert_eq!(table["audits"], audits, "{table}");

    let r = app.declare("orders", &orders_with(&audits)).await;
    assert_eq!(r.status(), 200);
    assert_eq!(json_body(r).await["changes"], json!([]), "unchanged");

    let r = app.declare("orders", ORDERS).await;
    assert_eq!(r.status(), 200);
    let answer = json_body(r).await;
    assert_eq!(
        answer["changes"],
        json!([{"change": "set_audits", "audits": {}}]),
        "{answer}"
    );
    let table = json_body(app.get("/tables/orders").await).await;
    assert!(table.get("audits").is_none(), "no audits, no key: {table}");
    let history = json_body(app.get("/tables/orders/history").await).await;
    assert_eq!(history[1]["changes"], answer["changes"], "{history}");
}

#[tokio::test]
async fn audits_that_do_not_fit_the_table_are_a_400_naming_the_problem() {
    let app = spawn_app().await;
    let cases = [
        (json!({"min_row": 1}), "min_row"),
        (json!({"not_null": ["colour"]}), "\"colour\""),
        (json!({"unique": ["order_id", "nope"]}), "\"nope\""),
        (json!({"min_rows": 10, "max_rows": 2}), "min_rows 10"),
        (json!({"max_change_ratio": -0.5}), "max_change_ratio"),
        (
            json!({"accepted_values": {"customer_id": ["seven"]}}),
            "bigint",
        ),
        (json!({"accepted_values": {"status": []}}), "no value"),
        (json!({"range": {"amount": {}}}), "needs a min"),
        (json!({"range": {"amount": {"min": 10, "max": 1}}}), "above"),
        (json!({"range": {"ds": {"min": "last week"}}}), "date"),
        (json!({"range": {"amount": {"low": 1}}}), "low"),
        (json!([1, 2]), "object"),
    ];
    for (audits, named) in cases {
        let r = app.declare("orders", &orders_with(&audits)).await;
        assert_eq!(r.status(), 400, "{audits}");
        let problem = json_body(r).await;
        assert_eq!(problem["code"], "invalid_declaration", "{problem}");
        let detail = problem["detail"].as_str().unwrap();
        assert!(detail.contains(named), "{audits}: {detail}");
    }
    let r = app.get("/tables/orders").await;
    assert_eq!(r.status(), 404, "no table was made");
}

fn row(id: i64, ds: &str, customer: i64, status: &str, amount: &str, note: Option<&str>) -> Value {
    json!({"order_id": id, "ds": ds, "customer_id": customer, "status": status,
           "amount": amount, "updated_at": format!("{ds}T01:00:00Z"), "note": note})
}

/// `orders` with 6 rows on 2026-10-12 and 2 on 2026-10-13: notes null on
/// 2 and 3; customer and status shared by 2 and 3, and by 7 and 8; status
/// `lost` on 4; amounts 500 on 3 and -1 on 5.
async fn two_days() -> (TestApp, TableDef) {
    let app = spawn_app().await;
    app.declare_orders().await;
    let d12 = "2026-10-12";
    let d13 = "2026-10-13";
    let day12 = [
        row(1, d12, 1, "paid", "10", Some("a")),
        row(2, d12, 2, "paid", "20", None),
        row(3, d12, 2, "paid", "500", None),
        row(4, d12, 3, "lost", "5", Some("d")),
        row(5, d12, 4, "new", "-1", Some("e")),
        row(6, d12, 5, "new", "30", Some("b")),
    ];
    let day13 = [
        row(7, d13, 9, "paid", "1", Some("c")),
        row(8, d13, 9, "paid", "2", Some("f")),
    ];
    for (ds, rows) in [(d12, &day12[..]), (d13, &day13[..])] {
        let r = app
            .put_ndjson(&format!("/partitions/orders/{ds}"), rows)
            .await;
        assert_eq!(r.status(), 200, "{}", r.text().await.unwrap());
    }
    let def: sqlx::types::Json<TableDef> =
        sqlx::query_scalar("select definition from idem.tables where name = 'orders'")
            .fetch_one(&app.db)
            .await
            .unwrap();
    (app, def.0)
}

fn day(ds: &str) -> Period {
    Period::parse(ds, Grain::Day).unwrap()
}

/// Runs `audits` on the two days' partitions as if they were staged, with
/// `live` rows said to be live for 2026-10-12.
async fn audit_days(
    app: &TestApp,
    def: &TableDef,
    audits: Value,
    live: Option<u64>,
) -> Result<AuditReport, StoreError> {
    let audits = Audits::parse(&audits, def).unwrap();
    let tables: Vec<Ident> = ["2026-10-12", "2026-10-13"]
        .iter()
        .map(|ds| partition_table(&def.name, day(ds)))
        .collect();
    let staged = [
        StagedPartition {
            period: day("2026-10-12"),
            stage: &tables[0],
            rows: 6,
            live_rows: live,
        },
        StagedPartition {
            period: day("2026-10-13"),
            stage: &tables[1],
            rows: 2,
            live_rows: None,
        },
    ];
    let mut conn = app.db.acquire().await.unwrap();
    run_audits(&mut conn, def, &audits, &staged).await
}

/// The keys (`order_id`, or `id`) of a result's examples, sorted.
fn ids(result: &AuditResult) -> Vec<i64> {
    let mut ids: Vec<i64> = result
        .examples
        .iter()
        .map(|e| e.get("order_id").unwrap_or(&e["id"]).as_i64().unwrap())
        .collect();
    ids.sort();
    ids
}

/// Each result as `audit partition columns passed`, `-` for none.
fn summary(report: &AuditReport) -> Vec<String> {
    report
        .audits
        .iter()
        .map(|a| {
            let partition = a.partition.as_deref().unwrap_or("-");
            let columns = a.columns.as_ref().map_or("-".into(), |c| c.join(","));
            format!("{} {partition} {columns} {}", a.audit, a.passed)
        })
        .collect()
}

#[tokio::test]
async fn audits_the_rows_meet_pass_one_result_each_in_a_stable_order() {
    let (app, def) = two_days().await;
    let audits = json!({"max_change_ratio": 0.8, "min_rows": 2, "max_rows": 6,
                        "not_null": ["status", "customer_id"], "unique": ["order_id"],
                        "accepted_values": {"status": ["paid", "new", "lost"]},
                        "range": {"amount": {"min": -1, "max": 500}, "ds": {"min": "2026-10-12"}}});
    let report = audit_days(&app, &def, audits, Some(20)).await.unwrap();
    assert!(report.passed, "{report:#?}");
    let expected = [
        "min_rows 2026-10-12 - true",
        "min_rows 2026-10-13 - true",
        "max_rows 2026-10-12 - true",
        "max_rows 2026-10-13 - true",
        "not_null - status true",
        "not_null - customer_id true",
        "unique - order_id true",
        "accepted_values - status true",
        "range - amount true",
        "range - ds true",
        "max_change_ratio 2026-10-12 - true",
        "max_change_ratio 2026-10-13 - true",
    ];
    assert_eq!(summary(&report), expected);
    assert!(report.audits.iter().all(|a| a.examples.is_empty()));
    let ratio = &report.audits[10];
    assert_eq!((&ratio.expected, &ratio.found), (&json!(0.8), &json!(0.7)));
    assert_eq!(report.audits[11].found, Value::Null, "no live rows: passes");
}

#[tokio::test]
async fn failing_audits_say_what_they_expected_what_they_found_and_show_the_rows() {
    let (app, def) = two_days().await;
    let audits = json!({"min_rows": 3, "max_rows": 5, "not_null": ["note"],
                        "unique": ["customer_id", "status"],
                        "accepted_values": {"status": ["paid", "new"]},
                        "range": {"amount": {"min": "0", "max": 100}},
                        "max_change_ratio": 0.5});
    let report = audit_days(&app, &def, audits, Some(20)).await.unwrap();
    assert!(!report.passed);
    let by = |audit: &str, passed: bool| {
        report
            .audits
            .iter()
            .find(|a| a.audit == audit && a.passed == passed)
            .unwrap_or_else(|| panic!("{audit} passed={passed}: {report:#?}"))
    };
    let min = by("min_rows", false);
    assert_eq!(min.partition.as_deref(), Some("2026-10-13"));
    assert_eq!((&min.expected, &min.found), (&json!(3), &json!(2)));
    let max = by("max_rows", false);
    assert_eq!(max.partition.as_deref(), Some("2026-10-12"));
    assert_eq!((&max.expected, &max.found), (&json!(5), &json!(6)));

    let nulls = by("not_null", false);
    assert_eq!((&nulls.expected, &nulls.found), (&json!(0), &json!(2)));
    assert_eq!(ids(nulls), [2, 3]);
    let shared = by("unique", false);
    assert_eq!(shared.found, json!(4), "two pairs share their values");
    assert_eq!(ids(shared), [2, 3, 7, 8]);
    let outside = by("accepted_values", false);
    assert_eq!(outside.expected, json!(["paid", "new"]));
    assert_eq!(outside.found, json!(1));
    assert_eq!(ids(outside), [4]);
    assert_eq!(outside.examples[0]["status"], "lost");
    let range = by("range", false);
    assert_eq!(range.expected, json!({"min": "0", "max": 100}));
    assert_eq!(range.found, json!(2));
    assert_eq!(ids(range), [3, 5]);
    let ratio = by("max_change_ratio", false);
    assert_eq!(ratio.partition.as_deref(), Some("2026-10-12"));
    assert_eq!((&ratio.expected, &ratio.found), (&json!(0.5), &json!(0.7)));

    // An example is the row as GET shows it: its columns, no system ones.
    let example = &outside.examples[0];
    let mut keys: Vec<&str> = example
        .as_object()
        .unwrap()
        .keys()
        .map(|k| k.as_str())
        .collect();
    keys.sort();
    let mut columns: Vec<&str> = def.columns.iter().map(|c| c.name.as_str()).collect();
    columns.sort();
    assert_eq!(keys, columns, "{example}");
    let shown = app.rows("orders", "2026-10-12").await;
    let row4 = shown.iter().find(|r| r["order_id"] == 4).unwrap();
    assert_eq!(example, row4);
}

#[tokio::test]
async fn examples_stop_at_five_and_the_count_goes_on() {
    let (app, def) = two_days().await;
    let report = audit_days(
        &app,
        &def,
        json!({"accepted_values": {"status": ["gone"]}}),
        None,
    )
    .await
    .unwrap();
    let outside = &report.audits[0];
    assert!(!report.passed && !outside.passed);
    assert_eq!(outside.found, json!(8));
    assert_eq!(outside.examples.len(), 5);
}

#[tokio::test]
async fn a_value_postgres_cannot_read_as_its_column_is_the_callers_to_fix() {
    let (app, def) = two_days().await;
    let audits = json!({"range": {"updated_at": {"max": "soon"}}});
    let err = audit_days(&app, &def, audits, None).await.unwrap_err();
    assert!(
        matches!(err, StoreError::Schema(_)),
        "a refusal, not a failure: {err:?}"
    );
    assert_eq!(err.code().as_str(), "invalid_declaration");
    assert!(err.to_string().contains("updated_at"), "{err}");
}

#[tokio::test]
async fn audits_read_their_values_as_the_columns_type() {
    let app = spawn_app().await;
    let declaration = r#"{"columns": {"id": "bigint", "flag": "boolean", "tag": "uuid",
        "doc": "jsonb", "at": "timestamptz", "n": "integer", "x": "double precision",
        "ds": "date"}, "primary_key": ["id"]}"#;
    let r = app.declare("things", declaration).await;
    assert_eq!(r.status(), 201, "{}", r.text().await.unwrap());
    let u1 = "6f1c2a3e-0000-4000-8000-000000000001";
    let u2 = "6f1c2a3e-0000-4000-8000-000000000002";
    let rows = [
        json!({"id": 1, "flag": true, "tag": u1, "doc": {"a": 1}, "at": "2026-10-12T10:00:00Z",
               "n": 5, "x": 1.5, "ds": "2026-10-12"}),
        json!({"id": 2, "flag": false, "tag": u2, "doc": {"a": 2}, "at": "2026-10-11T23:00:00Z",
               "n": 6, "x": 2.5, "ds": "2026-10-12"}),
    ];
    let r = app.put_ndjson("/partitions/things/2026-10-12", &rows).await;
    assert_eq!(r.status(), 200, "{}", r.text().await.unwrap());
    let def: sqlx::types::Json<TableDef> =
        sqlx::query_scalar("select definition from idem.tables where name = 'things'")
            .fetch_one(&app.db)
            .await
            .unwrap();
    let def = def.0;
    let audits = json!({
        "accepted_values": {"flag": [true], "tag": [u1], "doc": [{"a": 1}], "x": [1.5]},
        "range": {"at": {"min": "2026-10-12T00:00:00Z"}, "n": {"max": "5"}}});
    let audits = Audits::parse(&audits, &def).unwrap();
    let stage = partition_table(&def.name, day("2026-10-12"));
    let staged = [StagedPartition {
        period: day("2026-10-12"),
        stage: &stage,
        rows: 2,
        live_rows: None,
    }];
    let mut conn = app.db.acquire().await.unwrap();
    let report = run_audits(&mut conn, &def, &audits, &staged).await.unwrap();
    assert_eq!(report.audits.len(), 6, "{report:#?}");
    for result in &report.audits {
        assert_eq!(result.found, json!(1), "{result:#?}");
        assert_eq!(ids(result), [2], "{result:#?}");
    }
    assert_eq!(report.audits[0].examples[0]["doc"], json!({"a": 2}));
}
