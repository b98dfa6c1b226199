//! Loads that outlive a request (`POST /loads`): what a load targets, its
//! opening under an Idempotency-Key, and its abandonment. Its parts are
//! `load_part`'s, its audit and publish `load_publish`'s.

use std::collections::BTreeSet;

use chrono::Utc;
use uuid::Uuid;

use super::error::{TargetError, MAX_TARGET_PARTITIONS};
use super::{Pipeline, WriteError, WriteResult};
use crate::access::Actor;
use crate::idempotency::IdempotencyKey;
use crate::names::TableName;
use crate::period::Period;
use crate::problem::ProblemCode;
use crate::schema::Audits;
use crate::schema::TableDef;
use crate::store::catalog;
use crate::store::staged_loads::{self, LoadPart, NewLoad, StagedLoad, StagedStatus};
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

/// A `POST /loads`.
pub struct OpenLoad {
    pub table: TableName,
    pub target: serde_json::Value,
    pub audits: Option<serde_json::Value>,
    pub actor: Actor,
    pub key: IdempotencyKey,
    /// SHA-256 of the request, so the same key with another is refused.
    pub fingerprint: String,
    /// How long it stays open for parts and a publish.
    pub ttl: std::time::Duration,
}

/// A staged load as `GET /loads/{id}` shows it.
pub struct LoadView {
    pub load: StagedLoad,
    pub parts: Vec<LoadPart>,
}

impl Pipeline {
    /// Opens a load, or answers the one the key opened (the bool: new).
    pub(super) async fn open(&self, req: OpenLoad) -> WriteResult<(LoadView, bool)> {
        let mut conn = self.store.acquire().await?;
        let def = catalog::table_def(&mut conn, &req.table)
            .await?
            .ok_or_else(|| WriteError::TableNotFound(req.table.clone()))?;
        let target = LoadTarget::from_json(&req.target, &def)?;
        let audits = match &req.audits {
            Some(value) => Audits::parse(value, &def)?,
            None => Audits::default(),
        };
        let principal = req.actor.principal();
        let new = NewLoad {
            load_id: Uuid::now_v7(),
            table: &req.table,
            target: target.to_json(),
            audits: serde_json::to_value(&audits).expect("audits serialize"),
            principal: &principal,
            idempotency_key: req.key.as_str(),
            fingerprint: &req.fingerprint,
            token_id: req.actor.token_id,
            expires_at: Utc::now() + req.ttl,
        };
        let (load, created) = staged_loads::open(&mut conn, &new).await?;
        if load.fingerprint != req.fingerprint {
            return Err(WriteError::KeyReused);
        }
        let parts = staged_loads::parts(&mut conn, load.load_id).await?;
        Ok((LoadView { load, parts }, created))
    }

    /// The staged load `load_id`, with its parts.
    /// (A load open past its time is expired first.)
    pub(super) async fn view(&self, load_id: Uuid) -> WriteResult<Option<LoadView>> {
        let mut conn = self.store.acquire().await?;
        let Some(mut load) = staged_loads::get(&mut conn, load_id, false).await? else {
            return Ok(None);
        };
        if load.status.is_open() && load.expires_at < Utc::now() {
            self.store.expire_if_due(load_id).await?;
            load = staged_loads::get(&mut conn, load_id, false)
                .await?
                .ok_or(WriteError::LoadNotFound(load_id))?;
        }
        let parts = staged_loads::parts(&mut conn, load_id).await?;
        Ok(Some(LoadView { load, parts }))
    }

    /// Abandons the load: its parts dropped. Waits for a publish in
    /// progress; a published load stays published (409).
    pub(super) async fn abandon(&self, load_id: Uuid) -> WriteResult<LoadView> {
        let mut conn = self.store.acquire().await?;
        match staged_loads::abandon(&mut conn, load_id).await? {
            None => return Err(WriteError::LoadNotFound(load_id)),
            Some(StagedStatus::Published) => return Err(WriteError::LoadPublished(load_id)),
            Some(_) => {}
        }
        drop(conn);
        self.view(load_id)
            .await?
            .ok_or(WriteError::LoadNotFound(load_id))
    }
}
