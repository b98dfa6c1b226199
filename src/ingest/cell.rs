//! One value checked against its column type, and its two encodings: the
//! canonical one (hashed; equal values encode equally) and Postgres's binary
//! COPY format (which the server reads without parsing text).

use std::borrow::Cow;
use std::io::Write;

use chrono::{DateTime, Datelike, NaiveDate, NaiveDateTime, Timelike, Utc};
use uuid::Uuid;

use super::temporal::{check_earliest, Infinity, EARLIEST_TIMESTAMP_UNIX_MICROS};
use super::RawField;
use crate::binary_copy::TupleWriter;
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

/// A raw JSON string's value, borrowed when it has no escapes.
pub(super) fn json_str(raw: &str) -> Result<Cow<'_, str>, String> {
    let inner = &raw[1..raw.len() - 1];
    if inner.contains('\\') {
        let unescaped = serde_json::from_str::<String>(raw).map_err(|e| e.to_string())?;
        Ok(Cow::Owned(unescaped))
    } else {
        Ok(Cow::Borrowed(inner))
    }
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

pub(super) const NUL_REFUSED: &str =
    "contains a NUL character (\\u0000), which Postgres cannot store";

/// Checks one raw value against `ty`.
pub fn parse_cell(ty: ColumnType, raw: RawField<'_>) -> Result<Cell<'_>, String> {
    match raw {
        RawField::Text(None) => Ok(Cell::Null),
        RawField::Text(Some(text)) => parse_text(ty, text),
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

/// A double as Postgres's `float8in` reads it. `Err(None)`: not a number;
/// `Err(Some(why))`: a literal strtod overflows to infinity, or underflows
/// to zero from a non-zero value (`1e-400`), which Postgres refuses as out
/// of range instead of storing `0`. Subnormals (`5e-324`) it keeps.
fn parse_float(t: &str) -> Result<f64, Option<String>> {
    match t.to_ascii_lowercase().as_str() {
        "nan" => Ok(f64::NAN),
        "infinity" | "inf" | "+infinity" => Ok(f64::INFINITY),
        "-infinity" | "-inf" => Ok(f64::NEG_INFINITY),
        _ if t
            .bytes()
            .all(|b| b.is_ascii_digit() || b"+-.eE".contains(&b)) =>
        {
            let v = t.parse::<f64>().map_err(|_| None)?;
            let mantissa = t.split(['e', 'E']).next().unwrap_or(t);
            let underflow = v == 0.0 && mantissa.bytes().any(|b| matches!(b, b'1'..=b'9'));
            if v.is_infinite() || underflow {
                return Err(Some(format!(
                    "{} is out of range for double precision",
                    snippet(t)
                )));
            }
            Ok(v)
        }
        _ => Err(None),
    }
}

/// A decimal literal `[+-]digits[.digits][e[+-]digits]`, or NaN, that
/// Postgres can hold. `Err(None)`: not a decimal; `Err(Some(why))`: a
/// decimal past Postgres's limits.
fn parse_numeric(t: &str) -> Result<Cell<'_>, Option<String>> {
    if t.eq_ignore_ascii_case("nan") {
        return Ok(Cell::Numeric(Cow::Borrowed("NaN")));
    }
    let parts = DecimalParts::parse(t).ok_or(None)?;
    parts.check_limits().map_err(Some)?;
    Ok(Cell::Numeric(Cow::Borrowed(
        t.strip_prefix('+').unwrap_or(t),
    )))
}

/// A numeric's canonical text: the value as Postgres displays it, so that
/// `100`, `1e2` and `1.0E+2` (one stored value) encode alike while `1.50`
/// and `1.5` (displayed apart) do not. `text` is a checked decimal or NaN.
pub(super) fn write_numeric_canonical(out: &mut Vec<u8>, text: &str) {
    // Most decimals are written as Postgres displays them: copied as they are.
    if is_displayed_form(text) {
        out.extend_from_slice(text.as_bytes());
        return;
    }
    match DecimalParts::parse(text) {
        Some(parts) => parts.write_canonical(out),
        None => out.extend_from_slice(text.as_bytes()),
    }
}

/// Whether `text` is a decimal exactly as Postgres displays it: digits
/// without a leading zero (but `0`), a fraction of one digit or more if a
/// point is written, no exponent, no sign but on a non-zero `-`. Such a text
/// is its own canonical form.
fn is_displayed_form(text: &str) -> bool {
    let negative = text.starts_with('-');
    let body = text.strip_prefix('-').unwrap_or(text);
    let (int, frac) = match body.split_once('.') {
        Some((int, frac)) => (int, Some(frac)),
        None => (body, None),
    };
    let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    let zero = int == "0" && frac.unwrap_or("").bytes().all(|b| b == b'0');
    digits(int)
        && frac.is_none_or(digits)
        && (int == "0" || !int.starts_with('0'))
        && !(negative && zero)
}

/// Refuses, with the reason, a decimal literal Postgres's numeric cannot hold.
pub(super) fn numeric_limits(t: &str) -> Result<(), String> {
    DecimalParts::parse(t)
        .ok_or_else(|| format!("{} is not a decimal", snippet(t)))?
        .check_limits()
}

/// Postgres's numeric limits (checked against PostgreSQL 15): the weight, the
/// power of 10000 of the first base-10000 digit, is an int16, so at most
/// 32768 × 4 digits stand before the point; the display scale has 14 bits;
/// and its text parser refuses an exponent of `INT_MAX / 2` or more, even on
/// a zero.
pub const NUMERIC_MAX_DIGITS_BEFORE_POINT: i64 = 131_072;
pub const NUMERIC_MAX_SCALE: i64 = 16_383;
pub const NUMERIC_MAX_EXPONENT: i64 = 1_073_741_822;

/// A length as an `i64` for the limit arithmetic. No string is that long;
/// if one were, the saturated count would still be past every limit.
fn count(n: usize) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

/// The pieces of a decimal literal.
struct DecimalParts<'a> {
    negative: bool,
    int: &'a str,
    frac: &'a str,
    /// Saturated far past `NUMERIC_MAX_EXPONENT` when written longer.
    exponent: i64,
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
                if magnitude.is_empty() || !digits(magnitude) {
                    return None;
                }
                // Eighteen digits always fit an i64; a longer exponent is
                // refused anyway, so its exact value does not matter.
                let significant = magnitude.trim_start_matches('0');
                let magnitude: i64 = if significant.len() > 18 {
                    i64::MAX / 2
                } else {
                    significant.parse().unwrap_or(0)
                };
                if e.starts_with('-') {
                    -magnitude
                } else {
                    magnitude
                }
            }
        };
        Some(DecimalParts {
            negative,
            int,
            frac,
            exponent,
        })
    }

    /// How many zeros lead the digits (all of them for a zero).
    fn leading_zeros(&self) -> usize {
        let zeros = |s: &str| s.bytes().take_while(|&b| b == b'0').count();
        let in_int = zeros(self.int);
        if in_int < self.int.len() {
            in_int
        } else {
            in_int + zeros(self.frac)
        }
    }

    fn is_zero(&self) -> bool {
        self.leading_zeros() == self.int.len() + self.frac.len()
    }

    /// Where the point stands, counted from the first significant digit:
    /// the number of digits before the point when positive.
    fn point(&self) -> i64 {
        count(self.int.len())
            .saturating_add(self.exponent)
            .saturating_sub(count(self.leading_zeros()))
    }

    /// The display scale: digits after the point as written, exponent applied.
    fn scale(&self) -> i64 {
        count(self.frac.len()).saturating_sub(self.exponent).max(0)
    }

    /// The stored value's canonical text: as Postgres displays it (plain),
    /// unless that is far longer than the value in scientific notation
    /// (`1e131071` is 131,072 digits plain): a body must not grow a
    /// thousandfold on its way to the hash. Both forms depend on the value
    /// and its display scale alone, and the choice between them too.
    fn write_canonical(&self, out: &mut Vec<u8>) {
        /// How much longer than the scientific form the plain one may be.
        const PLAIN_SLACK: usize = 32;
        let (plain, scientific) = self.canonical_lengths();
        if plain <= scientific.saturating_add(PLAIN_SLACK) {
            self.write_plain(out);
        } else {
            self.write_scientific(out);
        }
    }

    /// The significant digits (none for a zero), and the power of ten of
    /// the first one.
    fn significant(&self) -> (impl Iterator<Item = u8> + '_, usize, i64) {
        let zero = self.is_zero();
        let digits = self
            .int
            .bytes()
            .chain(self.frac.bytes())
            .skip(self.leading_zeros())
            .take(if zero { 0 } else { usize::MAX });
        let n = if zero {
            0
        } else {
            self.int.len() + self.frac.len() - self.leading_zeros()
        };
        (digits, n, if zero { 0 } else { self.point() - 1 })
    }

    /// The lengths of the plain and the scientific forms.
    fn canonical_lengths(&self) -> (usize, usize) {
        let scale = usize::try_from(self.scale()).unwrap_or(0);
        let (_, n, power) = self.significant();
        let sign = usize::from(self.negative && n > 0);
        let fraction = if scale > 0 { 1 + scale } else { 0 };
        let before = usize::try_from(power.saturating_add(1)).unwrap_or(0).max(1);
        let plain = sign + before + fraction;
        let mantissa = self.scientific_digits();
        let point = usize::from(mantissa > 1);
        let exponent = if n == 0 { -self.scale() } else { power };
        let scientific = sign + mantissa + point + 1 + itoa::Buffer::new().format(exponent).len();
        (plain, scientific)
    }

    /// How many digits the scientific form's mantissa needs: the
    /// significant ones less trailing zeros, unless the scale needs them.
    fn scientific_digits(&self) -> usize {
        let (digits, n, _) = self.significant();
        if self.scale() > 0 || n == 0 {
            return n.max(1);
        }
        let trailing = digits.fold(0, |zeros, d| if d == b'0' { zeros + 1 } else { 0 });
        n - trailing
    }

    /// `d.ddde±x`, which Postgres reads back as the same value and display
    /// scale; a zero of scale s is `0e-s`.
    fn write_scientific(&self, out: &mut Vec<u8>) {
        let (digits, n, power) = self.significant();
        if n == 0 {
            out.extend_from_slice(b"0e");
            out.extend_from_slice(itoa::Buffer::new().format(-self.scale()).as_bytes());
            return;
        }
        if self.negative {
            out.push(b'-');
        }
        for (i, d) in digits.take(self.scientific_digits()).enumerate() {
            if i == 1 {
                out.push(b'.');
            }
            out.push(d);
        }
        out.push(b'e');
        out.extend_from_slice(itoa::Buffer::new().format(power).as_bytes());
    }

    /// The decimal as Postgres displays it: plain, exactly `scale()` digits
    /// after the point, no leading zeros, no sign on a zero. Only for a
    /// decimal within the limits (a zero's exponent is never spelled out).
    fn write_plain(&self, out: &mut Vec<u8>) {
        let scale = usize::try_from(self.scale()).unwrap_or(0);
        // A zero has no significant digits, and its point may stand
        // anywhere (`0e1073741822`).
        let zero = self.is_zero();
        let point = if zero { 0 } else { self.point() };
        let mut digits = self
            .int
            .bytes()
            .chain(self.frac.bytes())
            .skip(self.leading_zeros());
        if self.negative && !zero {
            out.push(b'-');
        }
        let before = usize::try_from(point).unwrap_or(0);
        if before == 0 {
            out.push(b'0');
        }
        // An exponent past the written digits stands for zeros.
        out.extend((0..before).map(|_| digits.next().unwrap_or(b'0')));
        if scale == 0 {
            return;
        }
        out.push(b'.');
        let zeros = usize::try_from(point.saturating_neg()).unwrap_or(0);
        out.extend(
            std::iter::repeat_n(b'0', zeros)
                .chain(digits)
                .chain(std::iter::repeat(b'0'))
                .take(scale),
        );
    }

    /// Refuses, with the reason, a decimal Postgres's numeric cannot hold.
    fn check_limits(&self) -> Result<(), String> {
        if self.exponent.abs() > NUMERIC_MAX_EXPONENT {
            return Err(format!(
                "numeric exponent is out of range; Postgres takes at most \
                 ±{NUMERIC_MAX_EXPONENT}"
            ));
        }
        let before_point = self.point();
        if !self.is_zero() && before_point > NUMERIC_MAX_DIGITS_BEFORE_POINT {
            return Err(format!(
                "numeric has {before_point} digits before the point; Postgres holds at \
                 most {NUMERIC_MAX_DIGITS_BEFORE_POINT}"
            ));
        }
        let scale = self.scale();
        if scale > NUMERIC_MAX_SCALE {
            return Err(format!(
                "numeric has {scale} digits after the point; Postgres holds at most \
                 {NUMERIC_MAX_SCALE}"
            ));
        }
        Ok(())
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
            d.is_ascii_digit().then(|| acc * 10 + u32::from(d - b'0'))
        })
    };
    // Postgres has no year 0 (it reads `0000-01-01` as an error), and a
    // date read back must parse again: years 0001 to 9999.
    let year = i32::try_from(num(0..4)?).ok().filter(|&y| y >= 1)?;
    NaiveDate::from_ymd_opt(year, num(5..7)?, num(8..10)?)
}

