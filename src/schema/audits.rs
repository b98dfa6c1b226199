//! Placeholder of the audits' vocabulary (replaced by the real module).

use serde::{Deserialize, Serialize};

use super::{SchemaError, TableDef};

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Audits {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_rows: Option<u64>,
}

impl Audits {
    pub fn parse(value: &serde_json::Value, _def: &TableDef) -> Result<Audits, SchemaError> {
        serde_json::from_value(value.clone()).map_err(|e| SchemaError::Invalid(e.to_string()))
    }
    pub fn overlay(&self, over: &Audits) -> Audits {
        Audits {
            min_rows: over.min_rows.or(self.min_rows),
        }
    }
    pub fn is_empty(&self) -> bool {
        self.min_rows.is_none()
    }
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct AuditReport {
    pub passed: bool,
    pub audits: Vec<AuditResult>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct AuditResult {
    pub audit: String,
    pub partition: Option<String>,
    pub columns: Option<Vec<String>>,
    pub passed: bool,
    pub expected: serde_json::Value,
    pub found: serde_json::Value,
    pub examples: Vec<serde_json::Value>,
}
