//! A table's retention (`"retention": "P90D"`): how long a partition is
//! kept once its period has ended. An ISO 8601 duration of years, months,
//! weeks, days and hours, each a whole number (no fractions, minutes or
//! seconds: no grain is finer than an hour), and a whole number of the
//! table's periods: months and years for a monthly table, whole days for a
//! daily one. Read by hand: the few forms it takes are simpler to check here
//! than to take from a general parser and refuse most of what it reads.

use std::fmt;

use chrono::{Duration, Months, NaiveDateTime};
use serde::{Deserialize, Serialize};

use super::error::{invalid, SchemaError};
use crate::period::{Grain, Period};

/// The longest retention: a thousand years, far past any date Postgres
/// partitions hold in practice, and small enough that no arithmetic on it
/// overflows.
const MAX_HOURS: u64 = 1000 * 366 * 24;

/// How long a partition is kept after its period ends, as declared.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Retention {
    years: u32,
    months: u32,
    weeks: u32,
    days: u32,
    hours: u32,
}

impl Retention {
    /// Reads an ISO 8601 duration such as `P90D`, `P36M`, `P1Y6M`, `P2W`,
    /// `PT72H` or `P1DT12H`.
    pub fn parse(text: &str) -> Result<Retention, SchemaError> {
        let refuse = |why: &str| {
            invalid(format!(
                "retention {text:?} {why}: write an ISO 8601 duration of whole years, months, \
                 weeks, days or hours, such as \"P90D\", \"P36M\" or \"PT72H\""
            ))
        };
        let rest = text
            .strip_prefix('P')
            .ok_or_else(|| refuse("does not start with P"))?;
        let (date, time) = match rest.split_once('T') {
            Some((date, time)) => (date, Some(time)),
            None => (rest, None),
        };
        let mut retention = Retention::default();
        let mut last = 0;
        for (unit, value) in parts(date).map_err(|_| refuse("is not a duration"))? {
            let (order, slot) = match unit {
                'Y' => (1, &mut retention.years),
                'M' => (2, &mut retention.months),
                'W' => (3, &mut retention.weeks),
                'D' => (4, &mut retention.days),
                _ => return Err(refuse(&format!("has an unknown unit {unit:?}"))),
            };
            if order <= last {
                return Err(refuse("repeats a unit or puts them out of order"));
            }
            (last, *slot) = (order, value);
        }
        if let Some(time) = time {
            match parts(time).map_err(|_| refuse("is not a duration"))?[..] {
                [('H', hours)] => retention.hours = hours,
                _ => return Err(refuse("has a time part other than hours")),
            }
        }
        if retention == Retention::default() {
            return Err(refuse("is empty or zero"));
        }
        if retention.longest_hours() > MAX_HOURS {
            return Err(refuse("is longer than a thousand years"));
        }
        Ok(retention)
    }

    /// Refuses a retention that is not a whole number of the grain's
    /// periods (or a table without periods).
    pub fn check_grain(&self, grain: Grain) -> Result<(), SchemaError> {
        let whole = match grain {
            Grain::Hour => true,
            Grain::Day => self.hours.is_multiple_of(24),
            Grain::Month => self.weeks == 0 && self.days == 0 && self.hours == 0,
            Grain::Whole => return Err(invalid(
                "retention needs partitions: a plain table (partition_by null) has none to drop"
                    .to_string(),
            )),
        };
        if whole {
            return Ok(());
        }
        Err(invalid(format!(
            "retention {self} is not a whole number of the table's periods (its grain is {})",
            grain.as_str()
        )))
    }

    /// The instant before which a period must have ended to be past
    /// retention at `now`: `now` minus the retention (months counted on the
    /// calendar).
    pub fn limit(&self, now: NaiveDateTime) -> NaiveDateTime {
        let months = self.years.saturating_mul(12).saturating_add(self.months);
        let hours = (i64::from(self.weeks) * 7 + i64::from(self.days)) * 24 + i64::from(self.hours);
        now.checked_sub_months(Months::new(months))
            .and_then(|t| t.checked_sub_signed(Duration::hours(hours)))
            .unwrap_or(NaiveDateTime::MIN)
    }

    /// Whether `period` is past retention at `now`: it ended at or before
    /// the limit.
    pub fn expired(&self, period: Period, now: NaiveDateTime) -> bool {
        !period.is_whole() && period.end() <= self.limit(now)
    }

