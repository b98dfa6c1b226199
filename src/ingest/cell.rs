//! One value checked against its column type, and its two encodings: the
//! canonical one (hashed; equal values encode equally) and Postgres's binary
//! COPY format (which the server reads without parsing text).

use std::borrow::Cow;
use std::io::Write;

use chrono::{
    DateTime, Datelike, DurationRound, NaiveDate, NaiveDateTime, TimeDelta, Timelike, Utc,
};
use uuid::Uuid;

use super::RawField;
use crate::schema::ColumnType;

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
        Some(b'"') => {
            let inner = &raw[1..raw.len() - 1];
            if inner.contains('\\') {
                Json::Str(Cow::Owned(
                    serde_json::from_str::<String>(raw).map_err(|e| e.to_string())?,
                ))
            } else {
                Json::Str(Cow::Borrowed(inner))
            }
        }
        Some(b'{') | Some(b'[') => Json::Composite(raw),
        _ => Json::Number(raw),
    })
}

fn snippet(s: &str) -> String {
    let mut out: String = s.chars().take(40).collect();
    if out.len() < s.len() {
        out.push('…');
    }
    format!("{out:?}")
}

fn expected(ty: ColumnType, got: &str) -> String {
    format!("expected {}, got {}", ty.sql_name(), snippet(got))
}

const NUL_REFUSED: &str = "contains a NUL character (\\u0000), which Postgres cannot store";

/// Checks one raw value against `ty`.
pub fn parse_cell(ty: ColumnType, raw: RawField<'_>) -> Result<Cell<'_>, String> {
    match raw {
        RawField::Text(None) => Ok(Cell::Null),
        RawField::Text(Some(text)) => parse_text(ty, text),
        RawField::Json(raw) => {
            let raw = raw.get();
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
                    ColumnType::Jsonb => Ok(Cell::Json(raw.to_string())),
                    _ => Err(expected(ty, raw)),
                },
                Json::Number(n) => match ty {
                    ColumnType::Text => Ok(Cell::Text(Cow::Borrowed(n))),
                    ColumnType::Boolean => Err(expected(ty, n)),
                    ColumnType::Jsonb => canonical_json(n),
                    _ => parse_text(ty, n),
                },
                Json::Composite(c) => match ty {
                    ColumnType::Jsonb => canonical_json(c),
                    _ => Err(expected(ty, c)),
                },
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
    let value: serde_json::Value =
        serde_json::from_str(text).map_err(|e| format!("invalid JSON: {e}"))?;
    // serde_json's map is ordered by key, so equal documents print equally.
    let canonical = value.to_string();
    if canonical.contains("\\u0000") {
        return Err(NUL_REFUSED.into());
    }
    Ok(Cell::Json(canonical))
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
        ColumnType::DoublePrecision => parse_float(t).map(Cell::Float).ok_or_else(bad),
        ColumnType::Numeric => parse_numeric(t).ok_or_else(bad),
        ColumnType::Boolean => match t.to_ascii_lowercase().as_str() {
            "true" | "t" | "1" | "yes" | "y" => Ok(Cell::Bool(true)),
            "false" | "f" | "0" | "no" | "n" => Ok(Cell::Bool(false)),
            _ => Err(bad()),
        },
        ColumnType::Date => parse_date(t).map(Cell::Date).ok_or_else(bad),
        ColumnType::Timestamptz => parse_timestamp(t).map(Cell::Timestamp).ok_or_else(bad),
        ColumnType::Jsonb => canonical_json(text),
        ColumnType::Uuid => Uuid::parse_str(t).map(Cell::Uuid).map_err(|_| bad()),
    }
}

fn parse_float(t: &str) -> Option<f64> {
    match t.to_ascii_lowercase().as_str() {
        "nan" => Some(f64::NAN),
        "infinity" | "inf" | "+infinity" => Some(f64::INFINITY),
        "-infinity" | "-inf" => Some(f64::NEG_INFINITY),
        _ if t
            .bytes()
            .all(|b| b.is_ascii_digit() || b"+-.eE".contains(&b)) =>
        {
            t.parse::<f64>().ok().filter(|v| v.is_finite())
        }
        _ => None,
    }
}

/// A decimal literal `[+-]digits[.digits][e[+-]digits]`, or NaN.
fn parse_numeric(t: &str) -> Option<Cell<'_>> {
    if t.eq_ignore_ascii_case("nan") {
        return Some(Cell::Numeric(Cow::Borrowed("NaN")));
    }
    DecimalParts::parse(t)?;
    Some(Cell::Numeric(Cow::Borrowed(
        t.strip_prefix('+').unwrap_or(t),
    )))
}

/// The pieces of a decimal literal.
struct DecimalParts<'a> {
    negative: bool,
    int: &'a str,
    frac: &'a str,
    exponent: i32,
}

