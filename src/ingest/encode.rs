//! A raw record checked against a table and turned into one COPY line, with
//! its row digest (for the content hash) and its deterministic `_row_id`.

use chrono::NaiveDate;
use sha2::{Digest, Sha256};

use super::cell::{parse_cell, write_field, Cell};
use super::{ErrorLog, RawRecord, RowError};
use crate::schema::{ColumnType, TableDef};

/// The digests of one accepted row.
#[derive(Clone, Copy, Debug)]
pub struct EncodedRow {
    /// SHA-256 of the canonical encoding of the whole row.
    pub row_hash: [u8; 32],
    /// SHA-256 of table, partition value and key (or, without a key, of the
    /// whole row); see API.md "row id".
    pub row_id: [u8; 32],
    /// A tombstone (`"_deleted": true`).
    pub deleted: bool,
}

/// Where rows are going, which decides how they are encoded.
#[derive(Clone, Debug)]
pub struct EncodeOptions {
    /// The partition the body is for (PUT); `None` when each row names its
    /// own (POST), and the partition column is then required.
    pub ds: Option<NaiveDate>,
    /// Mixed into the row id of rows without a key (an append): the
    /// idempotency scope, so a retry of one request numbers its rows alike
    /// and another request's identical rows stay distinct rows.
    pub row_id_scope: Option<Vec<u8>>,
    /// Read `"_deleted": true` as a tombstone, and append a boolean
    /// `_deleted` field to every tuple.
    pub tombstones: bool,
}

pub struct RowEncoder<'d> {
    def: &'d TableDef,
    options: EncodeOptions,
    load_id: uuid::Uuid,
    partition_index: usize,
    key_indexes: Vec<usize>,
    seen: Vec<bool>,
    /// Columns whose value failed its type check (reported once, not again as null).
    bad: Vec<bool>,
    canonical: Vec<u8>,
    day: Vec<u8>,
}

/// The field that marks a tombstone in `POST /rows` merge mode.
pub const DELETED_FIELD: &str = "_deleted";

/// Binary COPY starts with this signature, flags and header extension length.
pub const COPY_BINARY_HEADER: &[u8] = b"PGCOPY\n\xff\r\n\0\0\0\0\0\0\0\0\0";
/// ... and ends with a tuple of field count -1.
pub const COPY_BINARY_TRAILER: &[u8] = &[0xff, 0xff];

impl<'d> RowEncoder<'d> {
    pub fn new(def: &'d TableDef, options: EncodeOptions, load_id: uuid::Uuid) -> Self {
        RowEncoder {
            def,
            options,
            load_id,
            partition_index: def.partition_index(),
            key_indexes: def
                .primary_key
                .iter()
                .map(|k| def.column_index(k).expect("validated key"))
                .collect(),
            seen: vec![false; def.columns.len()],
            bad: vec![false; def.columns.len()],
            canonical: Vec::with_capacity(256),
            day: Vec::with_capacity(16),
        }
    }

