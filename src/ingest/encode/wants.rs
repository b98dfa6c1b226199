//! Under `schema: evolve`, what rows need of the table (a column, a wider
//! type), collected instead of refused.

use super::RowEncoder;
use crate::ingest::cell::parse_cell;
use crate::ingest::infer::value_type;
use crate::ingest::RawField;
use crate::names::ColumnName;
use crate::schema::{ColumnType, SchemaPolicy, SchemaWants};

impl RowEncoder<'_> {
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

    /// Under collected wants: a column for field `name` (when it can be one).
    /// A field whose name no column can have is wanted too: it refuses
    /// the body with the name's reason (see `SchemaWants::refused`).
    pub(super) fn want_column(&mut self, name: &str, raw: RawField<'_>) -> bool {
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
    pub(super) fn want_wider(&mut self, i: usize, raw: RawField<'_>) -> bool {
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
