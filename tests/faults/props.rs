//! Property tests, in process: the body decoders and the row encoder never
//! panic on any input, every refused record says why, valid rows are never
//! refused and read the same in every format; the name and date validators
//! never panic and accept exactly what the contract says.

use std::ops::ControlFlow;

use idem::ingest::{
    read_records, BodyFormat, ContentHash, EncodeOptions, ErrorLog, RawRecord, ReadLimits,
    RecordSink, RowEncoder, RowError,
};
use idem::names::{ColumnName, TableName};
use idem::schema::{TableDeclaration, TableDef};
use proptest::prelude::*;

use crate::scenario::long;
use crate::support::ORDERS;

fn config() -> ProptestConfig {
    ProptestConfig {
        cases: if long() { 4_096 } else { 256 },
        // A failure prints its minimal input; nothing is written to the tree.
        failure_persistence: None,
        ..ProptestConfig::default()
    }
}

fn orders() -> TableDef {
    serde_json::from_str::<TableDeclaration>(ORDERS)
        .unwrap()
        .into_def(TableName::parse("orders").unwrap())
        .unwrap()
}

/// Feeds every record to a `RowEncoder`, as a write does, and keeps count.
struct Sink<'d> {
    encoder: RowEncoder<'d>,
    out: Vec<u8>,
    errors: ErrorLog,
    records: u64,
    good: u64,
    /// Records refused without a single error saying why.
    silent_refusals: u64,
    hash: ContentHash,
}

impl<'d> Sink<'d> {
    fn new(def: &'d TableDef, ds: Option<chrono::NaiveDate>) -> Self {
        let options = EncodeOptions {
            allowed: None,
            ds: ds.map(idem::period::Period::day),
            row_id_scope: Some(b"key".to_vec()),
            tombstones: ds.is_none(),
            presence: ds.is_none(),
        };
        Sink {
            encoder: RowEncoder::new(def, options, idem::ids::LoadId::NONE),
            out: Vec::new(),
            errors: ErrorLog::default(),
            records: 0,
            good: 0,
            silent_refusals: 0,
            hash: ContentHash::default(),
        }
    }
}

impl RecordSink for Sink<'_> {
    fn record(
        &mut self,
        _raw: Option<&[u8]>,
        record: Result<RawRecord<'_>, RowError>,
    ) -> ControlFlow<()> {
        self.records += 1;
        match record {
            Ok(record) => {
                let before = self.errors.count;
                match self
                    .encoder
                    .encode(&record, &mut self.out, &mut self.errors)
                {
                    Some(row) => {
                        self.good += 1;
                        self.hash.add(&row.row_hash);
                    }
                    None if self.errors.count == before => self.silent_refusals += 1,
                    None => {}
                }
            }
            Err(e) => self.errors.push(e),
        }
        self.out.clear();
        ControlFlow::Continue(())
    }
}

fn day() -> Option<chrono::NaiveDate> {
    chrono::NaiveDate::from_ymd_opt(2026, 10, 12)
}

const FORMATS: [BodyFormat; 3] = [BodyFormat::Ndjson, BodyFormat::JsonArray, BodyFormat::Csv];

/// Reads `body` as `format` for a PUT (a day) or a POST (rows name theirs).
fn decode(format: BodyFormat, body: &[u8], put: bool) -> (Sink<'static>, bool) {
    static ORDERS_DEF: std::sync::OnceLock<TableDef> = std::sync::OnceLock::new();
    let def = ORDERS_DEF.get_or_init(orders);
    let mut sink = Sink::new(def, if put { day() } else { None });
    let read = read_records(
        format,
        body,
        &mut sink,
        &ReadLimits::records_up_to(64 * 1024),
    );
    (sink, read.is_ok())
}

/// JSON-ish values, hostile ones among them.
fn json_value() -> impl Strategy<Value = String> {
    let leaf = prop_oneof![
        Just("null".to_string()),
        Just("true".to_string()),
        any::<i64>().prop_map(|v| v.to_string()),
        any::<f64>().prop_map(|v| format!("{v:e}")),
        "-?[0-9]{1,40}(\\.[0-9]{0,40})?([eE][+-]?[0-9]{1,6})?",
        "[0-9]{1,4}-[0-9]{1,2}-[0-9]{1,2}".prop_map(|d| format!("\"{d}\"")),
        "[0-9]{4}-[0-9]{2}-[0-9]{2}[T ][0-9]{2}:[0-9]{2}:[0-9]{2}(\\.[0-9]{1,9})?(Z|[+-][0-9]{2}(:[0-9]{2})?)?"
            .prop_map(|t| format!("\"{t}\"")),
        any::<String>().prop_map(|s| serde_json::to_string(&s).unwrap()),
        "\"(\\\\u[0-9a-fA-F]{4}|\\\\[nrt\"\\\\/]|[^\"\\\\\n\r]){0,12}\"",
        "[\\[\\]{}:,\"\\\\a-z0-9 ]{0,12}",
    ];
    leaf.prop_recursive(4, 24, 6, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(|v| format!("[{}]", v.join(","))),
            prop::collection::vec(("[a-z_]{1,6}", inner), 0..4).prop_map(|kv| {
                let fields: Vec<String> = kv.iter().map(|(k, v)| format!("\"{k}\":{v}")).collect();
                format!("{{{}}}", fields.join(","))
            }),
        ]
    })
}

