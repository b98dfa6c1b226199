//! Partition values: the hour, day or month a partition holds, by the grain
//! its table declares. A period is named by its label (`2026-10-12T13`,
//! `2026-10-12`, `2026-10`), which is what paths, the registry and the
//! ledger carry, and starts at an instant (UTC) or a date. A plain table
//! (no partition column) holds one pseudo-partition, `Period::whole()`.

use std::fmt;

use chrono::{Datelike, Duration, Months, NaiveDate, NaiveDateTime, NaiveTime, Timelike};
use serde::{Deserialize, Serialize};

/// How much time one partition holds.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize,
)]
#[serde(rename_all = "snake_case")]
pub enum Grain {
    Hour,
    #[default]
    Day,
    Month,
    /// A plain table's: one period holding every row (`Period::whole()`).
    Whole,
}

impl Grain {
    pub fn parse(text: &str) -> Option<Grain> {
        match text {
            "hour" => Some(Grain::Hour),
            "day" => Some(Grain::Day),
            "month" => Some(Grain::Month),
            "whole" => Some(Grain::Whole),
            _ => None,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Grain::Hour => "hour",
            Grain::Day => "day",
            Grain::Month => "month",
            Grain::Whole => "whole",
        }
    }

    /// The form of a label of this grain, for messages.
    pub fn form(self) -> &'static str {
        match self {
            Grain::Hour => "YYYY-MM-DDTHH",
            Grain::Day => "YYYY-MM-DD",
            Grain::Month => "YYYY-MM",
            Grain::Whole => "(none: the table has no partitions)",
        }
    }
}

/// One partition's period: its grain and its first instant (UTC; midnight
/// for days and months).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Period {
    start: NaiveDateTime,
    grain: Grain,
}

impl Period {
    /// A label of any grain: the forms differ in length, so a label names
    /// its grain.
    pub fn parse_any(text: &str) -> Option<Period> {
        [Grain::Day, Grain::Hour, Grain::Month]
            .into_iter()
            .find_map(|grain| Period::parse(text, grain))
    }

    /// A label of `grain`'s form, years 0001 to 9999 (Postgres has no year
    /// 0, and a partition's table name holds the year in four digits).
    pub fn parse(text: &str, grain: Grain) -> Option<Period> {
        if grain == Grain::Whole {
            return text.is_empty().then(Period::whole);
        }
        let b = text.as_bytes();
        let (date, hour) = match (grain, b.len()) {
            (Grain::Hour, 13) if b[10] == b'T' => (&text[..10], Some(&text[11..])),
            (Grain::Day, 10) => (text, None),
            (Grain::Month, 7) => (text, None),
            _ => return None,
        };
        let date = match grain {
            Grain::Month => NaiveDate::parse_from_str(&format!("{date}-01"), "%Y-%m-%d").ok()?,
            _ => NaiveDate::parse_from_str(date, "%Y-%m-%d").ok()?,
        };
        let plain = date.format("%Y-%m-%d").to_string();
        if !text.starts_with(&plain[..if grain == Grain::Month { 7 } else { 10 }]) {
            return None; // chrono reads `2026-1-5`; a label is zero-padded
        }
        let hour = match hour {
            Some(h) if h.len() == 2 && h.bytes().all(|d| d.is_ascii_digit()) => h.parse().ok()?,
            Some(_) => return None,
            None => 0,
        };
        let start = date.and_time(NaiveTime::from_hms_opt(hour, 0, 0)?);
        (1..=9999)
            .contains(&date.year())
            .then_some(Period { start, grain })
    }

    /// The period of `grain` that holds `instant`.
    pub fn containing(instant: NaiveDateTime, grain: Grain) -> Period {
        let date = instant.date();
        let start = match grain {
            Grain::Hour => date.and_hms_opt(instant.hour(), 0, 0),
            Grain::Day => date.and_hms_opt(0, 0, 0),
            Grain::Month => date.with_day(1).and_then(|d| d.and_hms_opt(0, 0, 0)),
            Grain::Whole => return Period::whole(),
        }
        .expect("the start of an hour, day or month exists");
        Period { start, grain }
    }

    /// The day partition of a date (a daily table's period).
    pub fn day(date: NaiveDate) -> Period {
        Period::containing(date.and_time(NaiveTime::MIN), Grain::Day)
    }

    /// A plain table's one pseudo-partition. Its label is `""`, which no
    /// ds can be, and its `_part` value a fixed date (0001-01-01); on the
    /// wire it is `null`.
    pub fn whole() -> Period {
        let start = NaiveDate::from_ymd_opt(1, 1, 1)
            .expect("0001-01-01 exists")
            .and_time(NaiveTime::MIN);
        Period {
            start,
            grain: Grain::Whole,
        }
    }

    pub fn is_whole(&self) -> bool {
        self.grain == Grain::Whole
    }

