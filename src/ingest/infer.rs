//! Column types guessed from the first records of a body, for a write to a
//! table nobody declared. The guess is the narrowest type that every sampled
//! value fits; it is stored and shown in the catalog like a declaration.

use std::collections::HashMap;
use std::ops::ControlFlow;

use super::cell::parse_text;
use super::temporal::parse_timestamp;
use super::temporal::Infinity;
use super::{
    read_records, BodyFormat, RawField, RawRecord, ReadLimits, RecordSink, RowError, DELETED_FIELD,
};
use crate::names::{ColumnName, TableName};
use crate::schema::{
    check_width, Column, ColumnType, SchemaError, SchemaPolicy, TableDef, MAX_USER_COLUMNS,
};

/// How many records the guess looks at (the sample is also cut at a byte size
/// by the caller).
pub const SAMPLE_RECORDS: usize = 1000;

#[derive(Default)]
struct Guess {
    columns: Vec<(String, Option<ColumnType>)>,
    /// Where each name is in `columns`: a header of many thousands of
    /// names is looked up in constant time a field, not by a scan.
    places: HashMap<String, usize>,
    records: usize,
    /// More names than a table holds: the guess stopped there.
    too_wide: bool,
}

impl Guess {
    fn observe(&mut self, name: &str, ty: Option<ColumnType>) {
        let place = match self.places.get(name) {
            Some(&place) => place,
            None => {
                self.places.insert(name.to_string(), self.columns.len());
                self.columns.push((name.to_string(), None));
                self.columns.len() - 1
            }
        };
        let slot = &mut self.columns[place];
        slot.1 = match (slot.1, ty) {
            (prev, None) => prev,
            (None, t) => t,
            (Some(a), Some(b)) if a == b => Some(a),
            (Some(a), Some(b)) if a.widens_to(b) => Some(b),
            (Some(a), Some(b)) if b.widens_to(a) => Some(a),
            _ => Some(ColumnType::Text),
        };
    }
}

fn guess_text(text: &str) -> ColumnType {
    use ColumnType::*;
    // `infinity` says nothing of its type: a date's, a timestamp's, a word.
    if Infinity::parse(text.trim()).is_some() {
        return Text;
    }
    for ty in [Bigint, Numeric, Boolean, Date, Uuid] {
        if parse_text(ty, text).is_ok() && !(ty == Boolean && text.len() == 1) {
            return ty;
        }
    }
    if parse_timestamp(text).is_some() {
        return Timestamptz;
    }
    Text
}

/// The narrowest type that holds `raw` (`None` for a null, which any holds).
pub fn value_type(raw: RawField<'_>) -> Option<ColumnType> {
    match raw {
        RawField::Text(None) => None,
        RawField::Text(Some(t)) => Some(guess_text(t)),
        RawField::Int(v) => Some(guess_text(itoa::Buffer::new().format(v))),
        RawField::Micros(_) => Some(ColumnType::Timestamptz),
        RawField::Date(_) => Some(ColumnType::Date),
        RawField::Json(raw) => {
            let raw = raw.get();
            Some(match raw.as_bytes()[0] {
                b'n' => return None,
                b't' | b'f' => ColumnType::Boolean,
                b'{' | b'[' => ColumnType::Jsonb,
                b'"' => match serde_json::from_str::<String>(raw) {
                    Ok(s) => match guess_text(&s) {
                        // A string of digits stays text: "007" is not a number.
                        ColumnType::Bigint | ColumnType::Numeric | ColumnType::Boolean => {
                            ColumnType::Text
                        }
                        other => other,
                    },
                    Err(_) => ColumnType::Text,
                },
                _ if raw.contains(['.', 'e', 'E']) => ColumnType::Numeric,
                _ => ColumnType::Bigint,
            })
        }
    }
}

impl RecordSink for Guess {
    fn record(
        &mut self,
        _raw: Option<&[u8]>,
        record: Result<RawRecord<'_>, RowError>,
    ) -> ControlFlow<()> {
        if let Ok(record) = record {
            for (name, raw) in record.fields {
                self.observe(name, value_type(*raw));
                // Past what a table holds (its partition column aside, which
                // may be among them) the answer is known: stop reading.
                if self.columns.len() > MAX_USER_COLUMNS {
                    self.too_wide = true;
                    return ControlFlow::Break(());
                }
            }
            self.records += 1;
        }
        if self.records >= SAMPLE_RECORDS {
            ControlFlow::Break(())
        } else {
            ControlFlow::Continue(())
        }
    }
}

