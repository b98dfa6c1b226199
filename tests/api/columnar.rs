//! Parquet and Arrow IPC stream bodies, written by pyarrow (an independent
//! writer): every Arrow type idem maps onto a column, nulls in each column,
//! several row groups, a dictionary and nested columns; the same rows as
//! Parquet, Arrow and NDJSON are the same content (one `ETag`); a bad value
//! is a bad row named by row and column (kept as JSON under quarantine); a
//! broken or oversized body is refused with nothing written.

use idem::config::Settings;
use serde_json::{json, Value};

use crate::helpers::*;
use crate::support::*;

pub(crate) const TYPED: &str = r#"{"columns": {"id": "bigint", "ds": "date", "i": "integer",
    "f": "double precision", "n": "numeric", "s": "text", "b": "boolean",
    "t": "timestamptz", "u": "uuid", "j": "jsonb", "l": "jsonb", "m": "jsonb",
    "cat": "text", "tm": "text"},
    "partition_by": "ds", "primary_key": ["id"]}"#;
pub(crate) const DAY: &str = "/partitions/typed/2026-10-12";
pub(crate) const PARQUET: &str = "application/vnd.apache.parquet";
pub(crate) const ARROW: &str = "application/vnd.apache.arrow.stream";

/// Five rows of every type, the third null in every column but its key and
/// day; `table` is the pyarrow table, `ndjson_lines` the same rows as
/// NDJSON written by Python's json (decimals at the column's scale,
/// timestamps with all nine digits).
pub(crate) const ROWS: &str = r#"
UTC = datetime.timezone.utc
D = decimal.Decimal
decimal.getcontext().prec = 60
ns = [1760230923123456789, 1760230924000000500, None, 0, 1760230925999999999]
ids = [uuid.UUID(int=i * 0x1234567890abcdef1234567890abcdef % 2**128) for i in range(1, 6)]
cols = {
    "id": ([1, 2, 3, 4, 5], pa.int64()),
    "ds": ([datetime.date(2026, 10, 12)] * 5, pa.date32()),
    "i": ([1, -2, None, 2147483647, 0], pa.int32()),
    "f": ([0.1, -1.5e300, None, 2.0, 1e-300], pa.float64()),
    "n": ([D("12345678901234567890.123456789"), D("-0.000000001"), None, D("0"), D("1.1")], pa.decimal128(38, 9)),
    "s": (["héllo", "", None, 'tab\tand "quotes"', "ok"], pa.string()),
    "b": ([True, False, None, True, False], pa.bool_()),
    "t": (ns, pa.timestamp("ns", tz="UTC")),
    "u": ([i.bytes for i in ids[:2]] + [None] + [i.bytes for i in ids[3:]], pa.uuid()),
    "j": ([{"a": 1, "b": "x"}, {"a": None, "b": "y"}, None, {"a": 3, "b": None}, {"a": 5, "b": "z"}],
          pa.struct([("a", pa.int64()), ("b", pa.string())])),
    "l": ([[1, 2], [], None, [None, 4], [5]], pa.list_(pa.int64())),
    "m": ([[("k", 1)], [("k", 2), ("l", 3)], None, [], [("z", 9)]], pa.map_(pa.string(), pa.int64())),
    "cat": (["red", "blue", None, "red", "red"], pa.dictionary(pa.int32(), pa.string())),
    "tm": ([datetime.time(1, 2, 3, 4), datetime.time(0, 0), None, datetime.time(23, 59, 59, 999999), datetime.time(12, 0, 0, 500000)], pa.time64("us")),
}
table = pa.table({name: pa.array(values, type=ty) for name, (values, ty) in cols.items()})