/// RFC 3339 (`T` or space between date and time; `Z`, `+hh:mm`, `+hh`);
/// without an offset the time is taken as UTC.
pub fn parse_timestamp(t: &str) -> Option<i64> {
    timestamp_micros(t).ok()
}

/// A timestamp as microseconds since the Unix epoch. `Err(None)`: not a
/// timestamp; `Err(Some(why))`: one Postgres cannot hold.
fn timestamp_micros(t: &str) -> Result<i64, Option<String>> {
    let ts = DateTime::parse_from_rfc3339(t)
        .ok()
        .or_else(|| {
            // Postgres's own output (`2026-10-12 01:00:00+00`) and kin:
            // `+hh`, `+hhmm`, `+hh:mm` or `Z`, seconds optional.
            [
                "%Y-%m-%d %H:%M:%S%.f%#z",
                "%Y-%m-%dT%H:%M:%S%.f%#z",
                "%Y-%m-%d %H:%M%#z",
                "%Y-%m-%dT%H:%M%#z",
            ]
            .iter()
            .find_map(|f| DateTime::parse_from_str(t, f).ok())
        })
        .map(|d| d.with_timezone(&Utc))
        .or_else(|| {
            [
                "%Y-%m-%dT%H:%M:%S%.f",
                "%Y-%m-%d %H:%M:%S%.f",
                "%Y-%m-%dT%H:%M",
                "%Y-%m-%d %H:%M",
            ]
            .iter()
            .find_map(|f| NaiveDateTime::parse_from_str(t, f).ok())
            .map(|n| n.and_utc())
        })
        // A date is its midnight, UTC (as a `date` column widened to
        // `timestamptz` holds it).
        .or_else(|| parse_date(t).map(|d| d.and_time(chrono::NaiveTime::MIN).and_utc()))
        .ok_or(None)?;
    // chrono keeps a leap second (`23:59:60`) as second 59 plus a whole
    // second of nanoseconds; Postgres reads it as the next minute's 00.
    let leap = i64::from(ts.timestamp_subsec_nanos() >= 1_000_000_000);
    let micros = ts
        .timestamp()
        .checked_add(leap)
        .and_then(|s| s.checked_mul(1_000_000))
        .and_then(|m| m.checked_add(fraction_micros(t)))
        .ok_or(None)?;
    check_earliest(micros).map_err(Some)
}