    /// The oldest period of `grain` kept at `now`: the one the limit falls in.
    pub fn oldest_kept(&self, grain: Grain, now: NaiveDateTime) -> Period {
        Period::containing(self.limit(now), grain)
    }

    /// An upper bound of its length in hours (a month taken as 31 days).
    fn longest_hours(&self) -> u64 {
        let days = u64::from(self.years) * 366
            + u64::from(self.months) * 31
            + u64::from(self.weeks) * 7
            + u64::from(self.days);
        days * 24 + u64::from(self.hours)
    }
}

/// The `<number><unit>` parts of one side of a duration.
fn parts(text: &str) -> Result<Vec<(char, u32)>, ()> {
    let mut out = Vec::new();
    let mut digits = String::new();
    for c in text.chars() {
        if c.is_ascii_digit() {
            digits.push(c);
        } else {
            out.push((c, digits.parse().map_err(|_| ())?));
            digits.clear();
        }
    }
    if digits.is_empty() {
        Ok(out)
    } else {
        Err(())
    }
}

impl fmt::Display for Retention {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("P")?;
        for (value, unit) in [
            (self.years, 'Y'),
            (self.months, 'M'),
            (self.weeks, 'W'),
            (self.days, 'D'),
        ] {
            if value > 0 {
                write!(f, "{value}{unit}")?;
            }
        }
        if self.hours > 0 {
            write!(f, "T{}H", self.hours)?;
        }
        Ok(())
    }
}

impl Serialize for Retention {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for Retention {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = String::deserialize(deserializer)?;
        Retention::parse(&text).map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(text: &str) -> NaiveDateTime {
        NaiveDateTime::parse_from_str(text, "%Y-%m-%dT%H:%M:%S").unwrap()
    }

    #[test]
    fn durations_read_and_print_as_written() {
        for text in [
            "P90D",
            "P36M",
            "PT72H",
            "P1Y6M",
            "P2W",
            "P1DT12H",
            "P1Y2M3W4DT5H",
        ] {
            assert_eq!(Retention::parse(text).unwrap().to_string(), text);
        }
        for bad in [
            "",
            "P",
            "90D",
            "P0D",
            "P1.5D",
            "PT30M",
            "P1D2Y",
            "P1D1D",
            "PT",
            "P1H",
            "P-1D",
            "P9999999Y",
            "p90d",
        ] {
            assert!(Retention::parse(bad).is_err(), "{bad:?} was taken");
        }
    }

    #[test]
    fn a_retention_is_a_whole_number_of_the_grains_periods() {
        let check = |text: &str, grain| Retention::parse(text).unwrap().check_grain(grain);
        assert!(check("PT72H", Grain::Hour).is_ok());
        assert!(check("P36M", Grain::Hour).is_ok());
        assert!(check("PT72H", Grain::Day).is_ok());
        assert!(check("PT36H", Grain::Day).is_err());
        assert!(check("P1Y", Grain::Month).is_ok());
        assert!(check("P90D", Grain::Month).is_err());
        assert!(check("P90D", Grain::Whole).is_err());
    }

    #[test]
    fn a_period_expires_once_it_ended_a_retention_ago() {
        let hourly = Retention::parse("PT72H").unwrap();
        let now = at("2026-10-20T12:05:00");
        let hour = |text| Period::parse(text, Grain::Hour).unwrap();
        // 2026-10-17T08 ended at 09:00, 72 hours before 2026-10-20T09:00.
        assert!(hourly.expired(hour("2026-10-17T08"), now));
        assert!(hourly.expired(hour("2026-10-17T11"), now));
        assert!(!hourly.expired(hour("2026-10-17T12"), now));
        assert_eq!(hourly.oldest_kept(Grain::Hour, now), hour("2026-10-17T12"));
        let monthly = Retention::parse("P3M").unwrap();
        let month = |text| Period::parse(text, Grain::Month).unwrap();
        // Months on the calendar: 2026-05-31 minus 3 months is 2026-02-28.
        let end_of_may = at("2026-05-31T00:00:00");
        assert_eq!(monthly.limit(end_of_may), at("2026-02-28T00:00:00"));
        assert!(monthly.expired(month("2026-01"), end_of_may));
        assert!(!monthly.expired(month("2026-02"), end_of_may));
        assert!(!monthly.expired(Period::whole(), end_of_may));
    }
}
