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
#[path = "cell_tests.rs"]
mod tests;

#[cfg(test)]
#[path = "cell_typed_tests.rs"]
mod typed_field_tests;