/// The fraction of a second in microseconds, rounded the way Postgres's own
/// parser rounds it (the fraction read as a double, times 10^6, to the
/// nearest, ties to even), so that a text lands as the same instant through
/// idem as through SQL. One million when it rounds up to the next second.
fn fraction_micros(t: &str) -> i64 {
    // Only the seconds carry a `.` in the forms `timestamp_micros` reads.
    let Some(dot) = t.find('.') else {
        return 0;
    };
    let digits = t[dot + 1..].bytes().take_while(u8::is_ascii_digit).count();
    let fraction: f64 = t[dot..dot + 1 + digits].parse().unwrap_or(0.0);
    // In [0, 10^6] and integral, so the conversion is exact.
    (fraction * 1e6).round_ties_even() as i64
}

/// Two decimal digits of `v`, which is below 100 (a month, a second, a
/// century of a four-digit year).
fn push_2(out: &mut Vec<u8>, v: u32) {
    debug_assert!(v < 100);
    for d in [v / 10 % 10, v % 10] {
        out.push(b'0' + u8::try_from(d).unwrap_or(0));
    }
}

fn write_date(out: &mut Vec<u8>, d: NaiveDate) {
    match u32::try_from(d.year()) {
        Ok(year @ 0..=9999) => {
            push_2(out, year / 100);
            push_2(out, year % 100);
        }
        _ => {
            let _ = write!(out, "{}", d.year());
        }
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
    let fraction = ts.timestamp_subsec_micros();
    push_2(out, fraction / 10_000);
    push_2(out, fraction / 100 % 100);
    push_2(out, fraction % 100);
    out.push(b'Z');
}

/// Days from 0001-01-01 to 2000-01-01, Postgres's date epoch.
const PG_EPOCH_DAYS_FROM_CE: i32 = 730_120;
/// Microseconds from the Unix epoch to 2000-01-01, Postgres's timestamp epoch.
pub(crate) const PG_EPOCH_UNIX_MICROS: i64 = 946_684_800_000_000;

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

/// Postgres's binary numeric: base-10000 digits with a weight (the power of
/// 10000 of the first digit), a sign and the display scale. Every header
/// field is checked against its width, so a value past Postgres's limits is
/// refused here too, not wrapped into another number.
fn write_numeric(out: &mut Vec<u8>, text: &str) -> Result<(), String> {
    const POSITIVE: u16 = 0x0000;
    const NEGATIVE: u16 = 0x4000;
    const NAN: u16 = 0xC000;
    if text == "NaN" {
        return write_numeric_field(out, NAN, 0, 0, &[]);
    }
    let parts =
        DecimalParts::parse(text).ok_or_else(|| format!("{} is not a decimal", snippet(text)))?;
    let scale = parts.scale();
    // The first significant digit's power of ten is point - 1; groups of
    // four are aligned on powers that are multiples of four, so zeros pad
    // the first group in front.
    let first_power = parts.point() - 1;
    let pad = match first_power.rem_euclid(4) {
        0 => 3,
        1 => 2,
        2 => 1,
        _ => 0,
    };
    let mut digits = vec![0u8; pad];
    digits.extend(
        parts
            .int
            .bytes()
            .chain(parts.frac.bytes())
            .skip(parts.leading_zeros())
            .map(|b| b - b'0'),
    );
    while digits.len() > pad && digits.last() == Some(&0) {
        digits.pop();
    }
    if digits.len() == pad {
        return write_numeric_field(out, POSITIVE, 0, scale, &[]);
    }
    while !digits.len().is_multiple_of(4) {
        digits.push(0);
    }
    let sign = if parts.negative { NEGATIVE } else { POSITIVE };
    write_numeric_field(out, sign, first_power.div_euclid(4), scale, &digits)
}

/// The numeric field: length, digit count, weight, sign, display scale,
/// then the base-10000 digits, from `digits` (decimal, four to a group).
fn write_numeric_field(
    out: &mut Vec<u8>,
    sign: u16,
    weight: i64,
    scale: i64,
    digits: &[u8],
) -> Result<(), String> {
    let groups = digits.len() / 4;
    // Postgres reads the digit count as uint16, the weight as int16 and the
    // scale as 14 bits of a uint16.
    let ndigits =
        u16::try_from(groups).map_err(|_| format!("numeric has {groups} base-10000 digits"))?;
    let weight =
        i16::try_from(weight).map_err(|_| format!("numeric weight {weight} is out of range"))?;
    let scale = u16::try_from(scale)
        .ok()
        .filter(|&s| i64::from(s) <= NUMERIC_MAX_SCALE)
        .ok_or_else(|| format!("numeric scale {scale} is out of range"))?;
    let out = TupleWriter::new(out).field_of(8 + 2 * groups)?;
    out.extend_from_slice(&ndigits.to_be_bytes());
    out.extend_from_slice(&weight.to_be_bytes());
    out.extend_from_slice(&sign.to_be_bytes());
    out.extend_from_slice(&scale.to_be_bytes());
    for g in digits.chunks_exact(4) {
        let group = g.iter().fold(0u16, |acc, &d| acc * 10 + u16::from(d));
        out.extend_from_slice(&group.to_be_bytes());
    }
    Ok(())
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