def ts(v):
    if v is None:
        return None
    whole = datetime.datetime.fromtimestamp(v // 10**9, UTC).strftime("%Y-%m-%dT%H:%M:%S")
    return f"{whole}.{v % 10**9:09d}Z"

def line(r):
    return {
        "id": r, "ds": "2026-10-12",
        "i": cols["i"][0][r - 1], "f": cols["f"][0][r - 1],
        "n": None if cols["n"][0][r - 1] is None else format(cols["n"][0][r - 1].quantize(D(10) ** -9), "f"),
        "s": cols["s"][0][r - 1], "b": cols["b"][0][r - 1], "t": ts(ns[r - 1]),
        "u": None if r == 3 else str(ids[r - 1]),
        "j": cols["j"][0][r - 1], "l": cols["l"][0][r - 1],
        "m": None if r == 3 else dict(cols["m"][0][r - 1]),
        "cat": cols["cat"][0][r - 1],
        "tm": None if r == 3 else cols["tm"][0][r - 1].isoformat(timespec="microseconds"),
    }
# A jsonb column's SQL NULL is its field left out (`null` is jsonb's null).
def without_null_jsonb(row):
    return {k: v for k, v in row.items() if not (k in ("j", "l", "m") and v is None)}
ndjson_lines = "".join(json.dumps(without_null_jsonb(line(r)), ensure_ascii=False) + "\n" for r in range(1, 6))
"#;

pub(crate) fn parquet_of_rows(row_group_size: usize) -> Vec<u8> {
    written_by_pyarrow(&format!(
        "{ROWS}\npq.write_table(table, out, row_group_size={row_group_size})"
    ))
}

pub(crate) fn arrow_stream_of_rows() -> Vec<u8> {
    written_by_pyarrow(&format!(
        "{ROWS}\nwith ipc.new_stream(out, table.schema) as w:\n    \
         for batch in table.to_batches(max_chunksize=2):\n        w.write_batch(batch)"
    ))
}

fn ndjson_of_rows() -> Vec<u8> {
    written_by_pyarrow(&format!("{ROWS}\nopen(out, 'w').write(ndjson_lines)"))
}

pub(crate) async fn typed() -> TestApp {
    let app = spawn_app().await;
    let r = app.declare("typed", TYPED).await;
    assert_eq!(r.status(), 201, "{}", r.text().await.unwrap());
    app
}

async fn stored(app: &TestApp) -> Vec<String> {
    sqlx::query_scalar("select row(id, i, f, n, s, b, t, u, j, l, m, cat, tm)::text from idem_data.typed order by id")
        .fetch_all(&app.db)
        .await
        .unwrap()
}

#[tokio::test]
async fn a_parquet_day_from_pyarrow_holds_every_value_exactly_and_is_the_content_of_its_ndjson_and_arrow_forms(
) {
    let app = typed().await;
    let r = app.put(DAY, PARQUET, parquet_of_rows(2)).await;
    assert_eq!(r.status(), 200, "{}", r.text().await.unwrap());
    let etag = r.headers()["etag"].to_str().unwrap().to_string();
    let receipt = json_body(r).await;
    assert_eq!(receipt["rows_written"], 5, "{receipt}");
    let rows = stored(&app).await;
    // Each value as Postgres prints it: every digit of the decimal, the
    // nanoseconds rounded to microseconds as Postgres rounds them (half to
    // even: .000000500 down, .999999999 up), the empty string apart from
    // NULL, nested values as jsonb, the dictionary by its values, the time
    // of day with its unit's six digits.
    let expected = [
        r#"(1,1,0.1,12345678901234567890.123456789,héllo,t,"2025-10-12 01:02:03.123457+00",12345678-90ab-cdef-1234-567890abcdef,"{""a"": 1, ""b"": ""x""}","[1, 2]","{""k"": 1}",red,01:02:03.000004)"#,
        r#"(2,-2,-1.5e+300,-0.000000001,"",f,"2025-10-12 01:02:04+00",2468acf1-2157-9bde-2468-acf121579bde,"{""a"": null, ""b"": ""y""}",[],"{""k"": 2, ""l"": 3}",blue,00:00:00.000000)"#,
        r#"(3,,,,,,,,,,,,)"#,
        r#"(4,2147483647,2,0.000000000,"tab	and ""quotes""",t,"1970-01-01 00:00:00+00",48d159e2-42af-37bc-48d1-59e242af37bc,"{""a"": 3, ""b"": null}","[null, 4]",{},red,23:59:59.999999)"#,
        r#"(5,0,1e-300,1.100000000,ok,f,"2025-10-12 01:02:06+00",5b05b05a-d35b-05ab-5b05-b05ad35b05ab,"{""a"": 5, ""b"": ""z""}",[5],"{""z"": 9}",red,12:00:00.500000)"#,
    ];
    assert_eq!(rows, expected);

    // The same rows as NDJSON (Python's json) and as an Arrow stream in
    // batches of two: the same content, nothing rewritten.
    for (content_type, body) in [
        ("application/x-ndjson", ndjson_of_rows()),
        (ARROW, arrow_stream_of_rows()),
    ] {
        let r = app.put(DAY, content_type, body).await;
        assert_eq!(r.status(), 200, "{content_type}");
        assert_eq!(
            r.headers()["etag"].to_str().unwrap(),
            etag,
            "{content_type}"
        );
        let again = json_body(r).await;
        assert_eq!(again["changed"], false, "{content_type}: {again}");
    }
    // idem's own export, PUT back, changes nothing either.
    app.put_back_unchanged(DAY).await;
    assert_eq!(stored(&app).await, rows);
}

#[tokio::test]
async fn a_value_that_does_not_fit_is_a_bad_row_named_by_row_and_column_and_kept_as_json() {
    let app = typed().await;
    let body = written_by_pyarrow(
        "t = pa.table({'id': pa.array([1, 2, 3], pa.int64()), \
           'ds': pa.array([datetime.date(2026, 10, 12)] * 3), \
           'i': pa.array([7, 3000000000, 9], pa.int64()), \
           'n': pa.array([decimal.Decimal('1.5'), decimal.Decimal('2.5'), None], pa.decimal128(4, 1))})\n\
         pq.write_table(t, out, row_group_size=1)",
    );
    let r = app.put(DAY, PARQUET, body.clone()).await;
    assert_eq!(r.status(), 422);
    let problem = json_body(r).await;
    assert_eq!(problem["code"], "bad_rows", "{problem}");
    assert_eq!(problem["errors"][0]["line"], 2, "{problem}");
    assert_eq!(problem["errors"][0]["column"], "i", "{problem}");
    let message = problem["errors"][0]["message"].as_str().unwrap();
    assert!(message.ends_with("(row group 2)"), "{problem}");
    assert_eq!(app.get(DAY).await.status(), 404, "nothing written");
    // A value the reader itself cannot write (a time of day past 24 hours)
    // names its row group too.
    let far_date = written_by_pyarrow(
        "t = pa.table({'id': pa.array([1, 2], pa.int64()), \
           'ds': pa.array([datetime.date(2026, 10, 12)] * 2), \
           'tm': pa.array([0, 100000 * 10**6], pa.time64('us'))})\n\
         pq.write_table(t, out, row_group_size=1)",
    );
    let problem = json_body(app.put(DAY, PARQUET, far_date).await).await;
    assert_eq!(problem["errors"][0]["line"], 2, "{problem}");
    assert_eq!(problem["errors"][0]["column"], "tm", "{problem}");
    let message = problem["errors"][0]["message"].as_str().unwrap();
    assert!(message.ends_with("(row group 2)"), "{problem}");

    let r = app
        .put(&format!("{DAY}?bad_rows=quarantine"), PARQUET, body)
        .await;
    assert_eq!(r.status(), 200);
    let receipt = json_body(r).await;
    assert_eq!(
        (receipt["rows_written"].clone(), receipt["rejected"].clone()),
        (json!(2), json!(1)),
        "{receipt}"
    );
    let rejects = json_body(app.get("/rejects?table=typed").await).await;
    let reject = &rejects[0];
    assert_eq!(reject["line"], 2, "{reject}");
    let raw: Value = serde_json::from_str(reject["raw"].as_str().unwrap()).unwrap();
    assert_eq!(
        raw,
        json!({"id": 2, "ds": "2026-10-12", "i": 3000000000_i64, "n": 2.5}),
        "{reject}"
    );

    // Once the column is widened, the kept row replays as it came.
    let widened = TYPED.replace(r#""i": "integer""#, r#""i": "bigint""#);
    assert_eq!(app.declare("typed", &widened).await.status(), 200);
    let r = app
        .client
        .post(app.url("/rejects/replay?table=typed"))
        .header("idempotency-key", "widened")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let replayed = json_body(r).await;
    assert_eq!(replayed["rows_replayed"], 1, "{replayed}");
    let row: (i64, String) = sqlx::query_as("select i, n::text from idem_data.typed where id = 2")
        .fetch_one(&app.db)
        .await
        .unwrap();
    assert_eq!(row, (3_000_000_000, "2.5".to_string()));
}

#[tokio::test]
async fn a_post_of_parquet_rows_is_written_once_under_its_key() {
    let app = typed().await;
    let body = parquet_of_rows(3);
    for replayed in [false, true] {
        let r = app
            .client
            .post(app.url("/rows?table=typed"))
            .header("content-type", "application/x-parquet")
            .header("idempotency-key", "parquet-1")
            .body(body.clone())
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200);
        let receipt = json_body(r).await;
        assert_eq!(receipt["replayed"], replayed, "{receipt}");
        assert_eq!(receipt["rows_written"], 5, "{receipt}");
    }
    assert_eq!(app.count("typed", "2026-10-12").await, 5);
}

#[tokio::test]
async fn broken_columnar_bodies_are_refused_whole_with_nothing_written() {
    let app = typed().await;
    let parquet = parquet_of_rows(2);
    // The footer's length, just before the closing magic, points outside
    // the file; or declares 4 GiB of metadata, which idem would hold.
    let n = parquet.len();
    let with_footer_length = |length: u32| {
        let mut file = parquet.clone();
        file[n - 8..n - 4].copy_from_slice(&length.to_le_bytes());
        file
    };
    let bad_footer = with_footer_length(u32::try_from(n).unwrap());
    let huge_footer = with_footer_length(u32::MAX);
    let stream = arrow_stream_of_rows();
    for (what, content_type, body) in [
        (
            "a truncated Parquet file",
            PARQUET,
            parquet[..parquet.len() / 2].to_vec(),
        ),
        ("a broken footer", PARQUET, bad_footer),
        ("a footer of 4 GiB", PARQUET, huge_footer),
        (
            "CSV sent as Parquet",
            PARQUET,
            b"id,ds\n1,2026-10-12\n".to_vec(),
        ),
        ("an empty Parquet body", PARQUET, Vec::new()),
        (
            "a truncated Arrow stream",
            ARROW,
            stream[..stream.len() - 40].to_vec(),
        ),
        ("NDJSON sent as Arrow", ARROW, b"{\"id\": 1}\n".to_vec()),
    ] {
        let r = app.put(DAY, content_type, body).await;
        assert_eq!(r.status(), 422, "{what}");
        let problem = json_body(r).await;
        assert_eq!(problem["code"], "malformed_body", "{what}: {problem}");
        assert_eq!(app.get(DAY).await.status(), 404, "{what}: nothing written");
    }
}

#[tokio::test]
async fn a_row_group_over_the_bound_is_refused_before_any_row() {
    let app = spawn_app_with(Settings {
        max_row_group_bytes: 4096,
        ..Settings::default()
    })
    .await;
    let r = app.declare("typed", TYPED).await;
    assert_eq!(r.status(), 201);
    let body = written_by_pyarrow(
        "t = pa.table({'id': pa.array(range(1, 2001), pa.int64()), \
           'ds': pa.array([datetime.date(2026, 10, 12)] * 2000), \
           's': pa.array([f'row {i:06d} of a group too large' for i in range(2000)])})\n\
         pq.write_table(t, out, row_group_size=2000, compression='zstd')",
    );
    let r = app.put(DAY, PARQUET, body).await;
    assert_eq!(r.status(), 413);
    let problem = json_body(r).await;
    assert_eq!(problem["code"], "record_too_large", "{problem}");
    assert!(
        problem["detail"].as_str().unwrap().contains("row group 1"),
        "{problem}"
    );
    assert_eq!(app.get(DAY).await.status(), 404);
}

#[tokio::test]
async fn a_column_of_a_type_idem_cannot_hold_is_named_in_the_refusal() {
    let app = typed().await;
    let body = written_by_pyarrow(
        "t = pa.table({'id': pa.array([1], pa.int64()), 'ds': pa.array([datetime.date(2026, 10, 12)]), \
           's': pa.array([b'\\x00\\x01'], pa.binary())})\npq.write_table(t, out)",
    );
    let r = app.put(DAY, PARQUET, body).await;
    assert_eq!(r.status(), 422);
    let problem = json_body(r).await;
    assert_eq!(problem["code"], "malformed_body", "{problem}");
    assert_eq!(problem["errors"][0]["column"], "s", "{problem}");
    assert_eq!(app.get(DAY).await.status(), 404, "nothing written");
}

#[tokio::test]
async fn the_client_puts_and_posts_parquet_files_once() {
    let app = typed().await;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("day.parquet");
    std::fs::write(&path, parquet_of_rows(2)).unwrap();
    let path = path.to_str().unwrap();

    let (code, receipt, stderr) =
        crate::cli::idem_json(&app.base, &["put", "typed", "2026-10-12", path]).await;
    assert_eq!(code, Some(0), "{stderr}");
    assert_eq!(receipt["rows_written"], 5, "{receipt}");

    // A POST of the file: a batch a row group (three of them), each once;
    // run again, each a replay, whose rows were written by the run before.
    let mut written = serde_json::Value::Null;
    for replayed in [0, 3] {
        let (code, summary, stderr) =
            crate::cli::idem_json(&app.base, &["post", "typed", path]).await;
        assert_eq!(code, Some(0), "{stderr}");
        assert_eq!(summary["batches"], 3, "{summary}");
        assert_eq!(summary["replayed"], replayed, "{summary}");
        let counts = (&summary["rows_written"], &summary["rows_written_before"]);
        match replayed {
            0 => written = counts.0.clone(),
            _ => assert_eq!(counts, (&0.into(), &written), "{summary}"),
        }
    }
    let posts: i64 = sqlx::query_scalar(
        "select count(*) from idem.loads where table_name = 'typed' and rows_received = 2",
    )
    .fetch_one(&app.db)
    .await
    .unwrap();
    assert_eq!(posts, 2, "two row groups of 2 rows, one of 1");
    let (code, _, stderr) =
        crate::cli::idem_json(&app.base, &["post", "typed", path, "--channel", "feed"]).await;
    assert_eq!(code, Some(3), "a channel counts lines: {stderr}");
    assert_eq!(app.count("typed", "2026-10-12").await, 5);
}

#[tokio::test]
async fn an_undeclared_table_takes_its_columns_from_a_columnar_body_s_schema() {
    let app = spawn_app().await;
    let typed = |name: &str, ty: &str| (name.to_string(), ty.to_string());
    let expected = vec![
        typed("id", "bigint"),
        typed("ds", "date"),
        typed("i", "integer"),
        typed("f", "double precision"),
        typed("n", "numeric"),
        typed("s", "text"),
        typed("b", "boolean"),
        typed("t", "timestamptz"),
        typed("u", "uuid"),
        typed("j", "jsonb"),
        typed("l", "jsonb"),
        typed("m", "jsonb"),
        typed("cat", "text"),
        typed("tm", "text"),
    ];
    for (table, content_type, body) in [
        ("from_parquet", PARQUET, parquet_of_rows(2)),
        ("from_arrow", ARROW, arrow_stream_of_rows()),
    ] {
        let r = app
            .put(
                &format!("/partitions/{table}/2026-10-12"),
                content_type,
                body,
            )
            .await;
        assert_eq!(r.status(), 200, "{table}: {}", r.text().await.unwrap());
        assert_eq!(app.column_types(table).await, expected, "{table}");
        assert_eq!(app.count(table, "2026-10-12").await, 5, "{table}");
    }
    // Rows whose schema cannot be read make no table.
    let broken = parquet_of_rows(2)[..100].to_vec();
    let r = app
        .put("/partitions/never/2026-10-12", PARQUET, broken)
        .await;
    assert_eq!(r.status(), 422);
    assert_eq!(app.get("/tables/never").await.status(), 404);
}

#[tokio::test]
async fn under_evolve_a_columnar_body_adds_and_widens_columns_by_its_schema_s_types() {
    let app = spawn_app().await;
    let declaration = r#"{"columns": {"id": "bigint", "ds": "date", "small": "integer"},
        "partition_by": "ds", "primary_key": ["id"], "schema": "evolve"}"#;
    assert_eq!(app.declare("grow", declaration).await.status(), 201);
    // New columns whose values alone would say another type, or none: all
    // null, a list, digits in a decimal; and an int64 field whose value
    // needs more than the integer column holds.
    let body = written_by_pyarrow(
        "t = pa.table({'id': pa.array([1, 2], pa.int64()), \
           'ds': pa.array([datetime.date(2026, 10, 12)] * 2), \
           'small': pa.array([1, 3000000000], pa.int64()), \
           'amount': pa.array([decimal.Decimal('7'), None], pa.decimal128(10, 0)), \
           'flag': pa.array([None, None], pa.bool_()), \
           'tags': pa.array([['a'], []], pa.list_(pa.string())), \
           'at': pa.array([None, 0], pa.timestamp('s', tz='UTC'))})\n\
         pq.write_table(t, out)",
    );
    let r = app.put("/partitions/grow/2026-10-12", PARQUET, body).await;
    assert_eq!(r.status(), 200, "{}", r.text().await.unwrap());
    let typed = |name: &str, ty: &str| (name.to_string(), ty.to_string());
    assert_eq!(
        app.column_types("grow").await,
        [
            typed("id", "bigint"),
            typed("ds", "date"),
            typed("small", "bigint"),
            typed("amount", "numeric"),
            typed("at", "timestamptz"),
            typed("flag", "boolean"),
            typed("tags", "jsonb"),
        ]
    );
    assert_eq!(app.count("grow", "2026-10-12").await, 2);
}

