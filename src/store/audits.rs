//! Placeholder of the audits' SQL (replaced by the real module).

use sqlx::PgConnection;

use super::sql::Ident;
use super::StoreResult;
use crate::period::Period;
use crate::schema::audits::{AuditReport, AuditResult, Audits};
use crate::schema::TableDef;

pub struct StagedPartition<'a> {
    pub period: Period,
    pub stage: &'a Ident,
    pub rows: u64,
    pub live_rows: Option<u64>,
}

pub async fn run_audits(
    _conn: &mut PgConnection,
    _def: &TableDef,
    audits: &Audits,
    staged: &[StagedPartition<'_>],
) -> StoreResult<AuditReport> {
    let mut results = Vec::new();
    if let Some(min) = audits.min_rows {
        for s in staged {
            results.push(AuditResult {
                audit: "min_rows".into(),
                partition: Some(s.period.label()),
                columns: None,
                passed: s.rows >= min,
                expected: min.into(),
                found: s.rows.into(),
                examples: Vec::new(),
            });
        }
    }
    Ok(AuditReport {
        passed: results.iter().all(|r| r.passed),
        audits: results,
    })
}
