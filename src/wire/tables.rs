//! The catalog as listed and shown: a table (`GET /tables`, `GET
//! /tables/{table}`) and a table's partitions (`GET /partitions/{table}`).

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use crate::ids::LoadId;
use crate::schema::TableDef;

/// A table: its definition and what it holds.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TableView {
    #[serde(flatten)]
    pub def: TableDef,
    /// Made by a write, from its body's fields, not declared.
    pub inferred: bool,
    pub partitions: i64,
    pub rows: i64,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
    /// With a `retention`: the oldest period kept now (older ones are
    /// dropped, and a write to one is refused).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub oldest_kept: Option<String>,
}

/// A partition as listed: the registry's entry and the bounds of its
/// period (`from` inclusive, `to` exclusive, UTC).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PartitionView {
    /// The partition's label (`2026-10-12`, `2026-10-12T13`, `2026-10`).
    pub ds: String,
    pub rows: u64,
    pub content_sha256: String,
    pub load_id: LoadId,
    pub published_at: DateTime<Utc>,
    pub from: Option<String>,
    pub to: Option<String>,
}
