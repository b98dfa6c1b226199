//! `cell`'s values: parsed, typed, and encoded both ways.

use super::*;
use crate::ingest::numeric::is_displayed_form;
use serde_json::value::RawValue;

fn json(ty: ColumnType, raw: &str) -> Result<Cell<'static>, String> {
    let raw: Box<RawValue> = serde_json::from_str(raw).unwrap();
    parse_cell(ty, RawField::Json(&raw)).map(Cell::into_owned)
}

fn canonical(cell: &Cell) -> String {
    let mut out = Vec::new();
    cell.write_canonical(&mut out);
    String::from_utf8(out).unwrap()
}

#[test]
fn numbers_keep_their_exact_text() {
    assert_eq!(
        canonical(&json(ColumnType::Numeric, "1234.50").unwrap()),
        "1234.50"
    );
    assert_eq!(
        canonical(&json(ColumnType::Numeric, "\"+7\"").unwrap()),
        "7"
    );
    assert!(json(ColumnType::Numeric, "\"1.2.3\"").is_err());
    assert_eq!(json(ColumnType::Bigint, "42"), Ok(Cell::Int(42)));
    assert!(json(ColumnType::Bigint, "4.2").is_err());
    assert!(json(ColumnType::Integer, "3000000000").is_err());
    assert_eq!(
        canonical(&json(ColumnType::DoublePrecision, "0.1").unwrap()),
        "0.1"
    );
}

#[test]
fn numerics_encode_as_postgres_displays_them() {
    let shown = |text: &str| canonical(&numeric(text).unwrap());
    for same in ["100", "1e2", "1.0E+2", "+100", "00100", "0.1e3", "10.0e1"] {
        assert_eq!(shown(same), "100", "{same}");
    }
    assert_eq!(shown("1000e-1"), "100.0");
    assert_eq!(shown("1.50"), "1.50");
    assert_eq!(shown("1.5"), "1.5");
    assert_eq!(shown("-0"), "0");
    assert_eq!(shown("-0.00"), "0.00");
    assert_eq!(shown("0e1073741822"), "0");
    assert_eq!(shown("0e-3"), "0.000");
    assert_eq!(shown("-12.5e-2"), "-0.125");
    assert_eq!(shown("1.5e-3"), "0.0015");
    assert_eq!(shown(".5"), "0.5");
    assert_eq!(shown("5."), "5");
    assert_eq!(shown("123456789.000100"), "123456789.000100");
    assert_eq!(shown("1.2345e2"), "123.45");
    assert_eq!(shown("NaN"), "NaN");
    assert_eq!(shown("-0.5"), "-0.5");
    assert_eq!(shown("0"), "0");
    assert_eq!(shown("-0"), "0");
    assert_eq!(shown("007.10"), "7.10");
    assert!(!is_displayed_form("5.") && !is_displayed_form(".5") && !is_displayed_form("-0.0"));
    assert!(is_displayed_form("-10.50") && is_displayed_form("0.001"));
    assert_eq!(shown("1e5"), "100000");
    assert_eq!(shown("1e30"), format!("1{}", "0".repeat(30)));
    assert_eq!(shown("0.1e41"), "1e40");
    // Far longer plain than written: scientific, still one text per value.
    assert_eq!(shown("1e131071"), "1e131071");
    assert_eq!(shown("100.0e131069"), "1e131071");
    assert_eq!(shown("-1.50e-100"), "-1.50e-100");
    assert_eq!(shown("-0.0150e-98"), "-1.50e-100");
    assert_eq!(shown("0e-16383"), "0e-16383");
    assert_eq!(shown("-0.0e-16382"), "0e-16383");
}

