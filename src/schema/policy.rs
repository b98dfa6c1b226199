//! The policies that decide what a write does. A table declares four beside
//! its columns: unknown fields (`SchemaPolicy`), bad rows (`BadRowPolicy`),
//! repeated keys (`DuplicatePolicy`) and how long a quarantined row is
//! retried (`RetryWindow`); a `POST /rows` chooses how its rows meet the
//! stored ones (`MergeMode`). Each reads from and writes back to its text.

use serde::{Deserialize, Deserializer, Serialize};

use super::error::{invalid, SchemaError};

/// What a write does with a field the table has no column for.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SchemaPolicy {
    /// The row is bad (422 naming the field).
    #[default]
    Freeze,
    /// The field is dropped, the rest of the row written; the receipt
    /// counts the dropped values (`discarded_fields`).
    DiscardUnknown,
    /// The table grows to fit: a new field adds a nullable column of its
    /// values' type, a value too wide for its column widens the column
    /// where that is safe (see `SchemaWants`).
    Evolve,
}

impl SchemaPolicy {
    pub(super) fn parse(text: &str) -> Result<Self, SchemaError> {
        match text {
            "freeze" => Ok(SchemaPolicy::Freeze),
            "discard_unknown" => Ok(SchemaPolicy::DiscardUnknown),
            "evolve" => Ok(SchemaPolicy::Evolve),
            other => Err(invalid(format!(
                "schema {other:?} is not \"freeze\", \"discard_unknown\" or \"evolve\""
            ))),
        }
    }
}

/// What a write does with a bad row (a value that does not fit its column,
/// an unknown field under `freeze`, a broken record).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum BadRowPolicy {
    /// The whole request is refused (422 naming every bad row); nothing is
    /// written.
    #[default]
    Reject,
    /// The good rows are written; each bad one is kept, as sent, in the
    /// rejects store (`GET /rejects`), to be replayed once the table fits it.
    Quarantine,
}

impl BadRowPolicy {
    pub fn parse(text: &str) -> Result<Self, SchemaError> {
        match text {
            "reject" => Ok(BadRowPolicy::Reject),
            "quarantine" => Ok(BadRowPolicy::Quarantine),
            other => Err(invalid(format!(
                "bad_rows {other:?} is not \"reject\" or \"quarantine\""
            ))),
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            BadRowPolicy::Reject => "reject",
            BadRowPolicy::Quarantine => "quarantine",
        }
    }
}

/// What a write does with rows of one body that share a primary key.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DuplicatePolicy {
    /// One version is written: the largest cursor, then the smallest row
    /// hash; the others are dropped (and logged).
    #[default]
    KeepOne,
    /// No version of a repeated key is written; all are set aside (and
    /// logged) for a person to look at.
    Hold,
    /// Every version of a repeated key is a bad row (`bad_rows` decides).
    Reject,
}

impl DuplicatePolicy {
    pub fn parse(text: &str) -> Result<Self, SchemaError> {
        match text {
            "keep_one" => Ok(DuplicatePolicy::KeepOne),
            "hold" => Ok(DuplicatePolicy::Hold),
            "reject" => Ok(DuplicatePolicy::Reject),
            other => Err(invalid(format!(
                "duplicates {other:?} is not \"keep_one\", \"hold\" or \"reject\""
            ))),
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            DuplicatePolicy::KeepOne => "keep_one",
            DuplicatePolicy::Hold => "hold",
            DuplicatePolicy::Reject => "reject",
        }
    }
}

/// How long a quarantined row is retried by a replay: past it, the row is
/// `expired` (kept until deleted, never retried). Written and read as a
/// count of hours, days, minutes or seconds: `72h`, `7d`, `30m`, `90s`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RetryWindow {
    pub secs: u64,
}

impl Default for RetryWindow {
    fn default() -> Self {
        RetryWindow { secs: 72 * 3600 }
    }
}

impl RetryWindow {
    const UNITS: [(char, u64); 4] = [('d', 86_400), ('h', 3_600), ('m', 60), ('s', 1)];
    /// Ten years: a longer window is a mistake, not a policy.
    const MAX_SECS: u64 = 10 * 366 * 86_400;

