//! Rows read back as JSON: a binary COPY tuple of a table's user columns
//! written byte for byte as Postgres's `row_to_json` writes the row (in a
//! session whose time zone is UTC, as idem's are), so that Postgres only
//! sends the values and idem spends little per row writing them.

use super::RowFormat;
use crate::binary_copy::{Malformed, TupleReader};
use crate::schema::{ColumnType, TableDef};

/// How each column of a read is written: its key, its type, and whether a
/// SQL NULL leaves the field out (a nullable jsonb column's, as `json_row`
/// does) rather than writing `null`.
pub(crate) struct JsonColumns {
    columns: Vec<JsonColumn>,
}

struct JsonColumn {
    /// `"name":`, escaped as `row_to_json` escapes it.
    key: Vec<u8>,
    ty: ColumnType,
    omit_null: bool,
}

impl JsonColumns {
    pub(crate) fn of(def: &TableDef) -> Self {
        let columns = def
            .columns
            .iter()
            .map(|c| {
                let mut key = Vec::new();
                escape_json(&mut key, c.name.as_str().as_bytes());
                key.push(b':');
                JsonColumn {
                    key,
                    ty: c.ty,
                    omit_null: c.ty == ColumnType::Jsonb && c.nullable,
                }
            })
            .collect();
        JsonColumns { columns }
    }

    pub(crate) fn len(&self) -> usize {
        self.columns.len()
    }

    /// The columns' types, in order (the COPY selects each as `sent_as_text`
    /// says).
    pub(crate) fn types(&self) -> impl Iterator<Item = ColumnType> + '_ {
        self.columns.iter().map(|c| c.ty)
    }

    /// Writes the tuple `fields` reads as one JSON object.
    pub(crate) fn write_row(
        &self,
        fields: &mut TupleReader<'_>,
        out: &mut Vec<u8>,
    ) -> Result<(), Malformed> {
        out.push(b'{');
        let mut first = true;
        for column in &self.columns {
            let value = fields.field()?;
            if value.is_none() && column.omit_null {
                continue;
            }
            if !std::mem::take(&mut first) {
                out.push(b',');
            }
            out.extend_from_slice(&column.key);
            match value {
                None => out.extend_from_slice(b"null"),
                Some(bytes) => write_value(out, column.ty, bytes)?,
            }
        }
        out.push(b'}');
        Ok(())
    }
}

/// Whether the read selects a column of type `ty` as text (its binary form
/// is then Postgres's text output): a double, whose shortest decimal form
/// only Postgres's own `float8out` writes exactly.
pub(crate) fn sent_as_text(ty: ColumnType) -> bool {
    ty == ColumnType::DoublePrecision
}

/// A non-NULL value as `to_json` writes it, from its binary COPY form.
fn write_value(out: &mut Vec<u8>, ty: ColumnType, bytes: &[u8]) -> Result<(), Malformed> {
    match ty {
        ColumnType::Text => escape_json(out, bytes),
        ColumnType::Uuid => write_uuid(out, fixed(bytes)?),
        ColumnType::Bigint => write_int(out, i64::from_be_bytes(fixed(bytes)?)),
        ColumnType::Integer => write_int(out, i32::from_be_bytes(fixed(bytes)?)),
        ColumnType::DoublePrecision => write_number_text(out, bytes),
        ColumnType::Numeric => write_numeric(out, bytes)?,
        ColumnType::Boolean => match bytes {
            [0] => out.extend_from_slice(b"false"),
            [_] => out.extend_from_slice(b"true"),
            _ => return Err(Malformed),
        },
        ColumnType::Date => write_date(out, i32::from_be_bytes(fixed(bytes)?)),
        ColumnType::Timestamptz => write_timestamptz(out, i64::from_be_bytes(fixed(bytes)?)),
        // jsonb's binary form is a version byte, then its text.
        ColumnType::Jsonb => match bytes.split_first() {
            Some((1, text)) => out.extend_from_slice(text),
            _ => return Err(Malformed),
        },
    }
    Ok(())
}

fn fixed<const N: usize>(bytes: &[u8]) -> Result<[u8; N], Malformed> {
    bytes.try_into().map_err(|_| Malformed)
}

fn write_int(out: &mut Vec<u8>, n: impl itoa::Integer) {
    out.extend_from_slice(itoa::Buffer::new().format(n).as_bytes());
}

