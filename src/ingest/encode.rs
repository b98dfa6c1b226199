//! A raw record checked against a table and turned into one binary COPY tuple, with
//! its row digest (for the content hash) and its deterministic `_row_id`.

use chrono::{DateTime, NaiveTime};
use sha2::{Digest, Sha256};

use super::cell::{parse_cell, Cell};
use super::infer::value_type;
use super::key_order::KeyOrder;
use super::tuple_size::TupleSize;
use super::RawField;
use super::{not_a_column, ErrorLog, RawRecord, RowError, DELETED_FIELD};
use crate::binary_copy::TupleWriter;
use crate::names::ColumnName;
use crate::period::Period;
use crate::schema::{ColumnType, SchemaPolicy, SchemaWants, TableDef};

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
    load_id: uuid::Uuid,
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

impl RowEncoder<'_> {
    /// Under collected wants: a column for field `name` (when it can be one).
    /// A field whose name no column can have is wanted too: it refuses
    /// the body with the name's reason (see `SchemaWants::refused`).
    fn want_column(&mut self, name: &str, raw: RawField<'_>) -> bool {
        let Some(wants) = &mut self.wants else {
            return false;
        };
        let ty = self.field_types.get(name).copied();
        match ColumnName::parse(name) {
            Ok(column) => wants.add_column(column, ty.or_else(|| value_type(raw))),
            Err(e) => wants.refuse_name(e),
        }
        self.row_wants = true;
        true
    }

    /// Under collected wants: column `i` widened to a type `raw` fits, when
    /// there is one (`integer` → `bigint` → `numeric`, `date` →
    /// `timestamptz`): the body's field's own type when it is one of them.
    fn want_wider(&mut self, i: usize, raw: RawField<'_>) -> bool {
        let Some(wants) = &mut self.wants else {
            return false;
        };
        let column = &self.def.columns[i];
        let wider: &[ColumnType] = match column.ty {
            ColumnType::Integer => &[ColumnType::Bigint, ColumnType::Numeric],
            ColumnType::Bigint => &[ColumnType::Numeric],
            ColumnType::Date => &[ColumnType::Timestamptz],
            _ => &[],
        };
        let field_type = self.field_types.get(column.name.as_str());
        let mut candidates = field_type.into_iter().chain(wider);
        let Some(to) = candidates.find(|ty| wider.contains(ty) && parse_cell(**ty, raw).is_ok())
        else {
            return false;
        };
        wants.widen_column(column.name.clone(), *to);
        self.row_wants = true;
        true
    }
}

pub use crate::binary_copy::{HEADER as COPY_BINARY_HEADER, TRAILER as COPY_BINARY_TRAILER};

