use super::*;
use crate::ids::LoadId;
use crate::ingest::formats::parse_object;
use crate::schema::TableDeclaration;

fn orders() -> TableDef {
    serde_json::from_str::<TableDeclaration>(
        r#"{"columns":{"order_id":"bigint","ds":"date","status":"text","updated_at":"timestamptz"},
            "primary_key":["order_id"],"cursor":"updated_at"}"#,
    )
    .unwrap()
    .into_def(crate::names::TableName::parse("orders").unwrap())
    .unwrap()
}

fn encode(def: &TableDef, line: &str) -> (Option<EncodedRow>, ErrorLog, Vec<u8>) {
    let ds = chrono::NaiveDate::from_ymd_opt(2026, 10, 12).map(Period::day);
    let options = EncodeOptions {
        allowed: None,
        ds,
        row_id_scope: None,
        tombstones: false,
        presence: false,
    };
    let mut enc = RowEncoder::new(def, options, LoadId::NONE);
    let fields = parse_object(line.as_bytes()).unwrap();
    let mut errors = ErrorLog::default();
    let mut out = Vec::new();
    let row = enc.encode(
        &RawRecord {
            line: 7,
            record: 7,
            row_group: None,
            fields: &fields,
        },
        &mut out,
        &mut errors,
    );
    (row, errors, out)
}

#[test]
fn a_row_without_its_partition_value_takes_the_partition() {
    let def = orders();
    let (a, _, copy) = encode(&def, r#"{"order_id":1,"status":"paid"}"#);
    let (b, _, _) = encode(&def, r#"{"status":"paid","ds":"2026-10-12","order_id":1}"#);
    // field count 7, then order_id as 8 bytes, then ds as 4 bytes
    assert_eq!(copy[..2], [0, 7]);
    assert_eq!(
        copy[2..18],
        [0, 0, 0, 8, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 4]
    );
    assert_eq!(a.unwrap().row_hash, b.unwrap().row_hash);
}

#[test]
fn the_row_id_depends_on_the_key_only() {
    let def = orders();
    let (a, _, _) = encode(&def, r#"{"order_id":1,"status":"paid"}"#);
    let (b, _, _) = encode(&def, r#"{"order_id":1,"status":"shipped"}"#);
    let (c, _, _) = encode(&def, r#"{"order_id":2,"status":"paid"}"#);
    assert_eq!(a.unwrap().row_id, b.unwrap().row_id);
    assert_ne!(a.unwrap().row_hash, b.unwrap().row_hash);
    assert_ne!(a.unwrap().row_id, c.unwrap().row_id);
}

#[test]
fn bad_rows_name_line_and_column() {
    let def = orders();
    let (row, errors, copy) = encode(&def, r#"{"order_id":"x","ds":"2026-10-13","colour":"red"}"#);
    assert!(row.is_none());
    assert!(copy.is_empty());
    assert_eq!((errors.count, errors.problems), (1, 3));
    let row = &errors.listed[0];
    let columns: Vec<_> = row.columns.iter().map(|c| c.column.as_str()).collect();
    assert_eq!(columns, ["order_id", "colour", "ds"]);
    assert_eq!(row.line, 7);
    assert_eq!(row.column.as_deref(), Some("order_id"));
    let (row, errors, _) = encode(&def, r#"{"status":"paid"}"#);
    assert!(row.is_none());
    assert_eq!(errors.listed[0].column.as_deref(), Some("order_id"));
}

#[test]
fn a_value_postgres_cannot_hold_is_a_bad_row_and_writes_nothing() {
    let def = serde_json::from_str::<TableDeclaration>(
        r#"{"columns":{"id":"bigint","ds":"date","amount":"numeric"}}"#,
    )
    .unwrap()
    .into_def(crate::names::TableName::parse("amounts").unwrap())
    .unwrap();
    let (row, errors, copy) = encode(&def, r#"{"id":1,"amount":1e131072}"#);
    assert!(row.is_none());
    assert!(copy.is_empty());
    assert_eq!(errors.listed[0].line, 7);
    assert_eq!(errors.listed[0].column.as_deref(), Some("amount"));
    assert!(
        errors.listed[0].message.contains("at most 131072"),
        "{}",
        errors.listed[0].message
    );
}

#[test]
fn a_tuple_postgres_cannot_count_is_refused_and_leaves_no_bytes() {
    let mut def = orders();
    def.columns
        .extend((0..40_000).map(|i| crate::schema::Column {
            name: crate::names::ColumnName::parse(&format!("c{i}")).unwrap(),
            ty: ColumnType::Text,
            nullable: true,
        }));
    let (row, errors, copy) = encode(&def, r#"{"order_id":1,"c0":"x"}"#);
    assert!(row.is_none());
    assert!(copy.is_empty());
    assert_eq!(errors.listed[0].column, None);
    assert!(errors.listed[0].message.contains("at most 32767"));
}