/// A definition for `table` from the sample `head` of a body. The table has
/// no key (rows are appended) and is partitioned by `partition_by`.
pub fn infer_table(
    table: &TableName,
    partition_by: &ColumnName,
    format: BodyFormat,
    head: &[u8],
) -> Result<TableDef, SchemaError> {
    let mut guess = Guess::default();
    // The sample may end inside a record; what could not be read is ignored
    // here and reported by the real pass over the whole body.
    let _ = read_records(
        format,
        head,
        &mut guess,
        &ReadLimits::records_up_to(head.len()),
    );
    if guess.too_wide {
        return Err(SchemaError::TooWide(format!(
            "the body's records have more than {MAX_USER_COLUMNS} fields; a table holds at most {MAX_USER_COLUMNS} columns"
        )));
    }
    table_of_columns(table, partition_by, guess.columns)
}

/// A definition for `table` with `columns` (names and types, `None` taken as
/// text) in order, partitioned by `partition_by` (added as a date column
/// when not among them). The table has no key: rows are appended.
pub fn table_of_columns(
    table: &TableName,
    partition_by: &ColumnName,
    named: Vec<(String, Option<ColumnType>)>,
) -> Result<TableDef, SchemaError> {
    let mut columns = Vec::with_capacity(named.len() + 1);
    // A tombstone's mark is no column: the table made has no key, and the
    // rows that carry it are refused for that (see `not_a_column`).
    let fields = named.into_iter().filter(|(n, _)| n != DELETED_FIELD);
    for (name, ty) in fields {
        let name = ColumnName::parse(&name)?;
        let is_partition = &name == partition_by;
        columns.push(Column {
            ty: if is_partition {
                ColumnType::Date
            } else {
                ty.unwrap_or(ColumnType::Text)
            },
            nullable: !is_partition,
            name,
        });
    }
    if !columns.iter().any(|c| &c.name == partition_by) {
        columns.push(Column {
            name: partition_by.clone(),
            ty: ColumnType::Date,
            nullable: false,
        });
    }
    check_width(&columns)?;
    Ok(TableDef {
        name: table.clone(),
        columns,
        partition_by: Some(partition_by.clone()),
        grain: crate::period::Grain::Day,
        primary_key: Vec::new(),
        cursor: None,
        // A table nobody declared grows with what its writers send.
        schema: SchemaPolicy::Evolve,
        bad_rows: Default::default(),
        reject_retry_window: Default::default(),
        duplicates: Default::default(),
        duplicate_log: true,
        audits: Default::default(),
        write_mode: None,
        history: None,
        // The server's default, when the table is made.
        distribution: Default::default(),
        retention: None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn name(table: &str) -> TableName {
        TableName::parse(table).unwrap()
    }

    #[test]
    fn types_are_guessed_from_json_values() {
        let body = br#"{"id":1,"amount":2.5,"at":"2026-10-12T00:00:00Z","ok":true,"tags":["a"],"zip":"007"}
{"id":2,"amount":3,"at":null,"ok":false,"tags":null,"zip":"123"}"#;
        let def = infer_table(
            &name("t"),
            &ColumnName::parse("ds").unwrap(),
            BodyFormat::Ndjson,
            body,
        )
        .unwrap();
        let types: Vec<_> = def
            .columns
            .iter()
            .map(|c| (c.name.as_str(), c.ty))
            .collect();
        use ColumnType::*;
        assert_eq!(
            types,
            [
                ("id", Bigint),
                ("amount", Numeric),
                ("at", Timestamptz),
                ("ok", Boolean),
                ("tags", Jsonb),
                ("zip", Text),
                ("ds", Date)
            ]
        );
    }

    #[test]
    fn csv_values_are_guessed_from_their_text() {
        let body = b"ds,n,when,name\n2026-10-12,5,2026-10-12,x\n2026-10-12,6.5,,y\n";
        let def = infer_table(
            &name("t"),
            &ColumnName::parse("ds").unwrap(),
            BodyFormat::Csv,
            body,
        )
        .unwrap();
        let types: Vec<_> = def.columns.iter().map(|c| c.ty).collect();
        use ColumnType::*;
        assert_eq!(types, [Date, Numeric, Date, Text]);
    }
}
