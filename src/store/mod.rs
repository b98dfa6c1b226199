//! Every SQL statement idem runs: the catalog and its DDL, staging with COPY,
//! the partition swap, the registry, the ledger and the janitor.
//!
//! User-supplied names reach SQL only through `names::quote_ident`, after
//! `names::validate_*`; values travel as bind parameters or COPY data.

pub mod catalog;
pub mod idempotency;
pub mod janitor;
pub mod ledger;
pub mod merge;
pub mod partitions;
pub mod publish;
pub mod stage;

use std::str::FromStr;
use std::time::Duration;

use chrono::NaiveDate;
use sha2::{Digest, Sha256};
use sqlx::postgres::{PgConnectOptions, PgPool, PgPoolOptions};

use crate::names::quote_ident;
use crate::schema::TableDef;

pub static MIGRATOR: sqlx::migrate::Migrator = sqlx::migrate!("./migrations");

/// Postgres schemas that hold user data (see the first migration).
pub const DATA_SCHEMA: &str = "idem_data";
pub const PARTS_SCHEMA: &str = "idem_parts";
pub const STAGING_SCHEMA: &str = "idem_staging";

#[derive(Clone)]
pub struct Store {
    pool: PgPool,
}

impl Store {
    pub async fn connect(url: &str, max_connections: u32) -> Result<Store, sqlx::Error> {
        Self::connect_with(PgConnectOptions::from_str(url)?, max_connections).await
    }

    pub async fn connect_with(
        options: PgConnectOptions,
        max_connections: u32,
    ) -> Result<Store, sqlx::Error> {
        let options = options
            .application_name("idem")
            // Timestamps read back (JSON, CSV) in UTC whatever the server's setting.
            .options([("TimeZone", "UTC")]);
        let pool = PgPoolOptions::new()
            .max_connections(max_connections)
            .acquire_timeout(Duration::from_secs(10))
            .connect_with(options)
            .await?;
        Ok(Store { pool })
    }

    pub fn from_pool(pool: PgPool) -> Store {
        Store { pool }
    }

    pub fn pool(&self) -> &PgPool {
        &self.pool
    }

    pub async fn migrate(&self) -> Result<(), sqlx::migrate::MigrateError> {
        MIGRATOR.run(&self.pool).await
    }

    pub async fn ping(&self) -> Result<(), sqlx::Error> {
        sqlx::query("select 1")
            .execute(&self.pool)
            .await
            .map(|_| ())
    }
}

/// An advisory-lock key: the first 8 bytes of a SHA-256 of the parts. Keys
/// of different kinds never meet because the kind is hashed in.
pub fn lock_key(kind: &str, parts: &[&str]) -> i64 {
    let mut h = Sha256::new();
    h.update(kind.as_bytes());
    for p in parts {
        h.update(b"\0");
        h.update(p.as_bytes());
    }
    i64::from_be_bytes(h.finalize()[..8].try_into().unwrap())
}

/// The lock that serializes a table's schema changes (held exclusively by
/// `catalog::declare`, shared by a swap, which must not meet a half-changed table).
pub fn table_lock_key(table: &str) -> i64 {
    lock_key("table", &[table])
}

pub fn partition_lock_key(table: &str, ds: NaiveDate) -> i64 {
    lock_key("partition", &[table, &ds.to_string()])
}

/// The parent (partitioned) table: `idem_data."orders"`.
pub fn parent_table(table: &str) -> String {
    format!("{DATA_SCHEMA}.{}", quote_ident(table))
}

/// A partition's own table name: `orders__20261012`. The fixed-width suffix
/// keeps names of different tables apart, and fits in 63 bytes.
pub fn partition_name(table: &str, ds: NaiveDate) -> String {
    format!("{table}__{}", ds.format("%Y%m%d"))
}

pub fn partition_table(table: &str, ds: NaiveDate) -> String {
    format!("{PARTS_SCHEMA}.{}", quote_ident(&partition_name(table, ds)))
}

/// A date as a SQL literal, for the statements that take no parameters
/// (DDL, COPY). A `NaiveDate` prints only digits and dashes.
pub fn date_literal(ds: NaiveDate) -> String {
    format!("date '{}'", ds.format("%Y-%m-%d"))
}

/// The column list of a user table, system columns included, as DDL:
/// `_load_id` (the load that wrote the row), `_row_id` (see API.md) and
/// `_row_hash` (SHA-256 of the row's canonical encoding; a partition's
/// content hash is built from these).
pub fn column_ddl(def: &TableDef) -> String {
    let mut cols: Vec<String> = def
        .columns
        .iter()
        .map(|c| {
            format!(
                "{} {}{}",
                quote_ident(&c.name),
                c.ty.sql_name(),
                if c.nullable { "" } else { " not null" }
            )
        })
        .collect();
    cols.push("\"_load_id\" uuid not null".into());
    cols.push("\"_row_id\" bytea not null".into());
    cols.push("\"_row_hash\" bytea not null".into());
    cols.join(", ")
}

/// The columns of a partition's unique index: the partition column, then
/// the primary key, or `_row_id` for a table without one. (`_row_id` is a
/// function of the key, so both say the same; a bigint key sorts far faster
/// than a 32-byte digest when the index is built.)
pub fn key_index_columns(def: &TableDef) -> String {
    let mut cols = vec![quote_ident(&def.partition_by)];
    if def.primary_key.is_empty() {
        cols.push("\"_row_id\"".into());
    } else {
        cols.extend(def.primary_key.iter().map(|k| quote_ident(k)));
    }
    cols.join(", ")
}

/// The user columns, quoted and comma-separated.
pub fn column_list(def: &TableDef) -> String {
    def.columns
        .iter()
        .map(|c| quote_ident(&c.name))
        .collect::<Vec<_>>()
        .join(", ")
}

pub fn is_unique_violation(err: &sqlx::Error) -> bool {
    matches!(err, sqlx::Error::Database(db) if db.code().as_deref() == Some("23505"))
}