/// The typed rows as an Arrow stream compressed with `codec`, as pyarrow's
/// `IpcWriteOptions(compression=…)` (the default of several writers) does.
fn compressed_arrow_stream_of_rows(codec: &str) -> Vec<u8> {
    written_by_pyarrow(&format!(
        "{ROWS}\noptions = ipc.IpcWriteOptions(compression={codec:?})\n\
         with ipc.new_stream(out, table.schema, options=options) as w:\n    \
         for batch in table.to_batches(max_chunksize=2):\n        w.write_batch(batch)"
    ))
}

#[tokio::test]
async fn arrow_streams_compressed_with_zstd_or_lz4_and_gzipped_columnar_bodies_are_the_same_content(
) {
    let app = typed().await;
    let r = app.put(DAY, PARQUET, parquet_of_rows(2)).await;
    assert_eq!(r.status(), 200, "{}", r.text().await.unwrap());
    let etag = r.headers()["etag"].to_str().unwrap().to_string();
    let rows = stored(&app).await;
    let bodies = [
        (
            "zstd",
            ARROW,
            compressed_arrow_stream_of_rows("zstd"),
            false,
        ),
        ("lz4", ARROW, compressed_arrow_stream_of_rows("lz4"), false),
        ("gzipped Parquet", PARQUET, gzip(&parquet_of_rows(2)), true),
        ("gzipped Arrow", ARROW, gzip(&arrow_stream_of_rows()), true),
    ];
    for (what, content_type, body, gzipped) in bodies {
        let mut request = app
            .client
            .put(app.url(DAY))
            .header("content-type", content_type);
        if gzipped {
            request = request.header("content-encoding", "gzip");
        }
        let r = request.body(body).send().await.unwrap();
        assert_eq!(r.status(), 200, "{what}: {}", r.text().await.unwrap());
        assert_eq!(r.headers()["etag"].to_str().unwrap(), etag, "{what}");
        let receipt = json_body(r).await;
        assert_eq!(receipt["changed"], false, "{what}: {receipt}");
    }
    assert_eq!(stored(&app).await, rows);
}

