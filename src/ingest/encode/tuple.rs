//! An accepted row as one binary COPY tuple: the table's columns, then
//! `_part` (where partitions are keyed by it), `_load_id`, `_row_id`,
//! `_row_hash`, and `_deleted` and `_present` where the write asks.

use super::{row_error, EncodedRow, RowEncoder};
use crate::binary_copy::TupleWriter;
use crate::ingest::cell::Cell;
use crate::ingest::tuple_size::TupleSize;
use crate::ingest::{ErrorLog, RawRecord};
use crate::period::Period;
use crate::schema::ColumnType;

/// `_load_id`, `_row_id` and `_row_hash`, after the table's columns.
const SYSTEM_FIELDS: usize = 3;

impl RowEncoder<'_> {
    /// Appends the row's binary COPY tuple. A value Postgres cannot hold
    /// makes the row bad (every such column is reported), and then nothing
    /// of the tuple stays in `copy_out`: a COPY must never see half a row.
    pub(super) fn write_tuple(
        &self,
        record: &RawRecord<'_>,
        cells: &[Cell<'_>],
        row: &EncodedRow,
        copy_out: &mut Vec<u8>,
        errors: &mut ErrorLog,
    ) -> bool {
        let start = copy_out.len();
        let before = errors.problems;
        let fields = cells.len()
            + usize::from(self.def.keyed_by_part())
            + SYSTEM_FIELDS
            + usize::from(self.options.tombstones)
            + usize::from(self.options.presence);
        match i16::try_from(fields) {
            Ok(n) => TupleWriter::new(copy_out).tuple(n),
            Err(_) => errors.push(row_error(
                record,
                None,
                format!(
                    "has {fields} fields; a COPY tuple holds at most {}",
                    i16::MAX
                ),
            )),
        }
        let mut size = TupleSize::new(cells.len() + usize::from(self.def.keyed_by_part()));
        for (cell, column) in cells.iter().zip(&self.def.columns) {
            let at = copy_out.len();
            match cell.write_binary(column.ty, copy_out) {
                Ok(()) => size.add(column.ty, &copy_out[at..]),
                Err(message) => errors.push(row_error(record, Some(&column.name), message)),
            }
        }
        if let Err(message) = size.check() {
            errors.push(row_error(record, None, message));
        }
        if self.def.keyed_by_part() {
            let start = self.row_period.map_or(Cell::Null, |p| {
                period_start_cell(self.def.partition_type(), p)
            });
            if let Err(message) = start.write_binary(self.def.partition_type(), copy_out) {
                let column = self.def.partition_by.as_ref().map(|c| c.as_str());
                errors.push(row_error(record, column, message));
            }
        }
        let mut w = TupleWriter::new(copy_out);
        w.fixed(self.load_id.as_bytes());
        w.fixed(&row.row_id);
        w.fixed(&row.row_hash);
        if self.options.tombstones {
            w.fixed(&[u8::from(row.deleted)]);
        }
        if self.options.presence {
            self.write_presence(record, copy_out);
        }
        if errors.problems != before {
            copy_out.truncate(start);
            return false;
        }
        true
    }

    /// The `_present` field: which columns the record gave.
    pub(super) fn write_presence(&self, record: &RawRecord<'_>, copy_out: &mut Vec<u8>) {
        let mut bitmap = vec![0u8; self.def.columns.len().div_ceil(8)];
        for (name, _) in record.fields {
            if let Some(i) = self.def.column_index(name) {
                bitmap[i / 8] |= 1 << (i % 8);
            }
        }
        // A row of at most 1,596 columns: a bitmap of at most 200 bytes.
        TupleWriter::new(copy_out)
            .field(Some(&bitmap))
            .expect("a bitmap of at most 200 bytes");
    }
}

/// The first value of `period` in a partition column of type `ty`.
pub(super) fn period_start_cell(ty: ColumnType, period: Period) -> Cell<'static> {
    match ty {
        ColumnType::Date => Cell::Date(period.start().date()),
        _ => Cell::Timestamp(period.start().and_utc().timestamp_micros()),
    }
}