/// A string as Postgres's `escape_json` writes it: quoted, `"` and `\`
/// escaped, control characters as `\b \f \n \r \t` or `\u00XX`.
fn escape_json(out: &mut Vec<u8>, text: &[u8]) {
    out.push(b'"');
    let mut start = 0;
    for (i, &b) in text.iter().enumerate() {
        if b >= b' ' && b != b'"' && b != b'\\' {
            continue;
        }
        out.extend_from_slice(&text[start..i]);
        start = i + 1;
        match b {
            b'"' => out.extend_from_slice(b"\\\""),
            b'\\' => out.extend_from_slice(b"\\\\"),
            b'\x08' => out.extend_from_slice(b"\\b"),
            b'\x0c' => out.extend_from_slice(b"\\f"),
            b'\n' => out.extend_from_slice(b"\\n"),
            b'\r' => out.extend_from_slice(b"\\r"),
            b'\t' => out.extend_from_slice(b"\\t"),
            _ => {
                const HEX: &[u8; 16] = b"0123456789abcdef";
                out.extend_from_slice(b"\\u00");
                out.push(HEX[usize::from(b >> 4)]);
                out.push(HEX[usize::from(b & 15)]);
            }
        }
    }
    out.extend_from_slice(&text[start..]);
    out.push(b'"');
}

/// A number's text as `to_json` writes it: bare when it is a JSON number,
/// quoted otherwise (`NaN`, `Infinity`).
fn write_number_text(out: &mut Vec<u8>, text: &[u8]) {
    match is_json_number(text) {
        true => out.extend_from_slice(text),
        false => escape_json(out, text),
    }
}

/// JSON's number grammar, as Postgres's `IsValidJsonNumber` checks it:
/// `-?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?`.
fn is_json_number(text: &[u8]) -> bool {
    let digits = |s: &[u8]| s.iter().take_while(|b| b.is_ascii_digit()).count();
    let mut s = text.strip_prefix(b"-").unwrap_or(text);
    match s.first() {
        Some(b'0') => s = &s[1..],
        Some(b'1'..=b'9') => s = &s[digits(s)..],
        _ => return false,
    }
    if let Some(rest) = s.strip_prefix(b".") {
        let n = digits(rest);
        if n == 0 {
            return false;
        }
        s = &rest[n..];
    }
    if let Some(rest) = s.strip_prefix(b"e").or_else(|| s.strip_prefix(b"E")) {
        let rest = rest
            .strip_prefix(b"+")
            .or_else(|| rest.strip_prefix(b"-"))
            .unwrap_or(rest);
        let n = digits(rest);
        if n == 0 {
            return false;
        }
        s = &rest[n..];
    }
    s.is_empty()
}

/// A numeric from its binary form (digit count, weight, sign, display
/// scale, then base-10000 digits) as `numeric_out` writes it
/// (`get_str_from_var`); `NaN` and the infinities quoted, as `to_json` does.
fn write_numeric(out: &mut Vec<u8>, bytes: &[u8]) -> Result<(), Malformed> {
    const NEGATIVE: u16 = 0x4000;
    let word = |i: usize| {
        bytes
            .get(2 * i..2 * i + 2)
            .map(|w| u16::from_be_bytes([w[0], w[1]]))
            .ok_or(Malformed)
    };
    let (ndigits, weight, sign, dscale) = (word(0)?, word(1)?, word(2)?, word(3)?);
    let special = match sign {
        0xC000 => Some("\"NaN\""),
        0xD000 => Some("\"Infinity\""),
        0xF000 => Some("\"-Infinity\""),
        _ => None,
    };
    if let Some(text) = special {
        out.extend_from_slice(text.as_bytes());
        return Ok(());
    }
    let ndigits = usize::from(ndigits);
    if bytes.len() != 8 + 2 * ndigits {
        return Err(Malformed);
    }
    let weight = i64::from(i16::from_be_bytes(weight.to_be_bytes()));
    let digit = |d: i64| match usize::try_from(d) {
        Ok(d) if d < ndigits => word(4 + d),
        _ => Ok(0),
    };
    if sign == NEGATIVE {
        out.push(b'-');
    }
    if weight < 0 {
        out.push(b'0');
    } else {
        write_int(out, digit(0)?);
        for d in 1..=weight {
            push_4(out, digit(d)?);
        }
    }
    // The fraction's first digit (before the first stored one when the
    // value is below 10^-4).
    let mut d = weight + 1;
    if dscale > 0 {
        out.push(b'.');
        let end = out.len() + usize::from(dscale);
        while out.len() < end {
            push_4(out, digit(d)?);
            d += 1;
        }
        out.truncate(end);
    }
    Ok(())
}

/// Four decimal digits of `v` (below 10000), zero-padded.
fn push_4(out: &mut Vec<u8>, v: u16) {
    out.extend_from_slice(&[
        b'0' + digit(v / 1000 % 10),
        b'0' + digit(v / 100 % 10),
        b'0' + digit(v / 10 % 10),
        b'0' + digit(v % 10),
    ]);
}

