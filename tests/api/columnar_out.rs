//! Rows read back as Parquet and as an Arrow stream, read by pyarrow (an
//! independent reader): each column's type is what a data team expects
//! (decimals at their scale, instants in UTC, uuid and JSON by their
//! canonical extensions), the values are the stored ones, and the file PUT
//! back is the same content (`"changed": false`), or, into an undeclared
//! table, makes the same columns.

use serde_json::{json, Value};

use crate::columnar::{arrow_stream_of_rows, parquet_of_rows, typed, ARROW, DAY, PARQUET};
use crate::helpers::*;
use crate::support::*;

/// Prints the table pyarrow reads from `inp` (`read`: the expression that
/// reads it) as JSON: each field's type and metadata, and each row's
/// values as Python's `str` of them.
fn described_by_pyarrow(bytes: &[u8], read: &str) -> Value {
    let script = format!(
        "t = {read}\n\
         fields = [[f.name, str(f.type), {{k.decode(): v.decode() for k, v in (f.metadata or {{}}).items()}}] for f in t.schema]\n\
         rows = [{{k: None if v is None else str(v) for k, v in r.items()}} for r in t.to_pylist()]\n\
         print(json.dumps({{'fields': fields, 'rows': rows}}))"
    );
    serde_json::from_str(&read_by_pyarrow(bytes, &script)).unwrap()
}

const READ_PARQUET: &str = "pq.read_table(inp)";
const READ_ARROW: &str = "ipc.open_stream(inp).read_all()";

#[tokio::test]
async fn a_day_read_as_parquet_or_arrow_keeps_its_types_and_values_and_puts_back_unchanged() {
    let app = typed().await;
    let r = app.put(DAY, PARQUET, parquet_of_rows(2)).await;
    assert_eq!(r.status(), 200, "{}", r.text().await.unwrap());
    let etag = r.headers()["etag"].to_str().unwrap().to_string();

    for (asked, media_type, read) in [
        ("?format=parquet", PARQUET, READ_PARQUET),
        ("?format=arrow", ARROW, READ_ARROW),
    ] {
        let r = app.get(&format!("{DAY}{asked}")).await;
        assert_eq!(r.status(), 200, "{asked}");
        assert_eq!(r.headers()["content-type"], media_type, "{asked}");
        assert_eq!(r.headers()["etag"].to_str().unwrap(), etag, "{asked}");
        let file = r.bytes().await.unwrap().to_vec();

        let described = described_by_pyarrow(&file, read);
        let types: Vec<&str> = described["fields"]
            .as_array()
            .unwrap()
            .iter()
            .map(|f| f[1].as_str().unwrap())
            .collect();
        assert_eq!(
            types,
            [
                "int64",
                "date32[day]",
                "int32",
                "double",
                "decimal128(38, 9)",
                "string",
                "bool",
                "timestamp[us, tz=UTC]",
                "extension<arrow.uuid>",
                "extension<arrow.json>",
                "extension<arrow.json>",
                "extension<arrow.json>",
                "string",
                "string",
            ],
            "{asked}: {described}"
        );
        // Row order is unspecified (a distributed table's come shard by
        // shard): by id.
        let mut rows = described["rows"].as_array().unwrap().clone();
        rows.sort_by_key(|r| r["id"].to_string());
        assert_eq!(rows.len(), 5, "{asked}");
        let first = &rows[0];
        let expected_first = serde_json::json!({
            "id": "1", "ds": "2026-10-12", "i": "1", "f": "0.1",
            "n": "12345678901234567890.123456789", "s": "héllo", "b": "True",
            // The nanoseconds as Postgres rounded them.
            "t": "2025-10-12 01:02:03.123457+00:00",
            "u": "12345678-90ab-cdef-1234-567890abcdef",
            "j": r#"{"a": 1, "b": "x"}"#, "l": "[1, 2]", "m": r#"{"k": 1}"#,
            "cat": "red", "tm": "01:02:03.000004",
        });
        assert_eq!(first, &expected_first, "{asked}");
        let third = rows[2].as_object().unwrap();
        let nulls = third.values().filter(|v| v.is_null()).count();
        assert_eq!(nulls, 12, "every column but the key and day: {asked}");

        // What GET gives, PUT takes back unchanged.
        let put = app.put(DAY, media_type, file).await;
        assert_eq!(put.status(), 200, "{asked}");
        assert_eq!(put.headers()["etag"].to_str().unwrap(), etag, "{asked}");
        assert_eq!(json_body(put).await["changed"], false, "{asked}");
    }
    // The Accept header asks as the query does.
    let r = app
        .client
        .get(app.url(DAY))
        .header("accept", "application/x-parquet")
        .send()
        .await
        .unwrap();
    assert_eq!(r.headers()["content-type"], PARQUET);
    assert_eq!(&r.bytes().await.unwrap()[..4], b"PAR1");
    let r = app.get(&format!("{DAY}?format=avro")).await;
    assert_eq!(r.status(), 400);
}