/// A field name: one of the table's, or another.
fn field_name() -> impl Strategy<Value = String> {
    prop_oneof![
        4 => prop::sample::select(vec![
            "order_id", "ds", "customer_id", "status", "amount", "updated_at", "note", "_deleted",
        ]).prop_map(str::to_string),
        1 => any::<String>(),
    ]
}

/// An object that looks like a row, with values of any kind.
fn row_ish() -> impl Strategy<Value = String> {
    prop::collection::vec((field_name(), json_value()), 0..8).prop_map(|fields| {
        let fields: Vec<String> = fields
            .iter()
            .map(|(k, v)| format!("{}:{v}", serde_json::to_string(k).unwrap()))
            .collect();
        format!("{{{}}}", fields.join(","))
    })
}

/// A CSV field: plain, quoted, with separators, quotes and line breaks.
fn csv_field() -> impl Strategy<Value = String> {
    prop_oneof![
        "[a-z0-9 .:+-]{0,12}",
        "-?[0-9]{1,30}(\\.[0-9]{0,30})?",
        "\"([^\"]|\"\"){0,12}\"",
        "[,\"\r\n\u{feff}\\\\a\u{0}]{0,6}",
        any::<String>(),
    ]
}

/// One valid orders row: (order_id, customer_id, status, amount, updated_at).
type Order = (i64, Option<i64>, String, String, String);

fn valid_order() -> impl Strategy<Value = Order> {
    (
        any::<i64>(),
        any::<Option<i64>>(),
        "[^\u{0}-\u{1f}\u{7f}-\u{9f}]{1,16}",
        (any::<i64>(), 0u32..8).prop_map(|(v, scale)| {
            let digits = v.unsigned_abs().to_string();
            let sign = if v < 0 { "-" } else { "" };
            let scale = (scale as usize).min(digits.len().saturating_sub(1));
            let (int, frac) = digits.split_at(digits.len() - scale);
            if frac.is_empty() {
                format!("{sign}{int}")
            } else {
                format!("{sign}{int}.{frac}")
            }
        }),
        (0i64..4_000_000_000, 0u32..1_000_000).prop_map(|(secs, micros)| {
            chrono::DateTime::from_timestamp(secs, micros * 1000)
                .unwrap()
                .to_rfc3339_opts(chrono::SecondsFormat::Micros, true)
        }),
    )
}

fn orders_ndjson(rows: &[Order]) -> Vec<serde_json::Value> {
    rows.iter()
        .map(|(id, customer, status, amount, at)| {
            serde_json::json!({"order_id": id, "ds": "2026-10-12", "customer_id": customer,
                "status": status, "amount": amount, "updated_at": at})
        })
        .collect()
}

fn orders_csv(rows: &[Order]) -> Vec<u8> {
    let mut w = csv::Writer::from_writer(Vec::new());
    w.write_record([
        "order_id",
        "ds",
        "customer_id",
        "status",
        "amount",
        "updated_at",
    ])
    .unwrap();
    for (id, customer, status, amount, at) in rows {
        let customer = customer.map(|c| c.to_string()).unwrap_or_default();
        w.write_record([
            id.to_string().as_str(),
            "2026-10-12",
            &customer,
            status,
            amount,
            at,
        ])
        .unwrap();
    }
    w.into_inner().unwrap()
}

/// `^[a-z_][a-z0-9_]{0,47}$`
fn follows_the_pattern(s: &str) -> bool {
    let b = s.as_bytes();
    !b.is_empty()
        && b.len() <= 48
        && (b[0].is_ascii_lowercase() || b[0] == b'_')
        && b.iter()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'_')
}

