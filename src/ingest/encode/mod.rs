//! A raw record checked against a table and turned into one binary COPY tuple, with
//! its row digest (for the content hash) and its deterministic `_row_id`.
//!
//! `RowEncoder::encode` takes a record through the steps, one file each:
//! `check` types its fields and checks its partition value and key,
//! `digest` hashes it and makes its row id, `tuple` writes its COPY tuple;
//! `wants` collects what rows need of the table under `schema: evolve`.
//! Each step is an `impl RowEncoder` of its own; the files import this one,
//! never each other, except `check` taking `tuple`'s period start.

mod check;
mod digest;
#[cfg(test)]
mod tests;
mod tuple;
mod wants;

use crate::ids::LoadId;
use crate::ingest::cell::Cell;
use crate::ingest::key_order::KeyOrder;
use crate::ingest::{ErrorLog, RawRecord, RowError};
use crate::period::Period;
use crate::schema::{ColumnType, SchemaWants, TableDef};

pub use digest::{row_hash_of_text, row_id_of_key_text};

/// The digests of one accepted row.
#[derive(Clone, Copy, Debug)]
pub struct EncodedRow {
    /// SHA-256 of the canonical encoding of the whole row.
    pub row_hash: [u8; 32],
    /// SHA-256 of table, partition value and key (or, without a key, of the
    /// whole row), so that every retry of a record gets the same id.
    pub row_id: [u8; 32],
    /// A tombstone (`"_deleted": true`).
    pub deleted: bool,
    /// The partition the row belongs to.
    pub period: Option<Period>,
}

/// Where rows are going, which decides how they are encoded.
#[derive(Clone, Debug)]
pub struct EncodeOptions {
    /// The partition the body is for (PUT); `None` when each row names its
    /// own (POST), and the partition column is then required.
    pub ds: Option<Period>,
    /// Mixed into the row id of rows without a key (an append): the
    /// idempotency scope, so a retry of one request numbers its rows alike
    /// and another request's identical rows stay distinct rows.
    pub row_id_scope: Option<Vec<u8>>,
    /// Read `"_deleted": true` as a tombstone, and append a boolean
    /// `_deleted` field to every tuple.
    pub tombstones: bool,
    /// The partitions rows may fall in (a load's target); any when `None`.
    /// A row outside is a bad row.
    pub allowed: Option<std::sync::Arc<std::collections::BTreeSet<Period>>>,
    /// Append a `_present` field to every tuple: a bitmap of the columns the
    /// record gave (bit `i % 8` of byte `i / 8` for column `i`, as
    /// Postgres's `get_bit` numbers them), for a patch.
    pub presence: bool,
}

pub struct RowEncoder<'d> {
    def: &'d TableDef,
    options: EncodeOptions,
    load_id: LoadId,
    /// None for a plain table, whose rows all fall in `Period::whole()`.
    partition_index: Option<usize>,
    key_indexes: Vec<usize>,
    /// Columns whose value failed its type check (reported once, not again as null).
    bad: Vec<bool>,
    canonical: Vec<u8>,
    /// The current row's period (set by `check_partition`).
    row_period: Option<Period>,
    /// The label of the last period a row id was made for: most rows of a
    /// body share it, and it is not made again for each.
    label: Option<(Period, String)>,
    /// Values of unknown fields dropped (under `schema: discard_unknown`).
    discarded_fields: u64,
    /// What rows need of the table, when collected (`collect_wants`).
    wants: Option<SchemaWants>,
    /// A columnar body's fields' types (`set_field_types`): what a wanted
    /// column is made, rather than what its values look like.
    field_types: std::collections::HashMap<String, ColumnType>,
    /// The current row needs something of the table.
    row_wants: bool,
    /// Whether the rows came in the unique index's order.
    key_order: KeyOrder,
}

pub use crate::binary_copy::{HEADER as COPY_BINARY_HEADER, TRAILER as COPY_BINARY_TRAILER};

fn row_error(record: &RawRecord<'_>, column: Option<&str>, message: String) -> RowError {
    RowError {
        line: record.line,
        record: record.record,
        column: column.map(str::to_string),
        message: match record.row_group {
            Some(row_group) => super::in_row_group(message, row_group),
            None => message,
        },
    }
}

impl<'d> RowEncoder<'d> {
    pub fn new(def: &'d TableDef, options: EncodeOptions, load_id: LoadId) -> Self {
        RowEncoder {
            def,
            options,
            load_id,
            partition_index: def.partition_index(),
            // A stored row is found by its identity: a version's id differs
            // from its key's other versions'.
            key_indexes: def
                .identity()
                .into_iter()
                .map(|k| def.column_index(k).expect("validated key"))
                .collect(),
            bad: vec![false; def.columns.len()],
            discarded_fields: 0,
            wants: None,
            field_types: Default::default(),
            row_wants: false,
            canonical: Vec::with_capacity(256),
            row_period: None,
            label: None,
            key_order: KeyOrder::new(!def.identity().is_empty()),
        }
    }

    /// The partition of the record last encoded, when its partition column
    /// could be read (a bad row's too).
    pub fn last_period(&self) -> Option<Period> {
        self.row_period
    }

    /// Whether the rows encoded so far came in the unique index's order.
    pub fn in_key_order(&self) -> bool {
        self.key_order.ascending()
    }

    /// How many values of fields the table has no column for were dropped
    /// (`schema: discard_unknown`).
    pub fn discarded_fields(&self) -> u64 {
        self.discarded_fields
    }

    /// Joins what `next` saw of the rows right after these: its dropped
    /// fields and its key order (wants are not joined: see `collect_wants`).
    pub fn then(&mut self, next: &RowEncoder<'_>) {
        self.discarded_fields += next.discarded_fields;
        self.key_order.then(&next.key_order);
    }

    /// Checks `record`; when it is good, appends it to `copy_out` as a binary
    /// COPY tuple (the table's columns, then `_load_id`, `_row_id`,
    /// `_row_hash`, and `_deleted` with tombstones on). Every problem with the
    /// record goes to `errors`, and a refused record leaves `copy_out` as it was.
    pub fn encode(
        &mut self,
        record: &RawRecord<'_>,
        copy_out: &mut Vec<u8>,
        errors: &mut ErrorLog,
    ) -> Option<EncodedRow> {
        let before = errors.problems;
        self.bad.fill(false);
        self.row_period = None;
        self.row_wants = false;
        let mut cells: Vec<Cell<'_>> = vec![Cell::Null; self.def.columns.len()];
        let deleted = self.check_fields(record, &mut cells, errors);
        self.check_partition_and_key(record, &mut cells, errors);
        if errors.problems != before || self.row_wants {
            return None;
        }
        let row_hash = self.canonical_row_hash(&cells);
        let row_id = self.row_id(&cells);
        let row = EncodedRow {
            row_hash,
            row_id,
            deleted,
            period: self.row_period,
        };
        let written = self.write_tuple(record, &cells, &row, copy_out, errors);
        let key = self.key_indexes.iter().map(|&i| &cells[i]);
        written.then(|| self.key_order.see(self.row_period, key))?;
        Some(row)
    }
}