    /// Checks `record`; when it is good, appends it to `copy_out` as a binary
    /// COPY tuple (the table's columns, then `_load_id`, `_row_id`,
    /// `_row_hash`, and `_deleted` with tombstones on). Every problem with the
    /// record goes to `errors`.
    pub fn encode(
        &mut self,
        record: &RawRecord<'_>,
        copy_out: &mut Vec<u8>,
        errors: &mut ErrorLog,
    ) -> Option<EncodedRow> {
        let before = errors.count;
        let error = |column: &str, message: String| RowError {
            line: record.line,
            record: record.record,
            column: Some(column.to_string()),
            message,
        };
        self.seen.fill(false);
        self.bad.fill(false);
        let mut deleted = false;
        let mut cells: Vec<Cell<'_>> = vec![Cell::Null; self.def.columns.len()];
        for (name, raw) in record.fields {
            let Some(i) = self.def.column_index(name) else {
                if self.options.tombstones && name == DELETED_FIELD {
                    match parse_cell(ColumnType::Boolean, *raw) {
                        Ok(Cell::Bool(b)) => deleted = b,
                        Ok(_) => {}
                        Err(message) => errors.push(error(name, message)),
                    }
                } else {
                    errors.push(error(name, "is not a column of this table".into()));
                }
                continue;
            };
            self.seen[i] = true;
            match parse_cell(self.def.columns[i].ty, *raw) {
                Ok(cell) => cells[i] = cell,
                Err(message) => {
                    errors.push(error(name, message));
                    self.bad[i] = true;
                }
            }
        }
        for (i, column) in self.def.columns.iter().enumerate() {
            if i == self.partition_index {
                match (&cells[i], self.options.ds) {
                    // A row may omit its partition value: it takes the one it is sent to.
                    (Cell::Null, Some(ds)) if !self.bad[i] => cells[i] = Cell::Date(ds),
                    (Cell::Null, None) if !self.bad[i] => errors.push(error(
                        &column.name,
                        "is the partition column; each row must give it".into(),
                    )),
                    (Cell::Date(d), Some(ds)) if *d != ds => errors.push(error(
                        &column.name,
                        format!("partition value {d} differs from the partition {ds}"),
                    )),
                    _ => {}
                }
            } else if !column.nullable && !self.bad[i] && cells[i].is_null() {
                errors.push(error(
                    &column.name,
                    "is part of the primary key and must not be null".into(),
                ));
            }
        }
        if errors.count != before {
            return None;
        }

        self.canonical.clear();
        self.canonical.push(b'[');
        for (i, cell) in cells.iter().enumerate() {
            if i > 0 {
                self.canonical.push(b',');
            }
            cell.write_canonical(&mut self.canonical);
        }
        self.canonical.push(b']');
        let row_hash: [u8; 32] = Sha256::digest(&self.canonical).into();

        let mut id = Sha256::new();
        id.update(b"idem-row-v1\0");
        id.update(self.def.name.as_bytes());
        id.update(b"\0");
        // The partition value as `YYYY-MM-DD` (its canonical form, unquoted).
        self.day.clear();
        cells[self.partition_index].write_canonical(&mut self.day);
        id.update(&self.day[1..self.day.len() - 1]);
        id.update(b"\0");
        if self.key_indexes.is_empty() {
            id.update(&self.canonical);
            if let Some(scope) = &self.options.row_id_scope {
                id.update(b"\0");
                id.update(scope);
            }
        } else {
            self.canonical.clear();
            self.canonical.push(b'[');
            for (n, &i) in self.key_indexes.iter().enumerate() {
                if n > 0 {
                    self.canonical.push(b',');
                }
                cells[i].write_canonical(&mut self.canonical);
            }
            self.canonical.push(b']');
            id.update(&self.canonical);
        }
        let row_id: [u8; 32] = id.finalize().into();

        let fields = cells.len() as i16 + 3 + self.options.tombstones as i16;
        copy_out.extend_from_slice(&fields.to_be_bytes());
        for (cell, column) in cells.iter().zip(&self.def.columns) {
            cell.write_binary(column.ty, copy_out);
        }
        write_field(copy_out, self.load_id.as_bytes());
        write_field(copy_out, &row_id);
        write_field(copy_out, &row_hash);
        if self.options.tombstones {
            write_field(copy_out, &[deleted as u8]);
        }
        Some(EncodedRow {
            row_hash,
            row_id,
            deleted,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ingest::formats::parse_object;
    use crate::schema::TableDeclaration;

    fn orders() -> TableDef {
        serde_json::from_str::<TableDeclaration>(
            r#"{"columns":{"order_id":"bigint","ds":"date","status":"text","updated_at":"timestamptz"},
                "primary_key":["order_id"],"cursor":"updated_at"}"#,
        )
        .unwrap()
        .into_def(crate::names::TableName::parse("orders").unwrap())
        .unwrap()
    }

    fn encode(def: &TableDef, line: &str) -> (Option<EncodedRow>, ErrorLog, Vec<u8>) {
        let ds = NaiveDate::from_ymd_opt(2026, 10, 12);
        let options = EncodeOptions {
            ds,
            row_id_scope: None,
            tombstones: false,
        };
        let mut enc = RowEncoder::new(def, options, uuid::Uuid::nil());
        let fields = parse_object(line.as_bytes()).unwrap();
        let mut errors = ErrorLog::default();
        let mut out = Vec::new();
        let row = enc.encode(
            &RawRecord {
                line: 7,
                record: 7,
                fields: &fields,
            },
            &mut out,
            &mut errors,
        );
        (row, errors, out)
    }

    #[test]
    fn a_row_without_its_partition_value_takes_the_partition() {
        let def = orders();
        let (a, _, copy) = encode(&def, r#"{"order_id":1,"status":"paid"}"#);
        let (b, _, _) = encode(&def, r#"{"status":"paid","ds":"2026-10-12","order_id":1}"#);
        // field count 7, then order_id as 8 bytes, then ds as 4 bytes
        assert_eq!(copy[..2], [0, 7]);
        assert_eq!(
            copy[2..18],
            [0, 0, 0, 8, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 4]
        );
        assert_eq!(a.unwrap().row_hash, b.unwrap().row_hash);
    }

    #[test]
    fn the_row_id_depends_on_the_key_only() {
        let def = orders();
        let (a, _, _) = encode(&def, r#"{"order_id":1,"status":"paid"}"#);
        let (b, _, _) = encode(&def, r#"{"order_id":1,"status":"shipped"}"#);
        let (c, _, _) = encode(&def, r#"{"order_id":2,"status":"paid"}"#);
        assert_eq!(a.unwrap().row_id, b.unwrap().row_id);
        assert_ne!(a.unwrap().row_hash, b.unwrap().row_hash);
        assert_ne!(a.unwrap().row_id, c.unwrap().row_id);
    }

    #[test]
    fn bad_rows_name_line_and_column() {
        let def = orders();
        let (row, errors, copy) =
            encode(&def, r#"{"order_id":"x","ds":"2026-10-13","colour":"red"}"#);
        assert!(row.is_none());
        assert!(copy.is_empty());
        let columns: Vec<_> = errors
            .listed
            .iter()
            .map(|e| e.column.clone().unwrap())
            .collect();
        assert_eq!(columns, ["order_id", "colour", "ds"]);
        assert!(errors.listed.iter().all(|e| e.line == 7));
        let (row, errors, _) = encode(&def, r#"{"status":"paid"}"#);
        assert!(row.is_none());
        assert_eq!(errors.listed[0].column.as_deref(), Some("order_id"));
    }
}