#[test]
fn timestamps_normalize_to_utc_microseconds() {
    let a = json(ColumnType::Timestamptz, "\"2026-10-12T02:00:00+02:00\"").unwrap();
    let b = json(ColumnType::Timestamptz, "\"2026-10-12 00:00:00Z\"").unwrap();
    let c = json(ColumnType::Timestamptz, "\"2026-10-12 01:00:00+01\"").unwrap();
    assert_eq!(a, b);
    assert_eq!(a, c);
    assert_eq!(canonical(&a), "\"2026-10-12T00:00:00.000000Z\"");
    // Every form Postgres reads: seconds and fraction optional, `T` or
    // space, `Z`, `+hh`, `+hhmm`, `+hh:mm`; and what GET writes back
    // (`row_to_json`, and COPY's CSV under TimeZone=UTC).
    for same in [
        "2026-10-12T00:00Z",
        "2026-10-12 00:00",
        "2026-10-12 02:00+02",
        "2026-10-12T02:00+0200",
        "2026-10-12T02:00+02:00",
        "2026-10-12 00:00:00+0000",
        "2026-10-11 19:00:00.000-05",
        "2026-10-12T00:00:00+00:00",
        "2026-10-12 00:00:00+00",
        "2026-10-12T05:30:00.000000+05:30",
    ] {
        let cell = json(ColumnType::Timestamptz, &format!("{same:?}"));
        assert_eq!(cell.as_ref(), Ok(&a), "{same}");
        assert_eq!(
            parse_text(ColumnType::Timestamptz, same).as_ref(),
            Ok(&a),
            "{same}"
        );
    }
    let d = json(ColumnType::Timestamptz, "\"1969-12-31T23:59:59.5Z\"").unwrap();
    assert_eq!(canonical(&d), "\"1969-12-31T23:59:59.500000Z\"");
}

#[test]
fn a_double_is_refused_exactly_where_postgres_finds_it_out_of_range() {
    let float = |t: &'static str| parse_text(ColumnType::DoublePrecision, t);
    for out in [
        "1e-400",
        "4.9e-325",
        "-1e-400",
        "2e-324",
        "2.4703282292062327e-324",
        "1e400",
        "1.7976931348623159e308",
    ] {
        let err = float(out).unwrap_err();
        assert!(
            err.contains("out of range for double precision"),
            "{out}: {err}"
        );
    }
    // Subnormals round as strtod rounds them; zero is zero at any exponent.
    assert_eq!(float("5e-324"), Ok(Cell::Float(5e-324)));
    assert_eq!(float("2.4703282292062328e-324"), Ok(Cell::Float(5e-324)));
    assert_eq!(float("1.7976931348623158e308"), Ok(Cell::Float(f64::MAX)));
    assert_eq!(float("0e-400"), Ok(Cell::Float(0.0)));
    assert_eq!(float("-0.000e-999"), Ok(Cell::Float(0.0)));
    assert!(float("1e-4x")
        .unwrap_err()
        .starts_with("expected double precision"));
}

#[test]
fn a_jsonb_null_is_a_value_that_encodes_apart_from_sql_null() {
    let json_null = json(ColumnType::Jsonb, "null").unwrap();
    assert_eq!(json_null, Cell::Json("null".into()));
    assert_eq!(parse_text(ColumnType::Jsonb, "null"), Ok(json_null.clone()));
    assert_eq!(
        parse_text(ColumnType::Jsonb, " null "),
        Ok(json_null.clone())
    );
    assert_eq!(canonical(&Cell::Null), "null");
    assert_ne!(canonical(&json_null), canonical(&Cell::Null));
    // A null inside a document is the document's.
    assert_eq!(
        canonical(&json(ColumnType::Jsonb, "[null]").unwrap()),
        "[null]"
    );
}

