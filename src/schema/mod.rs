//! A user table's definition: columns and types, partition column, key and
//! cursor; how a declaration is validated and how one definition may evolve
//! into another. Every item is re-exported here, so `crate::schema::X` is the
//! one path to it.
//!
//! - `table`: `ColumnType`, `Column`, `TableDef`, the width limits;
//! - `policy`: the table's policies for unknown fields, bad rows, repeated keys,
//!   and how a POST's rows meet the stored ones (`MergeMode`);
//! - `declaration`: `TableDeclaration` → `TableDef`;
//! - `change`: `SchemaWants`, `SchemaChange`, `plan_changes`;
//! - `error`: `SchemaError`;
//! - `audits`: `Audits` a load's staged rows must pass, and `AuditReport`;
//! - `audit_checks`: `Audits::parse`, audits checked against a table;
//! - `arrow_fields`: the Arrow field metadata idem writes and reads;
//! - `distribution`: where a table's rows live on a Citus cluster;
//! - `retention`: how long a partition is kept once its period ended.

pub mod arrow_fields;
mod audit_checks;
mod audits;
mod change;
mod declaration;
mod distribution;
mod error;
mod policy;
mod retention;
mod table;

pub use crate::period::Grain;
pub use audits::{AuditReport, AuditResult, Audits, Bounds, ChangeRatio};
pub use change::{plan_changes, SchemaChange, SchemaWants};
pub use declaration::{Adopt, AdoptRepeats, TableDeclaration, DEFAULT_PARTITION_COLUMN};
pub use distribution::{Distribution, DistributionColumn, DistributionDefault, ROW_ID_COLUMN};
pub use error::SchemaError;
pub use policy::{
    BadRowPolicy, DuplicatePolicy, HistoryKind, MergeMode, RetryWindow, SchemaPolicy,
};
pub use retention::Retention;
pub use table::{check_width, Column, ColumnType, TableDef, MAX_ROW_BYTES, MAX_USER_COLUMNS};