/// `_load_id`, `_row_id` and `_row_hash`, after the table's columns.
const SYSTEM_FIELDS: usize = 3;

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
    pub fn new(def: &'d TableDef, options: EncodeOptions, load_id: uuid::Uuid) -> Self {
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

    /// Under `schema: evolve`, collect what rows need of the table (see
    /// `wants`) instead of refusing them.
    pub fn collect_wants(&mut self) {
        if self.def.schema == SchemaPolicy::Evolve {
            self.wants = Some(SchemaWants::default());
        }
    }

    /// A columnar body's fields' types (`RecordSink::field_types`), which
    /// wanted columns take when wants are collected.
    pub fn set_field_types(&mut self, names: &[&str], types: &[Option<ColumnType>]) {
        if self.wants.is_none() {
            return;
        }
        self.field_types = (names.iter().zip(types))
            .filter_map(|(name, ty)| ty.map(|ty| (name.to_string(), ty)))
            .collect();
    }

    /// What the rows encoded so far need of the table, when collected; a row
    /// that needs something is neither encoded nor refused.
    pub fn wants(&self) -> Option<&SchemaWants> {
        self.wants.as_ref()
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

    /// Types every field of the record into `cells`; returns whether the
    /// record is a tombstone.
    fn check_fields<'r>(
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
    fn check_partition_and_key(
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
    fn check_partition(
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

    /// SHA-256 of the row's canonical encoding, which stays in
    /// `self.canonical` for `row_id`.
    fn canonical_row_hash(&mut self, cells: &[Cell<'_>]) -> [u8; 32] {
        write_canonical_list(&mut self.canonical, without_trailing_nulls(cells).iter());
        Sha256::digest(&self.canonical).into()
    }

    /// The row's `_row_id`: table, partition value, then the key, or without
    /// a key the whole canonical row (left by `canonical_row_hash`) and the
    /// request's scope.
    fn row_id(&mut self, cells: &[Cell<'_>]) -> [u8; 32] {
        let mut id = Sha256::new();
        id.update(b"idem-row-v1\0");
        id.update(self.def.name.as_bytes());
        id.update(b"\0");
        // The partition's label (a daily table's: its date, `YYYY-MM-DD`).
        if let Some(period) = self.row_period {
            let label = match &self.label {
                Some((last, label)) if *last == period => label,
                _ => &self.label.insert((period, period.label())).1,
            };
            id.update(label.as_bytes());
        }
        id.update(b"\0");
        if self.key_indexes.is_empty() {
            id.update(&self.canonical);
            if let Some(scope) = &self.options.row_id_scope {
                id.update(b"\0");
                id.update(scope);
            }
        } else {
            let key = self.key_indexes.iter().map(|&i| &cells[i]);
            write_canonical_list(&mut self.canonical, key);
            id.update(&self.canonical);
        }
        id.finalize().into()
    }

    /// Appends the row's binary COPY tuple. A value Postgres cannot hold
    /// makes the row bad (every such column is reported), and then nothing
    /// of the tuple stays in `copy_out`: a COPY must never see half a row.
    fn write_tuple(
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
}

impl RowEncoder<'_> {
    /// The `_present` field: which columns the record gave.
    fn write_presence(&self, record: &RawRecord<'_>, copy_out: &mut Vec<u8>) {
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
fn period_start_cell(ty: ColumnType, period: Period) -> Cell<'static> {
    match ty {
        ColumnType::Date => Cell::Date(period.start().date()),
        _ => Cell::Timestamp(period.start().and_utc().timestamp_micros()),
    }
}

/// The SHA-256 of a row's canonical encoding, the row given as its columns'
/// text as Postgres prints it (NULL as `None`), in the table's order: how a
/// row that only the database holds whole (a patched one) gets its hash.
/// `None` when a value does not read back as its column's type.
pub fn row_hash_of_text(def: &TableDef, values: &[Option<String>]) -> Option<[u8; 32]> {
    let cells = def
        .columns
        .iter()
        .zip(values)
        .map(|(column, value)| match value {
            None => Ok(Cell::Null),
            Some(text) => super::cell::parse_text(column.ty, text),
        })
        .collect::<Result<Vec<_>, _>>()
        .ok()?;
    let mut canonical = Vec::with_capacity(256);
    write_canonical_list(&mut canonical, without_trailing_nulls(&cells).iter());
    Some(Sha256::digest(&canonical).into())
}

/// A row's cells less the nulls at its end: a column added to a table comes
/// last and is null in the rows written before, which so keep their hash
/// (and a partition its ETag) when the table gains a column.
fn without_trailing_nulls<'c, 'v>(cells: &'c [Cell<'v>]) -> &'c [Cell<'v>] {
    let kept = cells
        .iter()
        .rposition(|c| !matches!(c, Cell::Null))
        .map_or(0, |last| last + 1);
    &cells[..kept]
}

/// Why a tombstone is refused by a table that keeps every version.
fn no_tombstones(def: &TableDef) -> String {
    format!(
        "marks a tombstone, and table {:?} keeps every version (write_mode \"versions\"): a version is never removed",
        def.name
    )
}

/// `[a,b,...]` of the cells' canonical encodings, replacing `out`'s content.
fn write_canonical_list<'c, 'v: 'c>(out: &mut Vec<u8>, cells: impl Iterator<Item = &'c Cell<'v>>) {
    out.clear();
    out.push(b'[');
    for (n, cell) in cells.enumerate() {
        if n > 0 {
            out.push(b',');
        }
        cell.write_canonical(out);
    }
    out.push(b']');
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
        let ds = chrono::NaiveDate::from_ymd_opt(2026, 10, 12).map(Period::day);
        let options = EncodeOptions {
            allowed: None,
            ds,
            row_id_scope: None,
            tombstones: false,
            presence: false,
        };
        let mut enc = RowEncoder::new(def, options, uuid::Uuid::nil());
        let fields = parse_object(line.as_bytes()).unwrap();
        let mut errors = ErrorLog::default();
        let mut out = Vec::new();
        let row = enc.encode(
            &RawRecord {
                line: 7,
                record: 7,
                row_group: None,
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
        assert_eq!((errors.count, errors.problems), (1, 3));
        let row = &errors.listed[0];
        let columns: Vec<_> = row.columns.iter().map(|c| c.column.as_str()).collect();
        assert_eq!(columns, ["order_id", "colour", "ds"]);
        assert_eq!(row.line, 7);
        assert_eq!(row.column.as_deref(), Some("order_id"));
        let (row, errors, _) = encode(&def, r#"{"status":"paid"}"#);
        assert!(row.is_none());
        assert_eq!(errors.listed[0].column.as_deref(), Some("order_id"));
    }

    #[test]
    fn a_value_postgres_cannot_hold_is_a_bad_row_and_writes_nothing() {
        let def = serde_json::from_str::<TableDeclaration>(
            r#"{"columns":{"id":"bigint","ds":"date","amount":"numeric"}}"#,
        )
        .unwrap()
        .into_def(crate::names::TableName::parse("amounts").unwrap())
        .unwrap();
        let (row, errors, copy) = encode(&def, r#"{"id":1,"amount":1e131072}"#);
        assert!(row.is_none());
        assert!(copy.is_empty());
        assert_eq!(errors.listed[0].line, 7);
        assert_eq!(errors.listed[0].column.as_deref(), Some("amount"));
        assert!(
            errors.listed[0].message.contains("at most 131072"),
            "{}",
            errors.listed[0].message
        );
    }

    #[test]
    fn a_tuple_postgres_cannot_count_is_refused_and_leaves_no_bytes() {
        let mut def = orders();
        def.columns
            .extend((0..40_000).map(|i| crate::schema::Column {
                name: crate::names::ColumnName::parse(&format!("c{i}")).unwrap(),
                ty: ColumnType::Text,
                nullable: true,
            }));
        let (row, errors, copy) = encode(&def, r#"{"order_id":1,"c0":"x"}"#);
        assert!(row.is_none());
        assert!(copy.is_empty());
        assert_eq!(errors.listed[0].column, None);
        assert!(errors.listed[0].message.contains("at most 32767"));
    }
}