#[tokio::test]
async fn an_undeclared_table_made_from_an_export_has_the_columns_of_the_table_it_came_from() {
    let app = typed().await;
    let r = app.put(DAY, ARROW, arrow_stream_of_rows()).await;
    assert_eq!(r.status(), 200, "{}", r.text().await.unwrap());
    for (asked, media_type) in [("parquet", PARQUET), ("arrow", ARROW)] {
        let export = app.get(&format!("{DAY}?format={asked}")).await;
        let copy = format!("copy_{asked}");
        let r = app
            .put(
                &format!("/partitions/{copy}/2026-10-12"),
                media_type,
                export.bytes().await.unwrap(),
            )
            .await;
        assert_eq!(r.status(), 200, "{asked}: {}", r.text().await.unwrap());
        assert_eq!(
            app.column_types(&copy).await,
            app.column_types("typed").await,
            "{asked}"
        );
        let ours = app.rows("typed", "2026-10-12").await;
        assert_eq!(app.rows(&copy, "2026-10-12").await, ours, "{asked}");
    }
}

const EDGES: &str = r#"{"columns": {"id": "bigint", "n": "numeric", "d": "date",
    "t": "timestamptz", "j": "jsonb", "ds": "date"}, "partition_by": "ds", "primary_key": ["id"]}"#;
const EDGES_DAY: &str = "/partitions/edges/2026-10-12";

