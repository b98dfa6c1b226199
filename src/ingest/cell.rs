//! One value checked against its column type, and its two encodings: the
//! canonical one (hashed; equal values encode equally) and Postgres's COPY text.

use std::borrow::Cow;
use std::io::Write;

use chrono::{DateTime, DurationRound, NaiveDate, NaiveDateTime, TimeDelta, Utc};
use uuid::Uuid;

use super::RawField;
use crate::schema::ColumnType;

#[derive(Clone, Debug, PartialEq)]
pub enum Cell {
    Null,
    Text(String),
    /// An integer, numeric or float in its normalized decimal text.
    Number(String),
    Bool(bool),
    Date(NaiveDate),
    Timestamp(DateTime<Utc>),
    /// Compact JSON with object keys sorted.
    Json(String),
    Uuid(Uuid),
}

/// The kinds of JSON scalar a raw value can be, judged by its first byte.
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

/// Checks one raw value against `ty`.
pub fn parse_cell(ty: ColumnType, raw: RawField<'_>) -> Result<Cell, String> {
    match raw {
        RawField::Text(None) => Ok(Cell::Null),
        RawField::Text(Some(text)) => parse_text(ty, text),
        RawField::Json(raw) => {
            let raw = raw.get();
            match classify(raw)? {
                Json::Null => Ok(Cell::Null),
                Json::Str(s) => parse_text(ty, &s),
                Json::Bool(b) => match ty {
                    ColumnType::Boolean => Ok(Cell::Bool(b)),
                    ColumnType::Text => Ok(Cell::Text(raw.to_string())),
                    ColumnType::Jsonb => Ok(Cell::Json(raw.to_string())),
                    _ => Err(expected(ty, raw)),
                },
                Json::Number(n) => match ty {
                    ColumnType::Text => Ok(Cell::Text(n.to_string())),
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

fn canonical_json(text: &str) -> Result<Cell, String> {
    let value: serde_json::Value =
        serde_json::from_str(text).map_err(|e| format!("invalid JSON: {e}"))?;
    // serde_json's map is ordered by key, so equal documents print equally.
    Ok(Cell::Json(value.to_string()))
}

/// Parses text (a CSV field, or a JSON string) as `ty`.
pub fn parse_text(ty: ColumnType, text: &str) -> Result<Cell, String> {
    let t = text.trim();
    let bad = || expected(ty, text);
    match ty {
        ColumnType::Text => Ok(Cell::Text(text.to_string())),
        ColumnType::Bigint => parse_int(t, i64::MIN, i64::MAX).ok_or_else(bad),
        ColumnType::Integer => parse_int(t, i32::MIN as i64, i32::MAX as i64).ok_or_else(bad),
        ColumnType::DoublePrecision => parse_float(t).ok_or_else(bad),
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

fn parse_int(t: &str, min: i64, max: i64) -> Option<Cell> {
    let v: i64 = t.parse().ok()?;
    (min..=max)
        .contains(&v)
        .then(|| Cell::Number(v.to_string()))
}

fn parse_float(t: &str) -> Option<Cell> {
    let text = match t.to_ascii_lowercase().as_str() {
        "nan" => "NaN".to_string(),
        "infinity" | "inf" | "+infinity" => "Infinity".to_string(),
        "-infinity" | "-inf" => "-Infinity".to_string(),
        _ => {
            if !t
                .bytes()
                .all(|b| b.is_ascii_digit() || b"+-.eE".contains(&b))
            {
                return None;
            }
            let v: f64 = t.parse().ok()?;
            if !v.is_finite() {
                return None;
            }
            // Rust prints the shortest text that reads back to the same f64.
            v.to_string()
        }
    };
    Some(Cell::Number(text))
}

/// A decimal literal `[+-]digits[.digits][e[+-]digits]`; kept as written
/// (scale included, as numeric keeps it), less a leading `+`.
fn parse_numeric(t: &str) -> Option<Cell> {
    if t.eq_ignore_ascii_case("nan") {
        return Some(Cell::Number("NaN".into()));
    }
    let body = t.strip_prefix(['+', '-']).unwrap_or(t);
    let (mantissa, exponent) = match body.find(['e', 'E']) {
        Some(i) => (&body[..i], Some(&body[i + 1..])),
        None => (body, None),
    };
    let (int, frac) = match mantissa.split_once('.') {
        Some((i, f)) => (i, f),
        None => (mantissa, ""),
    };
    let digits = |s: &str| s.bytes().all(|b| b.is_ascii_digit());
    if (int.is_empty() && frac.is_empty()) || !digits(int) || !digits(frac) {
        return None;
    }
    if let Some(e) = exponent {
        let e = e.strip_prefix(['+', '-']).unwrap_or(e);
        if e.is_empty() || !digits(e) || e.len() > 4 {
            return None;
        }
    }
    Some(Cell::Number(t.strip_prefix('+').unwrap_or(t).to_string()))
}

fn parse_date(t: &str) -> Option<NaiveDate> {
    if t.len() != 10 {
        return None;
    }
    NaiveDate::parse_from_str(t, "%Y-%m-%d").ok()
}

/// RFC 3339 (`T` or space between date and time); without an offset the
/// time is taken as UTC. Rounded to microseconds, Postgres's precision, so
/// the canonical form is what reads back.
pub fn parse_timestamp(t: &str) -> Option<DateTime<Utc>> {
    let ts = DateTime::parse_from_rfc3339(t)
        .map(|d| d.with_timezone(&Utc))
        .or_else(|_| {
            let spaced = t.replacen(' ', "T", 1);
            DateTime::parse_from_rfc3339(&spaced).map(|d| d.with_timezone(&Utc))
        })
        .or_else(|_| {
            // Postgres's own output: `2026-10-12 01:00:00+00`.
            ["%Y-%m-%d %H:%M:%S%.f%#z", "%Y-%m-%dT%H:%M:%S%.f%#z"]
                .iter()
                .find_map(|f| DateTime::parse_from_str(t, f).ok())
                .map(|d| d.with_timezone(&Utc))
                .ok_or(())
        })
        .or_else(|_| {
            ["%Y-%m-%dT%H:%M:%S%.f", "%Y-%m-%d %H:%M:%S%.f"]
                .iter()
                .find_map(|f| NaiveDateTime::parse_from_str(t, f).ok())
                .map(|n| n.and_utc())
                .ok_or(())
        })
        .ok()?;
    ts.duration_round(TimeDelta::microseconds(1)).ok()
}

fn write_timestamp(out: &mut Vec<u8>, ts: &DateTime<Utc>) {
    let _ = write!(out, "{}", ts.format("%Y-%m-%dT%H:%M:%S%.6fZ"));
}

impl Cell {
    /// The canonical encoding: one JSON value.
    pub fn write_canonical(&self, out: &mut Vec<u8>) {
        match self {
            Cell::Null => out.extend_from_slice(b"null"),
            Cell::Text(s) => serde_json::to_writer(&mut *out, s).expect("writing to a Vec"),
            Cell::Number(n) => out.extend_from_slice(n.as_bytes()),
            Cell::Bool(b) => out.extend_from_slice(if *b { b"true" } else { b"false" }),
            Cell::Date(d) => {
                let _ = write!(out, "\"{}\"", d.format("%Y-%m-%d"));
            }
            Cell::Timestamp(ts) => {
                out.push(b'"');
                write_timestamp(out, ts);
                out.push(b'"');
            }
            Cell::Json(j) => out.extend_from_slice(j.as_bytes()),
            Cell::Uuid(u) => {
                let _ = write!(out, "\"{}\"", u.hyphenated());
            }
        }
    }

    /// Postgres COPY text format: `\N` for NULL, backslash escapes.
    pub fn write_copy(&self, out: &mut Vec<u8>) {
        match self {
            Cell::Null => out.extend_from_slice(b"\\N"),
            Cell::Text(s) | Cell::Json(s) => write_copy_escaped(out, s),
            Cell::Number(n) => out.extend_from_slice(n.as_bytes()),
            Cell::Bool(b) => out.push(if *b { b't' } else { b'f' }),
            Cell::Date(d) => {
                let _ = write!(out, "{}", d.format("%Y-%m-%d"));
            }
            Cell::Timestamp(ts) => write_timestamp(out, ts),
            Cell::Uuid(u) => {
                let _ = write!(out, "{}", u.hyphenated());
            }
        }
    }
}

pub fn write_copy_escaped(out: &mut Vec<u8>, s: &str) {
    let bytes = s.as_bytes();
    let mut start = 0;
    for (i, &b) in bytes.iter().enumerate() {
        let escaped: &[u8] = match b {
            b'\\' => b"\\\\",
            b'\n' => b"\\n",
            b'\r' => b"\\r",
            b'\t' => b"\\t",
            _ => continue,
        };
        out.extend_from_slice(&bytes[start..i]);
        out.extend_from_slice(escaped);
        start = i + 1;
    }
    out.extend_from_slice(&bytes[start..]);
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::value::RawValue;

    fn json(ty: ColumnType, raw: &str) -> Result<Cell, String> {
        let raw: Box<RawValue> = serde_json::from_str(raw).unwrap();
        parse_cell(ty, RawField::Json(&raw))
    }

    #[test]
    fn numbers_keep_their_exact_text() {
        assert_eq!(
            json(ColumnType::Numeric, "1234.50"),
            Ok(Cell::Number("1234.50".into()))
        );
        assert_eq!(
            json(ColumnType::Numeric, "\"+7\""),
            Ok(Cell::Number("7".into()))
        );
        assert!(json(ColumnType::Numeric, "\"1.2.3\"").is_err());
        assert_eq!(
            json(ColumnType::Bigint, "42"),
            Ok(Cell::Number("42".into()))
        );
        assert!(json(ColumnType::Bigint, "4.2").is_err());
        assert!(json(ColumnType::Integer, "3000000000").is_err());
        assert_eq!(
            json(ColumnType::DoublePrecision, "0.1"),
            Ok(Cell::Number("0.1".into()))
        );
    }

    #[test]
    fn timestamps_normalize_to_utc_microseconds() {
        let a = json(ColumnType::Timestamptz, "\"2026-10-12T02:00:00+02:00\"").unwrap();
        let b = json(ColumnType::Timestamptz, "\"2026-10-12 00:00:00Z\"").unwrap();
        let c = json(ColumnType::Timestamptz, "\"2026-10-12 01:00:00+01\"").unwrap();
        assert_eq!(a, b);
        assert_eq!(a, c);
        let mut out = Vec::new();
        a.write_canonical(&mut out);
        assert_eq!(out, b"\"2026-10-12T00:00:00.000000Z\"");
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
    }

    #[test]
    fn copy_text_escapes_control_characters() {
        let mut out = Vec::new();
        Cell::Text("a\tb\\c\nd".into()).write_copy(&mut out);
        assert_eq!(out, b"a\\tb\\\\c\\nd");
    }
}