    pub fn parse(text: &str) -> Result<Self, SchemaError> {
        let refuse = || {
            invalid(format!(
                "reject_retry_window {text:?} is not a duration such as \"72h\", \"7d\", \"30m\" or \"90s\" (at most ten years)"
            ))
        };
        let unit = text.chars().last().ok_or_else(refuse)?;
        let (_, scale) = Self::UNITS
            .iter()
            .find(|(u, _)| *u == unit)
            .ok_or_else(refuse)?;
        let count: u64 = text[..text.len() - 1].parse().map_err(|_| refuse())?;
        let secs = count.checked_mul(*scale).ok_or_else(refuse)?;
        if secs == 0 || secs > Self::MAX_SECS {
            return Err(refuse());
        }
        Ok(RetryWindow { secs })
    }

    /// The window in whole hours when it is, else minutes, else seconds
    /// (`7d` reads back as `168h`).
    pub fn text(self) -> String {
        let (unit, scale) = Self::UNITS[1..]
            .iter()
            .find(|(_, scale)| self.secs.is_multiple_of(*scale))
            .expect("every count of seconds is whole seconds");
        format!("{}{unit}", self.secs / scale)
    }
}

impl Serialize for RetryWindow {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.text())
    }
}

impl<'de> Deserialize<'de> for RetryWindow {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = String::deserialize(d)?;
        RetryWindow::parse(&text).map_err(serde::de::Error::custom)
    }
}

/// What a table keeps beside its current rows.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum HistoryKind {
    /// Every version of every key, with its validity range (slowly changing
    /// dimension, type 2), in a companion table.
    Scd2,
}

impl HistoryKind {
    pub fn parse(text: &str) -> Result<Self, SchemaError> {
        match text {
            "scd2" => Ok(HistoryKind::Scd2),
            other => Err(invalid(format!("history {other:?} is not \"scd2\""))),
        }
    }
}

/// How a `POST /rows` body meets the rows already stored under its keys.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum MergeMode {
    /// Upsert by key; with a cursor, only a larger-or-equal version replaces.
    Merge,
    /// Plain insert (tables without a key).
    Append,
    /// Insert keys that are absent; the stored version stays.
    InsertMissing,
    /// Like merge, but an existing key's absent fields keep their stored
    /// values: only the fields a row gives change.
    Patch,
    /// Every row is a version, identified by its key and cursor: a version
    /// stored already is not written again (a table whose `write_mode` is
    /// `versions` only).
    Versions,
}

impl MergeMode {
    /// Whether an existing key's stored version may be replaced (and a
    /// tombstone may delete it).
    pub fn replaces(self) -> bool {
        matches!(self, MergeMode::Merge | MergeMode::Patch)
    }

    pub fn as_str(self) -> &'static str {
        match self {
            MergeMode::Merge => "merge",
            MergeMode::Append => "append",
            MergeMode::InsertMissing => "insert_missing",
            MergeMode::Patch => "patch",
            MergeMode::Versions => "versions",
        }
    }

    /// Parses a declared `write_mode`.
    pub fn parse(text: &str) -> Result<Self, SchemaError> {
        Self::from_name(text).ok_or_else(|| {
            invalid(format!(
                "write_mode {text:?} is not merge, patch, insert_missing, append or versions"
            ))
        })
    }

    /// The mode `as_str` names.
    pub fn from_name(name: &str) -> Option<Self> {
        [
            MergeMode::Merge,
            MergeMode::Append,
            MergeMode::InsertMissing,
            MergeMode::Patch,
            MergeMode::Versions,
        ]
        .into_iter()
        .find(|m| m.as_str() == name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_retry_window_reads_any_unit_and_writes_whole_hours_if_it_can() {
        for (text, secs, shown) in [
            ("72h", 259_200, "72h"),
            ("90m", 5_400, "90m"),
            ("7d", 604_800, "168h"),
            ("3601s", 3_601, "3601s"),
        ] {
            let window = RetryWindow::parse(text).unwrap();
            assert_eq!(window.secs, secs);
            assert_eq!(window.text(), shown);
            assert_eq!(RetryWindow::parse(shown).unwrap(), window);
        }
        for bad in [
            "",
            "h",
            "0h",
            "-1h",
            "3w",
            "1.5h",
            "99999999999999999d",
            "4000d",
        ] {
            assert!(RetryWindow::parse(bad).is_err(), "{bad:?}");
        }
        assert_eq!(RetryWindow::default().text(), "72h");
    }
}