#[tokio::test]
async fn a_compressed_arrow_batch_over_the_bound_is_refused_with_nothing_written() {
    let app = spawn_app_with(Settings {
        max_row_group_bytes: 4096,
        ..Settings::default()
    })
    .await;
    let r = app.declare("typed", TYPED).await;
    assert_eq!(r.status(), 201);
    // Two batches: the first small, the second over the bound only once
    // unpacked (zstd packs its repeated values into far less than 4 KiB).
    let body = written_by_pyarrow(
        "t = pa.table({'id': pa.array([1] * 2001, pa.int64()), \
           'ds': pa.array([datetime.date(2026, 10, 12)] * 2001)})\n\
         options = ipc.IpcWriteOptions(compression='zstd')\n\
         with ipc.new_stream(out, t.schema, options=options) as w:\n    \
             w.write_batch(t.slice(0, 1).to_batches()[0])\n    \
             w.write_batch(t.slice(1).combine_chunks().to_batches()[0])",
    );
    assert!(body.len() < 4096, "the stream is {} bytes", body.len());
    let r = app.put(DAY, ARROW, body).await;
    assert_eq!(r.status(), 413);
    let problem = json_body(r).await;
    assert_eq!(problem["code"], "record_too_large", "{problem}");
    assert!(
        problem["detail"]
            .as_str()
            .unwrap()
            .contains("record batch 2 of the Arrow stream"),
        "{problem}"
    );
    assert_eq!(app.get(DAY).await.status(), 404);
}
