//! One value checked against its column type, and its two encodings: the
//! canonical one (hashed; equal values encode equally) and Postgres's binary
//! COPY format (which the server reads without parsing text).

use std::borrow::Cow;
use std::io::Write;

use chrono::{Datelike, NaiveDate};
use uuid::Uuid;

use super::formats::micros_text;
use super::numeric::{check_decimal, parse_float, write_numeric, write_numeric_canonical};
use super::temporal::{
    check_earliest, parse_date, timestamp_micros, write_date, write_timestamp, Infinity,
    EARLIEST_TIMESTAMP_UNIX_MICROS, PG_EPOCH_DAYS_FROM_CE, PG_EPOCH_UNIX_MICROS,
};
use super::text::{expected, json_str, NUL_REFUSED};
use super::RawField;
use crate::binary_copy::TupleWriter;
use crate::schema::ColumnType;

pub use super::numeric::{
    NUMERIC_MAX_DIGITS_BEFORE_POINT, NUMERIC_MAX_EXPONENT, NUMERIC_MAX_SCALE,
};
pub use super::temporal::parse_timestamp;

/// A checked value. Text borrows from the body where it can.
#[derive(Clone, Debug, PartialEq)]
pub enum Cell<'a> {
    Null,
    Text(Cow<'a, str>),
    Int(i64),
    Float(f64),
    /// A validated decimal literal, as written less a leading `+`
    /// (numeric keeps the scale it was given, so the text is the value).
    Numeric(Cow<'a, str>),
    Bool(bool),
    Date(NaiveDate),
    /// Microseconds since the Unix epoch, UTC.
    Timestamp(i64),
    /// `infinity` or `-infinity` in a date or timestamptz column.
    Infinite(Infinity),
    /// Compact JSON with object keys sorted.
    Json(String),
    Uuid(Uuid),
}

/// The kinds of JSON value a raw value can be, judged by its first byte.
enum Json<'a> {
    Null,
    Bool(bool),
    Number(&'a str),
    Str(Cow<'a, str>),
    Composite(&'a str),
}

fn classify(raw: &str) -> Result<Json<'_>, String> {
    Ok(match raw.as_bytes().first() {
        Some(b'n') => Json::Null,
        Some(b't') => Json::Bool(true),
        Some(b'f') => Json::Bool(false),
        Some(b'"') => Json::Str(json_str(raw)?),
        Some(b'{') | Some(b'[') => Json::Composite(raw),
        _ => Json::Number(raw),
    })
}

/// Checks one raw value against `ty`.
pub fn parse_cell(ty: ColumnType, raw: RawField<'_>) -> Result<Cell<'_>, String> {
    match raw {
        RawField::Text(None) => Ok(Cell::Null),
        RawField::Text(Some(text)) => parse_text(ty, text),
        // Typed as their text is: straight where the column's type takes
        // the value as it is, through the text otherwise.
        RawField::Int(v) => match ty {
            ColumnType::Bigint => Ok(Cell::Int(v)),
            ColumnType::Integer if i32::try_from(v).is_ok() => Ok(Cell::Int(v)),
            _ => parse_text(ty, itoa::Buffer::new().format(v)).map(Cell::into_owned),
        },
        RawField::Micros(v) => match ty {
            ColumnType::Timestamptz => check_earliest(v).map(Cell::Timestamp),
            _ => parse_text(ty, &micros_text(v)?).map(Cell::into_owned),
        },
        RawField::Date(d) => match ty {
            ColumnType::Date => Ok(Cell::Date(d)),
            _ => parse_text(ty, &d.format("%Y-%m-%d").to_string()).map(Cell::into_owned),
        },
        RawField::Json(raw) => {
            let raw = raw.get();
            if ty == ColumnType::Jsonb {
                // In a JSON body a jsonb value is the JSON value itself, null
                // too; SQL NULL is the field left out (as the export writes it).
                return canonical_json(raw);
            }
            match classify(raw)? {
                Json::Null => Ok(Cell::Null),
                Json::Str(Cow::Borrowed(s)) => parse_text(ty, s),
                Json::Str(Cow::Owned(s)) => match ty {
                    ColumnType::Text => text_cell(Cow::Owned(s)),
                    _ => parse_text(ty, &s).map(Cell::into_owned),
                },
                Json::Bool(b) => match ty {
                    ColumnType::Boolean => Ok(Cell::Bool(b)),
                    ColumnType::Text => Ok(Cell::Text(Cow::Borrowed(raw))),
                    _ => Err(expected(ty, raw)),
                },
                Json::Number(n) => match ty {
                    ColumnType::Text => Ok(Cell::Text(Cow::Borrowed(n))),
                    ColumnType::Boolean => Err(expected(ty, n)),
                    _ => parse_text(ty, n),
                },
                Json::Composite(c) => Err(expected(ty, c)),
            }
        }
    }
}

fn text_cell(text: Cow<'_, str>) -> Result<Cell<'_>, String> {
    if text.contains('\0') {
        return Err(NUL_REFUSED.into());
    }
    Ok(Cell::Text(text))
}

fn canonical_json(text: &str) -> Result<Cell<'static>, String> {
    super::json::canonical(text).map(Cell::Json)
}

/// Parses text (a CSV field, or a JSON string) as `ty`.
pub fn parse_text(ty: ColumnType, text: &str) -> Result<Cell<'_>, String> {
    let padded = |b: Option<&u8>| b.is_some_and(u8::is_ascii_whitespace);
    let t = if padded(text.as_bytes().first()) || padded(text.as_bytes().last()) {
        text.trim()
    } else {
        text
    };
    let bad = || expected(ty, text);
    match ty {
        ColumnType::Text => text_cell(Cow::Borrowed(text)),
        ColumnType::Bigint => t.parse::<i64>().map(Cell::Int).map_err(|_| bad()),
        ColumnType::Integer => t
            .parse::<i32>()
            .map(|v| Cell::Int(v.into()))
            .map_err(|_| bad()),
        ColumnType::DoublePrecision => parse_float(t)
            .map(Cell::Float)
            .map_err(|e| e.unwrap_or_else(bad)),
        ColumnType::Numeric => parse_numeric(t).map_err(|e| e.unwrap_or_else(bad)),
        ColumnType::Boolean => match t.to_ascii_lowercase().as_str() {
            "true" | "t" | "1" | "yes" | "y" => Ok(Cell::Bool(true)),
            "false" | "f" | "0" | "no" | "n" => Ok(Cell::Bool(false)),
            _ => Err(bad()),
        },
        // `±infinity` is tried once the common forms failed: no cost to them.
        ColumnType::Date => parse_date(t)
            .map(Cell::Date)
            .or_else(|| Infinity::parse(t).map(Cell::Infinite))
            .ok_or_else(bad),
        ColumnType::Timestamptz => timestamp_micros(t).map(Cell::Timestamp).or_else(|e| {
            Infinity::parse(t)
                .map(Cell::Infinite)
                .ok_or_else(|| e.unwrap_or_else(bad))
        }),
        ColumnType::Jsonb => canonical_json(text),
        ColumnType::Uuid => Uuid::parse_str(t).map(Cell::Uuid).map_err(|_| bad()),
    }
}

/// A decimal literal `[+-]digits[.digits][e[+-]digits]`, or NaN, that
/// Postgres can hold. `Err(None)`: not a decimal; `Err(Some(why))`: a
/// decimal past Postgres's limits.
fn parse_numeric(t: &str) -> Result<Cell<'_>, Option<String>> {
    if t.eq_ignore_ascii_case("nan") {
        return Ok(Cell::Numeric(Cow::Borrowed("NaN")));
    }
    check_decimal(t)?;
    Ok(Cell::Numeric(Cow::Borrowed(
        t.strip_prefix('+').unwrap_or(t),
    )))
}

/// A jsonb JSON `null` in the canonical encoding. Not JSON, so that no
/// other value (a document, a string) can encode alike; SQL NULL keeps
/// `null`, and with it the hashes of rows stored before the two were told apart.
const JSONB_NULL_CANONICAL: &[u8] = b"jsonb:null";

impl Cell<'_> {
    pub fn is_null(&self) -> bool {
        matches!(self, Cell::Null)
    }

    pub fn into_owned(self) -> Cell<'static> {
        match self {
            Cell::Text(t) => Cell::Text(Cow::Owned(t.into_owned())),
            Cell::Numeric(n) => Cell::Numeric(Cow::Owned(n.into_owned())),
            Cell::Null => Cell::Null,
            Cell::Int(v) => Cell::Int(v),
            Cell::Float(v) => Cell::Float(v),
            Cell::Bool(v) => Cell::Bool(v),
            Cell::Date(v) => Cell::Date(v),
            Cell::Timestamp(v) => Cell::Timestamp(v),
            Cell::Infinite(v) => Cell::Infinite(v),
            Cell::Json(v) => Cell::Json(v),
            Cell::Uuid(v) => Cell::Uuid(v),
        }
    }

    /// The canonical encoding: one JSON value.
    pub fn write_canonical(&self, out: &mut Vec<u8>) {
        match self {
            Cell::Null => out.extend_from_slice(b"null"),
            Cell::Text(s) => {
                serde_json::to_writer(&mut *out, s.as_ref()).expect("writing to a Vec")
            }
            Cell::Int(v) => out.extend_from_slice(itoa::Buffer::new().format(*v).as_bytes()),
            Cell::Float(v) if v.is_finite() => {
                let _ = write!(out, "{v}");
            }
            Cell::Float(v) => {
                let _ = write!(
                    out,
                    "\"{}\"",
                    if v.is_nan() {
                        "NaN"
                    } else if *v > 0.0 {
                        "Infinity"
                    } else {
                        "-Infinity"
                    }
                );
            }
            Cell::Numeric(n) => write_numeric_canonical(out, n),
            Cell::Bool(b) => out.extend_from_slice(if *b { b"true" } else { b"false" }),
            Cell::Date(d) => {
                out.push(b'"');
                write_date(out, *d);
                out.push(b'"');
            }
            Cell::Timestamp(micros) => {
                out.push(b'"');
                write_timestamp(out, *micros);
                out.push(b'"');
            }
            Cell::Infinite(infinity) => infinity.write_canonical(out),
            // SQL NULL is `null`: a jsonb null takes a form no JSON value has.
            Cell::Json(j) if j == "null" => out.extend_from_slice(JSONB_NULL_CANONICAL),
            Cell::Json(j) => out.extend_from_slice(j.as_bytes()),
            Cell::Uuid(u) => {
                let _ = write!(out, "\"{}\"", u.hyphenated());
            }
        }
    }

    /// One field of a binary COPY tuple: its length, then its bytes. A value
    /// Postgres cannot hold is refused, with the reason, and nothing is written.
    pub fn write_binary(&self, ty: ColumnType, out: &mut Vec<u8>) -> Result<(), String> {
        let mut w = TupleWriter::new(out);
        match self {
            Cell::Null => w.null(),
            Cell::Text(s) => w.field(Some(s.as_bytes()))?,
            Cell::Int(v) if ty == ColumnType::Integer => {
                let v =
                    i32::try_from(*v).map_err(|_| format!("{v} is out of range for integer"))?;
                w.fixed(&v.to_be_bytes());
            }
            Cell::Int(v) if ty == ColumnType::Numeric => write_numeric(out, &v.to_string())?,
            Cell::Int(v) => w.fixed(&v.to_be_bytes()),
            Cell::Float(v) => w.fixed(&v.to_be_bytes()),
            Cell::Numeric(n) => write_numeric(out, n)?,
            Cell::Bool(b) => w.fixed(&[u8::from(*b)]),
            // Dates come from four-digit years, far inside both chrono's and
            // Postgres's range: the day count cannot overflow.
            Cell::Date(d) => w.fixed(&(d.num_days_from_ce() - PG_EPOCH_DAYS_FROM_CE).to_be_bytes()),
            Cell::Timestamp(micros) => {
                let since_pg_epoch = Some(*micros)
                    .filter(|&m| m >= EARLIEST_TIMESTAMP_UNIX_MICROS)
                    .and_then(|m| m.checked_sub(PG_EPOCH_UNIX_MICROS))
                    .ok_or_else(|| "timestamp is out of Postgres's range".to_string())?;
                w.fixed(&since_pg_epoch.to_be_bytes());
            }
            Cell::Infinite(infinity) => infinity.write_binary(ty, out)?,
            Cell::Json(j) => {
                // jsonb's binary form: a version byte, then the text.
                let body = w.field_of(1 + j.len())?;
                body.push(1);
                body.extend_from_slice(j.as_bytes());
            }
            Cell::Uuid(u) => w.fixed(u.as_bytes()),
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
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
}

#[cfg(test)]
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

#[cfg(test)]
#[path = "cell_typed_tests.rs"]
mod typed_field_tests;