#[test]
fn json_objects_are_canonical_regardless_of_key_order() {
    assert_eq!(
        json(ColumnType::Jsonb, r#"{"b":1,"a":[true,null]}"#),
        json(ColumnType::Jsonb, r#"{ "a" : [true, null], "b" : 1 }"#)
    );
}

#[test]
fn wrong_types_are_refused_with_the_value() {
    let err = json(ColumnType::Bigint, "\"abc\"").unwrap_err();
    assert!(err.contains("bigint") && err.contains("abc"), "{err}");
    assert!(json(ColumnType::Date, "\"2026-13-01\"").is_err());
    assert!(json(ColumnType::Boolean, "1").is_err());
    assert!(json(ColumnType::Text, "\"a\\u0000b\"").is_err());
}

/// The numeric field's words after its length: ndigits (u16), weight
/// (i16), sign (u16), dscale (u16), then the base-10000 digits (u16).
fn numeric_binary(text: &str) -> Vec<i32> {
    let mut out = Vec::new();
    write_numeric(&mut out, text).unwrap();
    let length = i32::from_be_bytes(out[..4].try_into().unwrap());
    assert_eq!(usize::try_from(length).unwrap(), out.len() - 4);
    out[4..]
        .chunks(2)
        .enumerate()
        .map(|(i, c)| match i {
            1 => i32::from(i16::from_be_bytes([c[0], c[1]])),
            _ => i32::from(u16::from_be_bytes([c[0], c[1]])),
        })
        .collect()
}

#[test]
fn numeric_binary_matches_postgres_layout() {
    // [ndigits, weight, sign, dscale, digits...]
    assert_eq!(numeric_binary("1234.50"), [2, 0, 0, 2, 1234, 5000]);
    assert_eq!(numeric_binary("-12345.6"), [3, 1, 0x4000, 1, 1, 2345, 6000]);
    assert_eq!(numeric_binary("0.0015"), [1, -1, 0, 4, 15]);
    assert_eq!(numeric_binary("1e3"), [1, 0, 0, 0, 1000]);
    assert_eq!(numeric_binary("10000"), [1, 1, 0, 0, 1]);
    assert_eq!(numeric_binary("0.00"), [0, 0, 0, 2]);
    assert_eq!(numeric_binary("NaN"), [0, 0, 0xC000, 0]);
}

fn numeric(text: &str) -> Result<Cell<'static>, String> {
    parse_text(ColumnType::Numeric, text).map(Cell::into_owned)
}

#[test]
fn numerics_at_postgres_limits_are_held_and_past_them_refused() {
    let digits = |n: usize| format!("1{}", "0".repeat(n - 1));
    // 32768 base-10000 digits before the point (weight 32767) and 4096
    // after: more digits than an int16 counts, so the count is a uint16.
    let widest = numeric_binary(&format!("{}.{}", "9".repeat(131_072), "9".repeat(16_383)));
    assert_eq!(widest[..4], [36_864, 32_767, 0, 16_383]);
    assert_eq!(widest[4..], [vec![9999; 36_863], vec![9990]].concat());
    let err = numeric(&digits(131_073)).unwrap_err();
    assert!(
        err.contains("131073 digits before the point") && err.contains("at most 131072"),
        "{err}"
    );
    // Leading zeros are not digits of the value; an exponent moves the point.
    assert!(numeric(&format!("000{}", digits(131_072))).is_ok());
    assert!(numeric("1e131071").is_ok());
    assert!(numeric("0.001e131074").is_ok());
    assert!(numeric("1e131072").is_err());
    assert!(numeric("-10e131071").is_err());

    let smallest = format!("0.{}1", "0".repeat(16_382));
    assert_eq!(numeric_binary(&smallest)[..4], [1, -4096, 0, 16_383]);
    let err = numeric(&format!("0.{}1", "0".repeat(16_383))).unwrap_err();
    assert!(
        err.contains("16384 digits after the point") && err.contains("at most 16383"),
        "{err}"
    );
    // Trailing zeros count: they are the display scale.
    assert!(numeric(&format!("1.{}", "0".repeat(16_383))).is_ok());
    assert!(numeric(&format!("1.{}", "0".repeat(16_384))).is_err());
    assert!(numeric("1e-16383").is_ok());
    assert!(numeric("1e-16384").is_err());
    assert!(numeric("1.000e-16380").is_ok());
    assert!(numeric("1.000e-16381").is_err());

    // A zero has no digits before the point, however large its exponent,
    // up to the exponents Postgres's parser takes at all.
    assert!(numeric("0e131073").is_ok());
    assert!(numeric("0e1073741822").is_ok());
    assert!(numeric("0e1073741823").is_err());
    assert!(numeric("0e-16384").is_err());
    assert!(numeric("1e99999999999999999999999").is_err());
    assert!(numeric("1e-00000000000000000000000000003").is_ok());
}

#[test]
fn a_numeric_past_the_limits_is_refused_by_the_writer_too() {
    let mut out = Vec::new();
    assert!(write_numeric(&mut out, &format!("1{}", "0".repeat(131_072))).is_err());
    assert!(write_numeric(&mut out, "1e-16384").is_err());
    assert!(write_numeric(&mut out, "lots").is_err());
    assert!(out.is_empty());
}

fn micros(text: &str) -> i64 {
    match json(ColumnType::Timestamptz, &format!("{text:?}")) {
        Ok(Cell::Timestamp(m)) => m,
        other => panic!("{text}: {other:?}"),
    }
}

#[test]
fn sub_microsecond_fractions_round_as_postgres_rounds_them() {
    let base = micros("2026-10-12T00:00:00Z");
    // Ties go to the even microsecond, as Postgres's rint() does.
    assert_eq!(micros("2026-10-12T00:00:00.0000005Z") - base, 0);
    assert_eq!(micros("2026-10-12T00:00:00.0000015Z") - base, 2);
    assert_eq!(micros("2026-10-12T00:00:00.0000025Z") - base, 2);
    assert_eq!(micros("2026-10-12T00:00:00.00000251Z") - base, 3);
    // The fraction is read as a double: 0.1234565 is just below the tie.
    assert_eq!(micros("2026-10-12T00:00:00.1234565Z") - base, 123_456);
    // Rounding up may reach the next second, and the next year.
    assert_eq!(
        micros("9999-12-31T23:59:59.9999999Z"),
        micros("+10000-01-01 00:00:00Z")
    );
    assert_eq!(
        micros("2026-10-12T23:59:60.5Z"),
        micros("2026-10-13T00:00:00.5Z")
    );
}

mod infinity_tests {
    use super::{parse_text, Cell};
    use crate::schema::ColumnType::{self, Date, Timestamptz};

    fn canonical(cell: &Cell) -> String {
        let mut out = Vec::new();
        cell.write_canonical(&mut out);
        String::from_utf8(out).unwrap()
    }

    fn binary(ty: ColumnType, text: &str) -> Vec<u8> {
        let mut out = Vec::new();
        parse_text(ty, text)
            .unwrap()
            .write_binary(ty, &mut out)
            .unwrap();
        out
    }

    #[test]
    fn infinity_is_taken_in_date_and_timestamptz_columns_as_postgres_writes_it() {
        for ty in [Date, Timestamptz] {
            for (text, form) in [
                ("infinity", "\"infinity\""),
                ("Infinity", "\"infinity\""),
                (" INFINITY ", "\"infinity\""),
                ("-infinity", "\"-infinity\""),
                ("-Infinity", "\"-infinity\""),
            ] {
                let cell = parse_text(ty, text);
                assert_eq!(cell.as_ref().map(canonical), Ok(form.to_string()), "{text}");
            }
            // Postgres reads neither.
            assert!(parse_text(ty, "+infinity").is_err());
            assert!(parse_text(ty, "inf").is_err());
        }
        // As Postgres holds them: the largest and smallest day and microsecond counts.
        assert_eq!(
            binary(Date, "infinity"),
            [0, 0, 0, 4, 0x7f, 0xff, 0xff, 0xff]
        );
        assert_eq!(binary(Date, "-infinity"), [0, 0, 0, 4, 0x80, 0, 0, 0]);
        let micros = |v: i64| [&[0, 0, 0, 8][..], &v.to_be_bytes()].concat();
        assert_eq!(binary(Timestamptz, "infinity"), micros(i64::MAX));
        assert_eq!(binary(Timestamptz, "-infinity"), micros(i64::MIN));
    }

    #[test]
    fn a_timestamp_before_year_1_is_refused_as_a_date_is() {
        for early in [
            "0000-12-31T00:00:00Z",
            "0001-01-01T00:00:00+01:00",
            "0001-01-01 00:59:59.999999+01",
            "-4713-11-24 00:00:00Z",
        ] {
            let err = parse_text(Timestamptz, early).unwrap_err();
            assert!(err.contains("before 0001-01-01"), "{early}: {err}");
        }
        for first in ["0001-01-01T00:00:00Z", "0001-01-01 01:00+01", "0001-01-01"] {
            assert_eq!(
                parse_text(Timestamptz, first).as_ref().map(canonical),
                Ok("\"0001-01-01T00:00:00.000000Z\"".to_string()),
                "{first}"
            );
        }
    }
}