impl<'a> DecimalParts<'a> {
    fn parse(t: &'a str) -> Option<Self> {
        let negative = t.starts_with('-');
        let body = t.strip_prefix(['+', '-']).unwrap_or(t);
        let (mantissa, exponent) = match body.find(['e', 'E']) {
            Some(i) => (&body[..i], Some(&body[i + 1..])),
            None => (body, None),
        };
        let (int, frac) = mantissa.split_once('.').unwrap_or((mantissa, ""));
        let digits = |s: &str| s.bytes().all(|b| b.is_ascii_digit());
        if (int.is_empty() && frac.is_empty()) || !digits(int) || !digits(frac) {
            return None;
        }
        let exponent = match exponent {
            None => 0,
            Some(e) => {
                let magnitude = e.strip_prefix(['+', '-']).unwrap_or(e);
                if magnitude.is_empty() || magnitude.len() > 4 || !digits(magnitude) {
                    return None;
                }
                e.parse().ok()?
            }
        };
        Some(DecimalParts {
            negative,
            int,
            frac,
            exponent,
        })
    }
}

/// `YYYY-MM-DD`, parsed by hand: every row of a partition carries one.
fn parse_date(t: &str) -> Option<NaiveDate> {
    let b = t.as_bytes();
    if b.len() != 10 || b[4] != b'-' || b[7] != b'-' {
        return None;
    }
    let num = |r: std::ops::Range<usize>| {
        b[r].iter().try_fold(0u32, |acc, &d| {
            d.is_ascii_digit().then(|| acc * 10 + (d - b'0') as u32)
        })
    };
    NaiveDate::from_ymd_opt(num(0..4)? as i32, num(5..7)?, num(8..10)?)
}

/// RFC 3339 (`T` or space between date and time; `Z`, `+hh:mm`, `+hh`);
/// without an offset the time is taken as UTC. Rounded to microseconds,
/// Postgres's precision, so the canonical form is what reads back.
pub fn parse_timestamp(t: &str) -> Option<i64> {
    let ts = DateTime::parse_from_rfc3339(t)
        .ok()
        .or_else(|| {
            // Postgres's own output (`2026-10-12 01:00:00+00`) and kin.
            ["%Y-%m-%d %H:%M:%S%.f%#z", "%Y-%m-%dT%H:%M:%S%.f%#z"]
                .iter()
                .find_map(|f| DateTime::parse_from_str(t, f).ok())
        })
        .map(|d| d.with_timezone(&Utc))
        .or_else(|| {
            ["%Y-%m-%dT%H:%M:%S%.f", "%Y-%m-%d %H:%M:%S%.f"]
                .iter()
                .find_map(|f| NaiveDateTime::parse_from_str(t, f).ok())
                .map(|n| n.and_utc())
        })?;
    Some(
        ts.duration_round(TimeDelta::microseconds(1))
            .ok()?
            .timestamp_micros(),
    )
}

fn push_2(out: &mut Vec<u8>, v: u32) {
    out.push(b'0' + (v / 10) as u8);
    out.push(b'0' + (v % 10) as u8);
}

fn write_date(out: &mut Vec<u8>, d: NaiveDate) {
    let year = d.year();
    if (0..=9999).contains(&year) {
        push_2(out, year as u32 / 100);
        push_2(out, year as u32 % 100);
    } else {
        let _ = write!(out, "{year}");
    }
    out.push(b'-');
    push_2(out, d.month());
    out.push(b'-');
    push_2(out, d.day());
}

/// `2026-10-12T01:02:03.000000Z`, written by hand: this runs for every
/// timestamp of every row, and chrono's formatter is slow.
fn write_timestamp(out: &mut Vec<u8>, micros: i64) {
    let Some(ts) = DateTime::from_timestamp_micros(micros) else {
        let _ = write!(out, "{micros}");
        return;
    };
    write_date(out, ts.date_naive());
    out.push(b'T');
    push_2(out, ts.hour());
    out.push(b':');
    push_2(out, ts.minute());
    out.push(b':');
    push_2(out, ts.second());
    out.push(b'.');
    let fraction = micros.rem_euclid(1_000_000) as u32;
    push_2(out, fraction / 10_000);
    push_2(out, fraction / 100 % 100);
    push_2(out, fraction % 100);
    out.push(b'Z');
}

