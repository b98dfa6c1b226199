//! Write-audit-publish checks: the `Audits` a table declares (or a load or
//! a request adds), how a load's audits overlay the table's, and the
//! `AuditReport` a run of them answers. Validating them against a table is
//! `audit_checks`'s; running them is the store's (`store::audits`).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::names::ColumnName;

/// The most `|new - live| / live` may be: finite and not negative, equal
/// by its bits so that `TableDef` stays `Eq`.
#[derive(Clone, Copy, Debug, Serialize, Deserialize)]
#[serde(transparent)]
pub struct ChangeRatio(f64);

impl ChangeRatio {
    pub fn get(self) -> f64 {
        self.0
    }
}

impl PartialEq for ChangeRatio {
    fn eq(&self, other: &Self) -> bool {
        self.0.to_bits() == other.0.to_bits()
    }
}

impl Eq for ChangeRatio {}

/// A `range` audit's bounds, both inclusive; at least one is given.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Bounds {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max: Option<Value>,
}

/// The checks staged rows must pass before they are published. Every key
/// is optional; the row counts and the change ratio are per partition, the
/// others over all staged rows.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Audits {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_rows: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_rows: Option<u64>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub not_null: Vec<ColumnName>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub unique: Vec<ColumnName>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub accepted_values: BTreeMap<ColumnName, Vec<Value>>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub range: BTreeMap<ColumnName, Bounds>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_change_ratio: Option<ChangeRatio>,
}

impl Audits {
    /// `self` with every key `over` sets replaced by `over`'s.
    pub fn overlay(&self, over: &Audits) -> Audits {
        fn pick<T: Clone>(over: &T, base: &T, set: bool) -> T {
            if set {
                over.clone()
            } else {
                base.clone()
            }
        }
        Audits {
            min_rows: over.min_rows.or(self.min_rows),
            max_rows: over.max_rows.or(self.max_rows),
            not_null: pick(&over.not_null, &self.not_null, !over.not_null.is_empty()),
            unique: pick(&over.unique, &self.unique, !over.unique.is_empty()),
            accepted_values: pick(
                &over.accepted_values,
                &self.accepted_values,
                !over.accepted_values.is_empty(),
            ),
            range: pick(&over.range, &self.range, !over.range.is_empty()),
            max_change_ratio: over.max_change_ratio.or(self.max_change_ratio),
        }
    }

    pub fn is_empty(&self) -> bool {
        self == &Audits::default()
    }
}

/// What a run of audits found: `passed` when every audit passed.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct AuditReport {
    pub passed: bool,
    pub audits: Vec<AuditResult>,
}

/// One audit's outcome, for one partition (the per-partition audits) or
/// one column (the per-column ones).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct AuditResult {
    pub audit: String,
    pub partition: Option<String>,
    pub columns: Option<Vec<String>>,
    pub passed: bool,
    pub expected: Value,
    pub found: Value,
    /// Up to 5 rows that fail it, as `GET` shows rows.
    pub examples: Vec<Value>,
}
