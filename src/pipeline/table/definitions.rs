//! The table definitions this process remembers, for decoding a small
//! body before any read of the catalog.

use std::collections::HashMap;
use std::sync::Mutex;

use crate::names::TableName;
use crate::schema::TableDef;

/// Table definitions this process has read, so that a small POST can be
/// decoded before any read of the catalog. Only a hint: a batch checks the
/// definition it was decoded for against the catalog, in its transaction,
/// and a POST written alone reads it in its claim (see `rows/post.rs`).
#[derive(Default)]
pub struct Definitions {
    tables: Mutex<HashMap<TableName, TableDef>>,
}

impl Definitions {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<TableName, TableDef>> {
        self.tables.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub fn get(&self, table: &TableName) -> Option<TableDef> {
        self.lock().get(table).cloned()
    }

    pub fn remember(&self, def: &TableDef) {
        self.lock().insert(def.name.clone(), def.clone());
    }

    pub fn forget(&self, table: &TableName) {
        self.lock().remove(table);
    }
}