#[tokio::test]
async fn values_no_arrow_type_holds_as_such_go_out_as_text_or_sentinels_and_come_back_the_same() {
    let app = spawn_app().await;
    assert_eq!(app.declare("edges", EDGES).await.status(), 201);
    let rows = [
        r#"{"id": 1, "n": "1.5", "d": "infinity", "t": "-infinity", "j": "a string", "ds": "2026-10-12"}"#,
        r#"{"id": 2, "n": "2.25", "d": "-infinity", "t": "infinity", "j": {"k": [1, null]}, "ds": "2026-10-12"}"#,
        r#"{"id": 3, "n": "123456789012345678901234567890123456789012", "d": "2026-01-02", "ds": "2026-10-12"}"#,
        // A jsonb JSON null, apart from row 3's SQL NULL (the field left out).
        r#"{"id": 4, "j": null, "ds": "2026-10-12"}"#,
    ];
    let rows = rows.join("\n") + "\n";
    let r = app
        .put("/tables/edges/rows", "application/x-ndjson", rows)
        .await;
    assert_eq!(r.status(), 200, "{}", r.text().await.unwrap());
    let etag = r.headers()["etag"].to_str().unwrap().to_string();

    let r = app.get(&format!("{EDGES_DAY}?format=parquet")).await;
    assert_eq!(r.status(), 200);
    let file = r.bytes().await.unwrap().to_vec();
    // Read raw: no Python date or datetime holds an infinity.
    let read = "pq.read_table(inp).cast(pa.schema([pa.field(f.name, pa.int32() \
                if f.name == 'd' else pa.int64() if f.name == 't' else f.type, metadata=f.metadata) for f in pq.read_schema(inp)]))";
    let described = described_by_pyarrow(&file, read);
    let n = &described["fields"][1];
    assert_eq!(
        n[1], "string",
        "scales differ: the numeric's text; {described}"
    );
    assert_eq!(n[2]["idem.type"], "numeric", "{described}");
    // Row order is unspecified (a distributed table's come shard by shard).
    let mut rows = described["rows"].as_array().unwrap().clone();
    rows.sort_by_key(|r| r["id"].to_string());
    let column = |name: &str| -> Vec<Value> { rows.iter().map(|r| r[name].clone()).collect() };
    assert_eq!(
        column("n")[..3],
        ["1.5", "2.25", "123456789012345678901234567890123456789012"]
    );
    let (day_infinity, instant_infinity) = (i32::MAX.to_string(), i64::MAX.to_string());
    assert_eq!(
        column("d")[..2],
        [day_infinity.clone(), format!("-{day_infinity}")]
    );
    assert_eq!(
        column("t")[..2],
        [format!("-{instant_infinity}"), instant_infinity]
    );
    assert_eq!(
        column("j"),
        [
            json!(r#""a string""#),
            json!(r#"{"k": [1, null]}"#),
            Value::Null,
            json!("null")
        ],
        "SQL NULL is Arrow's null, a JSON null the JSON text null"
    );

    let put = app.put(EDGES_DAY, PARQUET, file.clone()).await;
    assert_eq!(put.status(), 200);
    assert_eq!(put.headers()["etag"].to_str().unwrap(), etag);
    assert_eq!(json_body(put).await["changed"], false);
    let r = app
        .put("/partitions/edge_copy/2026-10-12", PARQUET, file)
        .await;
    assert_eq!(r.status(), 200, "{}", r.text().await.unwrap());
    assert_eq!(
        app.column_types("edge_copy").await,
        app.column_types("edges").await
    );
}

#[tokio::test]
async fn idem_get_writes_the_format_its_output_is_named_for_and_idem_put_and_backfill_take_it_back()
{
    let app = typed().await;
    let r = app.put(DAY, PARQUET, parquet_of_rows(2)).await;
    assert_eq!(r.status(), 200);
    let dir = tempfile::tempdir().unwrap();
    for name in ["day.parquet", "day.arrow"] {
        let out = dir.path().join(name);
        let out = out.to_str().unwrap();
        let (code, _, stderr) =
            crate::cli::idem_json(&app.base, &["get", "typed", "2026-10-12", "-o", out]).await;
        assert_eq!(code, Some(0), "{name}: {stderr}");
        let read = match name.ends_with(".parquet") {
            true => READ_PARQUET,
            false => READ_ARROW,
        };
        assert_eq!(
            described_by_pyarrow(&std::fs::read(out).unwrap(), read)["rows"]
                .as_array()
                .unwrap()
                .len(),
            5,
            "{name}"
        );
        let (code, receipt, stderr) =
            crate::cli::idem_json(&app.base, &["put", "typed", "2026-10-12", out]).await;
        assert_eq!(code, Some(0), "{name}: {stderr}");
        assert_eq!(receipt["changed"], false, "{name}: {receipt}");
    }
    // A day as a Parquet file named for it, backfilled: unchanged.
    let export = app.get(&format!("{DAY}?format=parquet")).await;
    let day_file = dir.path().join("ds=2026-10-12.parquet");
    std::fs::write(&day_file, export.bytes().await.unwrap()).unwrap();
    let pattern = dir.path().join("ds={ds}.parquet");
    let backfill = [
        "backfill",
        "typed",
        "--from",
        "2026-10-12",
        "--to",
        "2026-10-12",
        "--files",
        pattern.to_str().unwrap(),
        "--json",
    ];
    let (code, report, stderr) = crate::cli::idem_json(&app.base, &backfill).await;
    assert_eq!(code, Some(0), "{stderr}");
    assert!(report.to_string().contains("unchanged"), "{report}");

    let whole = dir.path().join("whole.parquet");
    let whole = whole.to_str().unwrap();
    let (code, _, stderr) =
        crate::cli::idem_json(&app.base, &["get", "typed", "--whole", "-o", whole]).await;
    assert_eq!(code, Some(0), "{stderr}");
    let (code, receipt, stderr) =
        crate::cli::idem_json(&app.base, &["put", "typed", "--whole", whole]).await;
    assert_eq!(code, Some(0), "{stderr}");
    assert_eq!(receipt["changed"], false, "{receipt}");
}
