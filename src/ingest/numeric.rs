//! Postgres's `numeric` and `double precision`: decimal literals checked
//! against Postgres's limits, their canonical text and their binary form.

use super::text::snippet;
use crate::binary_copy::TupleWriter;

/// A double as Postgres's `float8in` reads it. `Err(None)`: not a number;
/// `Err(Some(why))`: a literal strtod overflows to infinity, or underflows
/// to zero from a non-zero value (`1e-400`), which Postgres refuses as out
/// of range instead of storing `0`. Subnormals (`5e-324`) it keeps.
pub(super) fn parse_float(t: &str) -> Result<f64, Option<String>> {
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

/// Refuses a decimal literal: `Err(None)` when it is not one,
/// `Err(Some(why))` when Postgres's numeric cannot hold it.
pub(super) fn check_decimal(t: &str) -> Result<(), Option<String>> {
    let parts = DecimalParts::parse(t).ok_or(None)?;
    parts.check_limits().map_err(Some)
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
pub(super) fn is_displayed_form(text: &str) -> bool {
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

/// Postgres's binary numeric: base-10000 digits with a weight (the power of
/// 10000 of the first digit), a sign and the display scale. Every header
/// field is checked against its width, so a value past Postgres's limits is
/// refused here too, not wrapped into another number.
pub(super) fn write_numeric(out: &mut Vec<u8>, text: &str) -> Result<(), String> {
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
