//! A record's fields typed against the table's columns, and its partition
//! value and key checked.

use chrono::{DateTime, NaiveTime};

use super::tuple::period_start_cell;
use super::{row_error, RowEncoder};
use crate::ingest::cell::{parse_cell, Cell};
use crate::ingest::{not_a_column, ErrorLog, RawRecord, DELETED_FIELD};
use crate::period::Period;
use crate::schema::{ColumnType, SchemaPolicy, TableDef};

impl RowEncoder<'_> {
    /// Types every field of the record into `cells`; returns whether the
    /// record is a tombstone.
    pub(super) fn check_fields<'r>(
        &mut self,
        record: &RawRecord<'r>,
        cells: &mut [Cell<'r>],
        errors: &mut ErrorLog,
    ) -> bool {
        let mut deleted = false;
        for (name, raw) in record.fields {
            let Some(i) = self.def.column_index(name) else {
                if name == DELETED_FIELD && (self.options.tombstones || self.def.keeps_versions()) {
                    match parse_cell(ColumnType::Boolean, *raw) {
                        Ok(Cell::Bool(b)) if self.options.tombstones => deleted = b,
                        // A version log keeps versions: nothing removes one.
                        Ok(Cell::Bool(true)) => {
                            errors.push(row_error(record, Some(name), no_tombstones(self.def)));
                        }
                        Ok(_) => {}
                        Err(message) => errors.push(row_error(record, Some(name), message)),
                    }
                } else if name == DELETED_FIELD && self.def.primary_key.is_empty() {
                    // Neither dropped nor made a column: a delete asked
                    // for and not done would be a wrong answer.
                    errors.push(row_error(record, Some(name), not_a_column(self.def, name)));
                } else if self.def.schema == SchemaPolicy::DiscardUnknown {
                    self.discarded_fields += 1;
                } else if !self.want_column(name, *raw) {
                    let message = not_a_column(self.def, name);
                    errors.push(row_error(record, Some(name), message));
                }
                continue;
            };
            match parse_cell(self.def.columns[i].ty, *raw) {
                Ok(cell) => cells[i] = cell,
                Err(_) if self.want_wider(i, *raw) => self.bad[i] = true,
                Err(message) => {
                    errors.push(row_error(record, Some(name), message));
                    self.bad[i] = true;
                }
            }
        }
        deleted
    }

    /// The partition value (given, or the one the body is for) and the key
    /// columns, which must not be null.
    pub(super) fn check_partition_and_key(
        &mut self,
        record: &RawRecord<'_>,
        cells: &mut [Cell<'_>],
        errors: &mut ErrorLog,
    ) {
        if self.partition_index.is_none() {
            self.row_period = Some(Period::whole());
        }
        for (i, column) in self.def.columns.iter().enumerate() {
            let name = Some(column.name.as_str());
            if Some(i) == self.partition_index {
                if !self.bad[i] {
                    self.check_partition(record, &mut cells[i], errors);
                }
            } else if !column.nullable && !self.bad[i] && cells[i].is_null() {
                // Besides the key, only a cursor that orders stored
                // versions (`versions`, `history`) is declared not null.
                let message = if self.def.primary_key.contains(&column.name) {
                    "is part of the primary key and must not be null"
                } else {
                    "is the cursor, which orders a key's versions, and must not be null"
                };
                errors.push(row_error(record, name, message.into()));
            }
        }
    }

    /// The row's period, from its partition value; a row may omit the value
    /// and take (the start of) the partition it is sent to, but never names
    /// another.
    pub(super) fn check_partition(
        &mut self,
        record: &RawRecord<'_>,
        cell: &mut Cell<'_>,
        errors: &mut ErrorLog,
    ) {
        let name = self.def.partition_by.as_ref().map(|c| c.as_str());
        let grain = self.def.grain;
        let period = match (&*cell, self.options.ds) {
            (Cell::Null, Some(ds)) => {
                *cell = period_start_cell(self.def.partition_type(), ds);
                Some(ds)
            }
            (Cell::Null, None) => {
                let message = "is the partition column; each row must give it".into();
                errors.push(row_error(record, name, message));
                None
            }
            (Cell::Infinite(_), _) => {
                let message = "is the partition column; infinity falls in no partition".into();
                errors.push(row_error(record, name, message));
                None
            }
            (Cell::Date(d), _) => Some(Period::containing(d.and_time(NaiveTime::MIN), grain)),
            (Cell::Timestamp(micros), _) => DateTime::from_timestamp_micros(*micros)
                .map(|t| Period::containing(t.naive_utc(), grain)),
            _ => None,
        };
        self.row_period = period;
        if let (Some(period), Some(allowed)) = (period, &self.options.allowed) {
            if !allowed.contains(&period) {
                let message =
                    format!("partition value falls in {period}, outside the load's target");
                errors.push(row_error(record, name, message));
                return;
            }
        }
        if let (Some(period), Some(ds)) = (period, self.options.ds) {
            if period != ds {
                let message =
                    format!("partition value falls in {period}, not in the partition {ds}");
                errors.push(row_error(record, name, message));
            }
        }
    }
}

/// Why a tombstone is refused by a table that keeps every version.
fn no_tombstones(def: &TableDef) -> String {
    format!(
        "marks a tombstone, and table {:?} keeps every version (write_mode \"versions\"): a version is never removed",
        def.name
    )
}