/// `n` (not negative), zero-padded to `width` digits.
fn push_padded(out: &mut Vec<u8>, n: i64, width: usize) {
    // Two-digit fields and four-digit years are nearly every call.
    match (width, u16::try_from(n)) {
        (2, Ok(n @ 0..=99)) => out.extend_from_slice(&[b'0' + digit(n / 10), b'0' + digit(n % 10)]),
        (4, Ok(n @ 0..=9999)) => push_4(out, n),
        _ => {
            let mut buf = itoa::Buffer::new();
            let text = buf.format(n);
            out.resize(out.len() + width.saturating_sub(text.len()), b'0');
            out.extend_from_slice(text.as_bytes());
        }
    }
}

/// A decimal digit's value (below 10) as a byte.
fn digit(d: u16) -> u8 {
    u8::try_from(d).unwrap_or(0)
}

/// Days from 1970-01-01 to 2000-01-01, Postgres's date epoch.
const PG_EPOCH_UNIX_DAYS: i64 = 10_957;
const MICROS_PER_DAY: i64 = 86_400_000_000;

/// A date (days from 2000-01-01) as `to_json` writes it: `"2026-10-12"`,
/// `"0044-03-15 BC"`, `"infinity"`.
fn write_date(out: &mut Vec<u8>, days: i32) {
    match days {
        i32::MAX => out.extend_from_slice(b"\"infinity\""),
        i32::MIN => out.extend_from_slice(b"\"-infinity\""),
        _ => {
            out.push(b'"');
            let year = write_ymd(out, i64::from(days) + PG_EPOCH_UNIX_DAYS);
            write_era(out, year);
            out.push(b'"');
        }
    }
}

/// A timestamptz (microseconds from 2000-01-01 UTC) as `to_json` writes
/// it in UTC: `"2026-10-12T13:04:05.5+00:00"`, `"infinity"`.
fn write_timestamptz(out: &mut Vec<u8>, micros: i64) {
    match micros {
        i64::MAX => out.extend_from_slice(b"\"infinity\""),
        i64::MIN => out.extend_from_slice(b"\"-infinity\""),
        _ => {
            // Days first: microseconds from 1970 overflow near the end of
            // Postgres's range.
            let day = micros.div_euclid(MICROS_PER_DAY) + PG_EPOCH_UNIX_DAYS;
            let time = micros.rem_euclid(MICROS_PER_DAY);
            out.push(b'"');
            let year = write_ymd(out, day);
            out.push(b'T');
            let seconds = time / 1_000_000;
            push_padded(out, seconds / 3600, 2);
            out.push(b':');
            push_padded(out, seconds / 60 % 60, 2);
            out.push(b':');
            push_padded(out, seconds % 60, 2);
            write_fraction(out, time % 1_000_000);
            out.extend_from_slice(b"+00:00");
            write_era(out, year);
            out.push(b'"');
        }
    }
}

/// A second's fraction as Postgres appends it: none when zero, otherwise a
/// point and up to six digits, trailing zeros left out.
fn write_fraction(out: &mut Vec<u8>, micros: i64) {
    if micros == 0 {
        return;
    }
    out.push(b'.');
    let mut digits = micros;
    let mut width = 6;
    while digits % 10 == 0 {
        digits /= 10;
        width -= 1;
    }
    push_padded(out, digits, width);
}

/// `YYYY-MM-DD` of the day `days` from 1970-01-01 in the proleptic
/// Gregorian calendar (years before 1 written as Postgres does, `1 - year`,
/// the era after); its astronomical year. (Howard Hinnant's
/// `civil_from_days`, exact for any day Postgres can store.)
fn write_ymd(out: &mut Vec<u8>, days: i64) -> i64 {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    push_padded(out, if year > 0 { year } else { 1 - year }, 4);
    out.push(b'-');
    push_padded(out, month, 2);
    out.push(b'-');
    push_padded(out, day, 2);
    year
}

fn write_era(out: &mut Vec<u8>, year: i64) {
    if year <= 0 {
        out.extend_from_slice(b" BC");
    }
}

/// `xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx`, quoted.
fn write_uuid(out: &mut Vec<u8>, bytes: [u8; 16]) {
    out.push(b'"');
    out.extend_from_slice(
        uuid::Uuid::from_bytes(bytes)
            .hyphenated()
            .encode_lower(&mut [0; 36])
            .as_bytes(),
    );
    out.push(b'"');
}

/// How rows go between JSON objects: one a line (NDJSON), or the elements
/// of one JSON array, `[` … `,\n` … `]\n`.
pub(crate) struct JsonFraming {
    array: bool,
    first: bool,
}

impl JsonFraming {
    pub(crate) fn new(format: RowFormat) -> Self {
        JsonFraming {
            array: format == RowFormat::Json,
            first: true,
        }
    }