/// Days from 0001-01-01 to 2000-01-01, Postgres's date epoch.
const PG_EPOCH_DAYS_FROM_CE: i32 = 730_120;
/// Microseconds from the Unix epoch to 2000-01-01, Postgres's timestamp epoch.
const PG_EPOCH_UNIX_MICROS: i64 = 946_684_800_000_000;

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
            Cell::Numeric(n) => out.extend_from_slice(n.as_bytes()),
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
            Cell::Json(j) => out.extend_from_slice(j.as_bytes()),
            Cell::Uuid(u) => {
                let _ = write!(out, "\"{}\"", u.hyphenated());
            }
        }
    }

    /// One field of a binary COPY tuple: its length, then its bytes.
    pub fn write_binary(&self, ty: ColumnType, out: &mut Vec<u8>) {
        match self {
            Cell::Null => out.extend_from_slice(&(-1i32).to_be_bytes()),
            Cell::Text(s) => write_field(out, s.as_bytes()),
            Cell::Int(v) if ty == ColumnType::Integer => {
                write_field(out, &(*v as i32).to_be_bytes())
            }
            Cell::Int(v) if ty == ColumnType::Numeric => write_numeric(out, &v.to_string()),
            Cell::Int(v) => write_field(out, &v.to_be_bytes()),
            Cell::Float(v) => write_field(out, &v.to_be_bytes()),
            Cell::Numeric(n) => write_numeric(out, n),
            Cell::Bool(b) => write_field(out, &[*b as u8]),
            Cell::Date(d) => write_field(
                out,
                &(d.num_days_from_ce() - PG_EPOCH_DAYS_FROM_CE).to_be_bytes(),
            ),
            Cell::Timestamp(micros) => {
                write_field(out, &(micros - PG_EPOCH_UNIX_MICROS).to_be_bytes())
            }
            Cell::Json(j) => {
                // jsonb's binary form: a version byte, then the text.
                out.extend_from_slice(&(j.len() as i32 + 1).to_be_bytes());
                out.push(1);
                out.extend_from_slice(j.as_bytes());
            }
            Cell::Uuid(u) => write_field(out, u.as_bytes()),
        }
    }
}

pub fn write_field(out: &mut Vec<u8>, bytes: &[u8]) {
    out.extend_from_slice(&(bytes.len() as i32).to_be_bytes());
    out.extend_from_slice(bytes);
}

/// Postgres's binary numeric: base-10000 digits with a weight (the power of
/// 10000 of the first digit), a sign and the display scale.
fn write_numeric(out: &mut Vec<u8>, text: &str) {
    const POSITIVE: u16 = 0x0000;
    const NEGATIVE: u16 = 0x4000;
    const NAN: u16 = 0xC000;
    let header = |out: &mut Vec<u8>, ndigits: usize, weight: i32, sign: u16, dscale: i32| {
        out.extend_from_slice(&((8 + 2 * ndigits) as i32).to_be_bytes());
        out.extend_from_slice(&(ndigits as i16).to_be_bytes());
        out.extend_from_slice(&(weight as i16).to_be_bytes());
        out.extend_from_slice(&sign.to_be_bytes());
        out.extend_from_slice(&(dscale as i16).to_be_bytes());
    };
    let Some(parts) = DecimalParts::parse(text) else {
        return header(out, 0, 0, NAN, 0);
    };
    let dscale = (parts.frac.len() as i32 - parts.exponent).max(0);
    // All significant digits, and how many of them stand before the point.
    let digits: Vec<u8> = parts
        .int
        .bytes()
        .chain(parts.frac.bytes())
        .map(|b| b - b'0')
        .collect();
    let mut point = parts.int.len() as i32 + parts.exponent;
    let leading = digits.iter().take_while(|&&d| d == 0).count();
    point -= leading as i32;
    let digits = &digits[leading..];
    let trailing = digits.iter().rev().take_while(|&&d| d == 0).count();
    let digits = &digits[..digits.len() - trailing];
    if digits.is_empty() {
        return header(out, 0, 0, POSITIVE, dscale);
    }
    // The first digit's power of ten is point - 1; groups of four are
    // aligned on powers that are multiples of four.
    let first_power = point - 1;
    let weight = first_power.div_euclid(4);
    let pad = (3 - first_power.rem_euclid(4)) as usize;
    let mut padded = vec![0u8; pad];
    padded.extend_from_slice(digits);
    while !padded.len().is_multiple_of(4) {
        padded.push(0);
    }
    let groups = padded.len() / 4;
    header(
        out,
        groups,
        weight,
        if parts.negative { NEGATIVE } else { POSITIVE },
        dscale,
    );
    for g in padded.chunks(4) {
        let v = g[0] as i16 * 1000 + g[1] as i16 * 100 + g[2] as i16 * 10 + g[3] as i16;
        out.extend_from_slice(&v.to_be_bytes());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
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
    fn timestamps_normalize_to_utc_microseconds() {
        let a = json(ColumnType::Timestamptz, "\"2026-10-12T02:00:00+02:00\"").unwrap();
        let b = json(ColumnType::Timestamptz, "\"2026-10-12 00:00:00Z\"").unwrap();
        let c = json(ColumnType::Timestamptz, "\"2026-10-12 01:00:00+01\"").unwrap();
        assert_eq!(a, b);
        assert_eq!(a, c);
        assert_eq!(canonical(&a), "\"2026-10-12T00:00:00.000000Z\"");
        let d = json(ColumnType::Timestamptz, "\"1969-12-31T23:59:59.5Z\"").unwrap();
        assert_eq!(canonical(&d), "\"1969-12-31T23:59:59.500000Z\"");
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

    fn numeric_binary(text: &str) -> Vec<i16> {
        let mut out = Vec::new();
        write_numeric(&mut out, text);
        assert_eq!(
            i32::from_be_bytes(out[..4].try_into().unwrap()) as usize,
            out.len() - 4
        );
        out[4..]
            .chunks(2)
            .map(|c| i16::from_be_bytes([c[0], c[1]]))
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
        assert_eq!(numeric_binary("NaN"), [0, 0, 0xC000u16 as i16, 0]);
    }
}