fn name() -> impl Strategy<Value = String> {
    prop_oneof![
        any::<String>(),
        "[a-z_][a-z0-9_]{0,50}",
        "(pg_|information_schema|_)[a-z0-9_]{0,10}",
        "[a-zA-Z0-9_\"; -]{0,60}",
    ]
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn any_bytes_in_any_format_are_read_without_panic(
        bytes in prop::collection::vec(any::<u8>(), 0..2_048),
        put in any::<bool>(),
    ) {
        for format in FORMATS {
            let (sink, _) = decode(format, &bytes, put);
            prop_assert_eq!(sink.silent_refusals, 0);
        }
    }

    #[test]
    fn ndjson_of_row_like_objects_gives_one_record_per_line(
        lines in prop::collection::vec(prop_oneof![4 => row_ish(), 1 => json_value()], 0..12),
        put in any::<bool>(),
        crlf in any::<bool>(),
    ) {
        let eol = if crlf { "\r\n" } else { "\n" };
        let body: String = lines.iter().map(|l| format!("{l}{eol}")).collect();
        let (sink, read) = decode(BodyFormat::Ndjson, body.as_bytes(), put);
        prop_assert!(read);
        let non_blank = lines
            .iter()
            .filter(|l| !l.as_bytes().trim_ascii().is_empty())
            .count() as u64;
        prop_assert_eq!(sink.records, non_blank);
        prop_assert_eq!(sink.silent_refusals, 0);
    }

    #[test]
    fn json_arrays_of_row_like_elements_are_read_without_panic(
        elements in prop::collection::vec(prop_oneof![4 => row_ish(), 1 => json_value()], 0..12),
        put in any::<bool>(),
        cut in any::<prop::sample::Index>(),
    ) {
        let body = format!("[{}]", elements.join(",\n"));
        let (sink, read) = decode(BodyFormat::JsonArray, body.as_bytes(), put);
        prop_assert_eq!(sink.silent_refusals, 0);
        let objects = elements
            .iter()
            .all(|e| serde_json::from_str::<serde_json::Value>(e).is_ok_and(|v| v.is_object()));
        if read && objects {
            prop_assert_eq!(sink.records, elements.len() as u64);
        }
        // Cut anywhere: still no panic, still every refusal explained.
        let cut = cut.index(body.len() + 1);
        let (sink, _) = decode(BodyFormat::JsonArray, &body.as_bytes()[..cut], put);
        prop_assert_eq!(sink.silent_refusals, 0);
    }

    #[test]
    fn csv_with_any_fields_is_read_without_panic(
        header in prop::collection::vec(field_name(), 0..8),
        rows in prop::collection::vec(prop::collection::vec(csv_field(), 0..9), 0..8),
        put in any::<bool>(),
        bom in any::<bool>(),
    ) {
        let mut body = String::new();
        if bom {
            body.push('\u{feff}');
        }
        body.push_str(&header.join(","));
        body.push('\n');
        for row in &rows {
            body.push_str(&row.join(","));
            body.push('\n');
        }
        let (sink, _) = decode(BodyFormat::Csv, body.as_bytes(), put);
        prop_assert_eq!(sink.silent_refusals, 0);
    }

    #[test]
    fn valid_rows_are_accepted_and_read_alike_in_every_format(
        rows in prop::collection::vec(valid_order(), 1..10),
        put in any::<bool>(),
    ) {
        let values = orders_ndjson(&rows);
        let ndjson: String = values.iter().map(|v| format!("{v}\n")).collect();
        let array = serde_json::to_string(&values).unwrap();
        let csv = orders_csv(&rows);
        let mut hashes = Vec::new();
        for (format, body) in [
            (BodyFormat::Ndjson, ndjson.as_bytes()),
            (BodyFormat::JsonArray, array.as_bytes()),
            (BodyFormat::Csv, csv.as_slice()),
        ] {
            let (sink, read) = decode(format, body, put);
            prop_assert!(read, "{:?}", format);
            prop_assert_eq!(sink.errors.count, 0, "{:?}: {:?}", format, sink.errors.listed);
            prop_assert_eq!(sink.good, rows.len() as u64);
            hashes.push(sink.hash.hex());
        }
        prop_assert_eq!(&hashes[0], &hashes[1]);
        prop_assert_eq!(&hashes[0], &hashes[2]);
    }

    #[test]
    fn names_are_accepted_exactly_as_the_contract_says(s in name()) {
        let table = TableName::parse(&s);
        let column = ColumnName::parse(&s);
        let pattern = follows_the_pattern(&s);
        let reserved_table = s.starts_with("pg_") || s == "information_schema";
        prop_assert_eq!(table.is_ok(), pattern && !reserved_table);
        prop_assert_eq!(column.is_ok(), pattern && !s.starts_with('_'));
        if let Ok(t) = &table {
            prop_assert_eq!(t.as_str(), s.as_str());
            prop_assert_eq!(t.quoted(), format!("\"{s}\""));
        }
        for refusal in [table.err(), column.err()].into_iter().flatten() {
            // Quoted back, but never more than a line of it.
            prop_assert!(refusal.to_string().len() < 400, "{}", refusal);
        }
    }

    #[test]
    fn partition_dates_are_accepted_exactly_when_they_are_days_of_years_1_to_9999(
        s in prop_oneof![
            any::<String>(),
            "[0-9]{1,6}-[0-9]{1,2}-[0-9]{1,2}",
            "[0-9]{4}-[0-9]{2}-[0-9]{2}",
        ],
    ) {
        // A daily table's partition value.
        let parsed = idem::http::extract::parse_period(&s, idem::period::Grain::Day);
        let expected = s.len() == 10
            && s.as_bytes()[4] == b'-'
            && s.as_bytes()[7] == b'-'
            && s.bytes().enumerate().all(|(i, b)| i == 4 || i == 7 || b.is_ascii_digit())
            && chrono::NaiveDate::parse_from_str(&s, "%Y-%m-%d").is_ok_and(|d| chrono::Datelike::year(&d) >= 1);
        prop_assert_eq!(parsed.is_ok(), expected, "{:?}", s);
    }
}