    /// The label as the wire shows it: none for `Period::whole()`.
    pub fn wire_label(&self) -> Option<String> {
        (!self.is_whole()).then(|| self.label())
    }

    pub fn grain(&self) -> Grain {
        self.grain
    }

    pub fn start(&self) -> NaiveDateTime {
        self.start
    }

    /// The first instant after the period.
    pub fn end(&self) -> NaiveDateTime {
        match self.grain {
            Grain::Hour => self.start + Duration::hours(1),
            Grain::Day => self.start + Duration::days(1),
            Grain::Month => self.start + Months::new(1),
            Grain::Whole => NaiveDateTime::MAX,
        }
    }

    /// The label: `2026-10-12T13`, `2026-10-12` or `2026-10`.
    pub fn label(&self) -> String {
        match self.grain {
            Grain::Hour => self.start.format("%Y-%m-%dT%H").to_string(),
            Grain::Day => self.start.format("%Y-%m-%d").to_string(),
            Grain::Month => self.start.format("%Y-%m").to_string(),
            Grain::Whole => String::new(),
        }
    }

    /// The label's digits, for a partition's table name (`2026101213`,
    /// `20261012`, `202610`): fixed width for a grain, so the names of one
    /// table's partitions never collide.
    pub fn digits(&self) -> String {
        if self.is_whole() {
            return "whole".into();
        }
        self.label().replace(['-', 'T'], "")
    }
}

/// A period is written as its label; `Period::whole()` as `null`.
impl Serialize for Period {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        if self.is_whole() {
            return serializer.serialize_none();
        }
        serializer.serialize_str(&self.label())
    }
}

/// Read as it is written: a label of any grain, or `null` for
/// `Period::whole()`.
impl<'de> Deserialize<'de> for Period {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        match Option::<String>::deserialize(deserializer)? {
            None => Ok(Period::whole()),
            Some(label) => Period::parse_any(&label).ok_or_else(|| {
                serde::de::Error::custom(format!("{label:?} is not a partition's label"))
            }),
        }
    }
}

impl fmt::Display for Period {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.label())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_period_is_read_back_as_it_is_written() {
        for label in ["2026-10-12T13", "2026-10-12", "2026-10"] {
            let period = Period::parse_any(label).unwrap();
            let json = serde_json::to_value(period).unwrap();
            assert_eq!(serde_json::from_value::<Period>(json).unwrap(), period);
        }
        let whole = serde_json::to_value(Period::whole()).unwrap();
        assert_eq!(
            serde_json::from_value::<Period>(whole).unwrap(),
            Period::whole()
        );
        assert!(serde_json::from_str::<Period>(r#""2026-13-01""#).is_err());
    }

    #[test]
    fn labels_match_their_grain_and_name_their_period() {
        let hour = Period::parse("2026-10-12T13", Grain::Hour).unwrap();
        assert_eq!(hour.label(), "2026-10-12T13");
        assert_eq!(hour.end().to_string(), "2026-10-12 14:00:00");
        assert_eq!(hour.digits(), "2026101213");
        let month = Period::parse("2026-12", Grain::Month).unwrap();
        assert_eq!(month.end().to_string(), "2027-01-01 00:00:00");
        assert_eq!(
            Period::parse("2026-10-12", Grain::Day).unwrap().digits(),
            "20261012"
        );
        for (text, grain) in [
            ("2026-10-12", Grain::Hour),
            ("2026-10-12T24", Grain::Hour),
            ("2026-10-12T1", Grain::Hour),
            ("2026-10", Grain::Day),
            ("0000-01-01", Grain::Day),
            ("2026-02-30", Grain::Day),
            ("2026-13", Grain::Month),
            ("2026-1-05", Grain::Day),
        ] {
            assert!(Period::parse(text, grain).is_none(), "{text} {grain:?}");
        }
    }

    #[test]
    fn an_instant_falls_in_one_period_of_each_grain() {
        let at = NaiveDate::from_ymd_opt(2026, 10, 12)
            .unwrap()
            .and_hms_opt(13, 59, 59)
            .unwrap();
        assert_eq!(Period::containing(at, Grain::Hour).label(), "2026-10-12T13");
        assert_eq!(Period::containing(at, Grain::Day).label(), "2026-10-12");
        assert_eq!(Period::containing(at, Grain::Month).label(), "2026-10");
    }

    #[test]
    fn the_whole_period_is_no_ds_and_shows_as_null() {
        let whole = Period::whole();
        assert_eq!(whole.label(), "");
        assert_eq!(Period::parse("", Grain::Whole), Some(whole));
        assert!(Period::parse_any("").is_none());
        assert_eq!(whole.wire_label(), None);
        assert_eq!(serde_json::to_string(&whole).unwrap(), "null");
        assert_eq!(whole.digits(), "whole");
    }
}
