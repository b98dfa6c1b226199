//! Postgres's `infinity` and `-infinity` in date and timestamp columns, and
//! the earliest instant idem takes; dates and timestamps read from text
//! and written in the canonical form.

use std::io::Write;

use chrono::{DateTime, Datelike, NaiveDate, NaiveDateTime, Timelike, Utc};

use crate::binary_copy::TupleWriter;
use crate::schema::ColumnType;

/// Postgres's `-infinity` (before every date) and `infinity` (after every date).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Infinity {
    Past,
    Future,
}

impl Infinity {
    /// `infinity` or `-infinity` in any case, the words Postgres reads and
    /// writes (it refuses `+infinity` in these types).
    pub fn parse(t: &str) -> Option<Self> {
        if t.eq_ignore_ascii_case("infinity") {
            Some(Infinity::Future)
        } else if t.eq_ignore_ascii_case("-infinity") {
            Some(Infinity::Past)
        } else {
            None
        }
    }

    /// As a JSON string, which no finite date or instant is written as.
    pub fn write_canonical(self, out: &mut Vec<u8>) {
        out.extend_from_slice(match self {
            Infinity::Future => b"\"infinity\"",
            Infinity::Past => b"\"-infinity\"",
        });
    }

    /// As Postgres holds them: the largest and smallest day count of a
    /// `date` (`DATEVAL_NOEND`, `DATEVAL_NOBEGIN`), microsecond count of a
    /// `timestamptz` (`DT_NOEND`, `DT_NOBEGIN`).
    pub fn write_binary(self, ty: ColumnType, out: &mut Vec<u8>) -> Result<(), String> {
        let future = self == Infinity::Future;
        match ty {
            ColumnType::Date => {
                let days = if future { i32::MAX } else { i32::MIN };
                TupleWriter::new(out).fixed(&days.to_be_bytes());
            }
            ColumnType::Timestamptz => {
                let micros = if future { i64::MAX } else { i64::MIN };
                TupleWriter::new(out).fixed(&micros.to_be_bytes());
            }
            _ => return Err(format!("{} holds no infinity", ty.sql_name())),
        }
        Ok(())
    }
}

/// 0001-01-01 00:00:00 UTC in microseconds since the Unix epoch: the
/// earliest instant idem takes. Postgres holds earlier ones, but writes them
/// with a ` BC` suffix that no format reads back (nor does Postgres read a
/// year 0 or a signed year), so they are refused, as in `date` columns.
pub const EARLIEST_TIMESTAMP_UNIX_MICROS: i64 = -62_135_596_800_000_000;

/// Refuses, with the reason, an instant before `EARLIEST_TIMESTAMP_UNIX_MICROS`.
pub fn check_earliest(micros: i64) -> Result<i64, String> {
    if micros < EARLIEST_TIMESTAMP_UNIX_MICROS {
        return Err(
            "timestamp is before 0001-01-01 00:00:00 (UTC); years before 1 are \
                    refused, as in date columns"
                .into(),
        );
    }
    Ok(micros)
}

/// `YYYY-MM-DD`, parsed by hand: every row of a partition carries one.
pub(super) fn parse_date(t: &str) -> Option<NaiveDate> {
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
pub(super) fn timestamp_micros(t: &str) -> Result<i64, Option<String>> {
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

pub(super) fn write_date(out: &mut Vec<u8>, d: NaiveDate) {
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
pub(super) fn write_timestamp(out: &mut Vec<u8>, micros: i64) {
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
pub(super) const PG_EPOCH_DAYS_FROM_CE: i32 = 730_120;
/// Microseconds from the Unix epoch to 2000-01-01, Postgres's timestamp epoch.
pub(crate) const PG_EPOCH_UNIX_MICROS: i64 = 946_684_800_000_000;
