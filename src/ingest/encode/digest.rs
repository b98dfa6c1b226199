//! A row's digests: its hash (SHA-256 of its canonical encoding, for the
//! content hash) and its deterministic `_row_id`.

use sha2::{Digest, Sha256};

use super::RowEncoder;
use crate::ingest::cell::{parse_text, Cell};
use crate::period::Period;
use crate::schema::TableDef;

impl RowEncoder<'_> {
    /// SHA-256 of the row's canonical encoding, which stays in
    /// `self.canonical` for `row_id`.
    pub(super) fn canonical_row_hash(&mut self, cells: &[Cell<'_>]) -> [u8; 32] {
        write_canonical_list(&mut self.canonical, without_trailing_nulls(cells).iter());
        Sha256::digest(&self.canonical).into()
    }

    /// The row's `_row_id`: table, partition value, then the key, or without
    /// a key the whole canonical row (left by `canonical_row_hash`) and the
    /// request's scope.
    pub(super) fn row_id(&mut self, cells: &[Cell<'_>]) -> [u8; 32] {
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
            Some(text) => parse_text(column.ty, text),
        })
        .collect::<Result<Vec<_>, _>>()
        .ok()?;
    let mut canonical = Vec::with_capacity(256);
    write_canonical_list(&mut canonical, without_trailing_nulls(&cells).iter());
    Some(Sha256::digest(&canonical).into())
}

/// The `_row_id` a keyed table gives a row of partition `period` whose
/// identity (its key) holds `key` (as Postgres prints it, in order), as
/// `RowEncoder::row_id` makes it: how the stored rows of a table that
/// adopts a key get theirs. `None` when a value is null or does not read
/// back as its column's type.
pub fn row_id_of_key_text(
    def: &TableDef,
    period: Period,
    key: &[Option<String>],
) -> Option<[u8; 32]> {
    let cells = def
        .identity()
        .into_iter()
        .zip(key)
        .map(|(column, value)| {
            let ty = def.column(column)?.ty;
            parse_text(ty, value.as_deref()?).ok()
        })
        .collect::<Option<Vec<_>>>()?;
    let mut id = Sha256::new();
    id.update(b"idem-row-v1\0");
    id.update(def.name.as_bytes());
    id.update(b"\0");
    id.update(period.label().as_bytes());
    id.update(b"\0");
    let mut canonical = Vec::with_capacity(64);
    write_canonical_list(&mut canonical, cells.iter());
    id.update(&canonical);
    Some(id.finalize().into())
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
