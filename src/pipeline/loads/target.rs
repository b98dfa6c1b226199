//! What a load replaces: partitions named, a range of them, or the whole
//! table; read from a request, checked against the table's grain and the
//! most partitions one load may target.

use std::collections::BTreeSet;

use crate::period::Period;
use crate::pipeline::error::{TargetError, MAX_TARGET_PARTITIONS};
use crate::problem::ProblemCode;
use crate::schema::TableDef;
use crate::wire::loads::Target;

/// What a load replaces.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LoadTarget {
    /// These partitions (in order, each once).
    Partitions(Vec<Period>),
    /// Every partition from `from` to `to`, both included.
    Range { from: Period, to: Period },
    /// The whole table.
    Table,
}

impl LoadTarget {
    /// The range a `from`/`to` load replaces, as its ledger row records it.
    pub fn range_bounds(&self) -> Option<(Period, Period)> {
        match self {
            LoadTarget::Range { from, to } => Some((*from, *to)),
            _ => None,
        }
    }

    /// The partition of a load of one, whose rows may omit its value.
    pub fn only_partition(&self) -> Option<Period> {
        match self {
            LoadTarget::Partitions(one) if one.len() == 1 => Some(one[0]),
            _ => None,
        }
    }

    /// The partitions it replaces; `None` for the whole table (whatever
    /// partitions its rows fall in, and the others dropped).
    pub fn periods(&self) -> Option<Vec<Period>> {
        match self {
            LoadTarget::Partitions(periods) => Some(periods.clone()),
            LoadTarget::Range { from, to } => Some(periods_through(*from, *to)),
            LoadTarget::Table => None,
        }
    }

    /// A range of `def`'s partitions, checked.
    pub fn range(def: &TableDef, from: &str, to: &str) -> Result<LoadTarget, TargetError> {
        let from = parse_period(def, from)?;
        let to = parse_period(def, to)?;
        if from > to {
            return Err(TargetError::Backward { from, to });
        }
        let target = LoadTarget::Range { from, to };
        check_size(periods_through(from, to).len())?;
        Ok(target)
    }

    /// The target of a `POST /loads` body, checked against the table.
    pub fn from_json(value: &serde_json::Value, def: &TableDef) -> Result<LoadTarget, TargetError> {
        let object = value
            .as_object()
            .filter(|o| o.len() == 1)
            .ok_or(TargetError::Malformed)?;
        match object.iter().next().expect("one member") {
            (kind, serde_json::Value::Bool(true)) if kind == "table" => Ok(LoadTarget::Table),
            (kind, serde_json::Value::Array(labels)) if kind == "partitions" => {
                let mut periods = BTreeSet::new();
                for label in labels {
                    let label = label.as_str().ok_or(TargetError::Malformed)?;
                    periods.insert(parse_period(def, label)?);
                }
                if periods.is_empty() {
                    return Err(TargetError::Empty);
                }
                check_size(periods.len())?;
                Ok(LoadTarget::Partitions(periods.into_iter().collect()))
            }
            (kind, serde_json::Value::Object(range)) if kind == "range" && range.len() == 2 => {
                let bound = |name: &str| {
                    range
                        .get(name)
                        .and_then(|v| v.as_str())
                        .ok_or(TargetError::Malformed)
                };
                LoadTarget::range(def, bound("from")?, bound("to")?)
            }
            _ => Err(TargetError::Malformed),
        }
    }

    /// Its stored (and wire) form.
    pub fn to_json(&self) -> serde_json::Value {
        match self {
            LoadTarget::Partitions(periods) => {
                Target::Partitions(periods.iter().map(Period::label).collect())
            }
            LoadTarget::Range { from, to } => Target::Range {
                from: from.label(),
                to: to.label(),
            },
            LoadTarget::Table => Target::TABLE,
        }
        .to_value()
    }
}

fn parse_period(def: &TableDef, label: &str) -> Result<Period, TargetError> {
    if def.is_plain() {
        return Err(TargetError::NotPartitioned(def.name.clone()));
    }
    Period::parse(label, def.grain).ok_or_else(|| TargetError::NotAPeriod {
        label: label.chars().take(40).collect(),
        table: def.name.clone(),
        grain: def.grain,
    })
}

fn check_size(partitions: usize) -> Result<(), TargetError> {
    if partitions > MAX_TARGET_PARTITIONS {
        return Err(TargetError::TooMany(partitions));
    }
    Ok(())
}

impl TargetError {
    /// The stable, machine-readable code.
    pub fn code(&self) -> ProblemCode {
        match self {
            TargetError::NotPartitioned(_) => ProblemCode::NotPartitioned,
            TargetError::NotAPeriod { .. } => ProblemCode::InvalidDs,
            TargetError::Backward { .. } | TargetError::TooMany(_) | TargetError::Empty => {
                ProblemCode::InvalidRange
            }
            TargetError::Malformed => ProblemCode::InvalidRequest,
        }
    }
}

/// The partitions a load of `def` replaces: `target`'s; for the whole of a
/// table without partitions, its one (so that an empty body empties it).
pub fn target_periods(def: &TableDef, target: &LoadTarget) -> Option<Vec<Period>> {
    match target {
        LoadTarget::Table if def.is_plain() => Some(vec![Period::whole()]),
        target => target.periods(),
    }
}

/// Every period from `from` to `to`, both included (at most one more than
/// `MAX_TARGET_PARTITIONS`, so that a huge range is told by its count).
pub fn periods_through(from: Period, to: Period) -> Vec<Period> {
    let mut periods = vec![from];
    let mut at = from;
    while at < to && periods.len() <= MAX_TARGET_PARTITIONS {
        at = Period::containing(at.end(), from.grain());
        periods.push(at);
    }
    periods
}