    pub(crate) fn before_row(&mut self, out: &mut Vec<u8>) {
        if self.array {
            out.extend_from_slice(if std::mem::take(&mut self.first) {
                b"["
            } else {
                b",\n"
            });
        }
    }

    pub(crate) fn after_row(&self, out: &mut Vec<u8>) {
        if !self.array {
            out.push(b'\n');
        }
    }

    pub(crate) fn end(&self, out: &mut Vec<u8>) {
        if self.array {
            if self.first {
                out.push(b'[');
            }
            out.extend_from_slice(b"]\n");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text(f: impl FnOnce(&mut Vec<u8>)) -> String {
        let mut out = Vec::new();
        f(&mut out);
        String::from_utf8(out).unwrap()
    }

    /// A numeric's binary form from its base-10000 digits.
    fn numeric(weight: i16, sign: u16, dscale: u16, digits: &[u16]) -> Vec<u8> {
        let mut b = Vec::new();
        b.extend_from_slice(&u16::try_from(digits.len()).unwrap().to_be_bytes());
        b.extend_from_slice(&weight.to_be_bytes());
        b.extend_from_slice(&sign.to_be_bytes());
        b.extend_from_slice(&dscale.to_be_bytes());
        for d in digits {
            b.extend_from_slice(&d.to_be_bytes());
        }
        b
    }

    #[test]
    fn numerics_are_written_as_postgres_displays_them() {
        let n = |w, s, d, digits: &[u16]| {
            text(|o| write_numeric(o, &numeric(w, s, d, digits)).unwrap())
        };
        assert_eq!(n(0, 0, 2, &[1234, 5600]), "1234.56");
        assert_eq!(n(1, 0x4000, 0, &[12, 3456]), "-123456");
        assert_eq!(n(2, 0, 0, &[1]), "100000000");
        assert_eq!(n(-1, 0, 5, &[12, 3000]), "0.00123");
        assert_eq!(n(-1, 0, 5, &[12]), "0.00120");
        assert_eq!(n(-2, 0, 6, &[12]), "0.000000");
        assert_eq!(n(0, 0, 0, &[]), "0");
        assert_eq!(n(0, 0, 3, &[]), "0.000");
        assert_eq!(n(0, 0xC000, 0, &[]), "\"NaN\"");
        assert_eq!(n(0, 0xF000, 0, &[]), "\"-Infinity\"");
    }

    #[test]
    fn dates_and_timestamps_are_written_as_to_json_writes_them() {
        let date = |d| text(|o| write_date(o, d));
        assert_eq!(date(0), "\"2000-01-01\"");
        assert_eq!(date(9781), "\"2026-10-12\"");
        assert_eq!(date(-730_119), "\"0001-01-01\"");
        assert_eq!(date(-730_120), "\"0001-12-31 BC\"");
        assert_eq!(date(i32::MAX), "\"infinity\"");
        let ts = |m| text(|o| write_timestamptz(o, m));
        let day = 9781 * MICROS_PER_DAY;
        assert_eq!(ts(day), "\"2026-10-12T00:00:00+00:00\"");
        assert_eq!(ts(day + 47_045_500_000), "\"2026-10-12T13:04:05.5+00:00\"");
        assert_eq!(ts(day + 1), "\"2026-10-12T00:00:00.000001+00:00\"");
        assert_eq!(ts(-1), "\"1999-12-31T23:59:59.999999+00:00\"");
        assert_eq!(ts(i64::MIN), "\"-infinity\"");
        // Postgres's last timestamp, 294276-12-31 23:59:59.999999.
        assert_eq!(
            ts(9_223_371_331_200_000_000 - 1),
            "\"294276-12-31T23:59:59.999999+00:00\""
        );
    }

    #[test]
    fn strings_are_escaped_as_postgres_escapes_them() {
        let s = |t: &str| text(|o| escape_json(o, t.as_bytes()));
        assert_eq!(s("plain é"), "\"plain é\"");
        assert_eq!(
            s("a\"b\\c\n\t\r\x08\x0c\x01\x1f"),
            r#""a\"b\\c\n\t\r\b\f\u0001\u001f""#
        );
    }

    #[test]
    fn only_json_numbers_are_written_bare() {
        for n in ["0", "-0", "1.5", "1e+100", "1.5e-07", "-12"] {
            assert!(is_json_number(n.as_bytes()), "{n}");
        }
        for n in [
            "NaN",
            "Infinity",
            "-Infinity",
            "01",
            "1.",
            ".5",
            "1e",
            "",
            "-",
        ] {
            assert!(!is_json_number(n.as_bytes()), "{n}");
        }
    }
}
