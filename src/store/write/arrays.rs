//! A small body's rows as one array parameter per column, for
//! `INSERT … SELECT … FROM unnest($1, $2, …)`: no temporary table, no COPY,
//! one statement.
//!
//! The rows arrive as binary COPY data (see `ingest::encode`). A binary COPY
//! field (a length, -1 for NULL, then the type's binary form) is exactly an
//! element of Postgres's binary array format, so each column's array is its
//! fields copied in order behind an array header: Postgres reads every value
//! with the same receive function a COPY would use, and stores the same.

use sqlx::encode::IsNull;
use sqlx::error::BoxDynError;
use sqlx::postgres::types::Oid;
use sqlx::postgres::{PgArgumentBuffer, PgTypeInfo};
use sqlx::{Encode, Postgres, Type};

use crate::binary_copy::{self, Malformed};
use crate::schema::ColumnType;
use crate::store::{StoreError, StoreResult};

/// The Postgres type of one column of the tuples, as array parameters need
/// it: the element's type and its array type (built-in, fixed OIDs).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ElementType {
    element: u32,
    array: u32,
    /// The element type's SQL name.
    name: &'static str,
}

impl ElementType {
    pub const BOOLEAN: ElementType = ElementType::new(16, 1000, "boolean");
    pub const BYTEA: ElementType = ElementType::new(17, 1001, "bytea");
    pub const UUID: ElementType = ElementType::new(2950, 2951, "uuid");

    const fn new(element: u32, array: u32, name: &'static str) -> Self {
        ElementType {
            element,
            array,
            name,
        }
    }

    pub fn of(ty: ColumnType) -> Self {
        let (element, array) = match ty {
            ColumnType::Text => (25, 1009),
            ColumnType::Bigint => (20, 1016),
            ColumnType::Integer => (23, 1007),
            ColumnType::DoublePrecision => (701, 1022),
            ColumnType::Numeric => (1700, 1231),
            ColumnType::Boolean => return ElementType::BOOLEAN,
            ColumnType::Date => (1082, 1182),
            ColumnType::Timestamptz => (1184, 1185),
            ColumnType::Jsonb => (3802, 3807),
            ColumnType::Uuid => return ElementType::UUID,
        };
        ElementType::new(element, array, ty.sql_name())
    }
}

impl ColumnArray {
    /// Parameter `$n` cast to this array's type, for a statement's text: a
    /// statement is prepared once per text, and its parameters' types are
    /// fixed then, so the text must change when a column's type does.
    pub fn cast_param(&self, n: usize) -> String {
        format!("${n}::{}[]", self.ty.name)
    }
}

/// One column of the rows as a one-dimensional binary array.
#[derive(Clone, Debug)]
pub struct ColumnArray {
    ty: ElementType,
    has_null: bool,
    count: i32,
    /// The elements, each a length (-1 for NULL) and its bytes.
    elements: Vec<u8>,
}

/// Binary COPY data split into one array per field, and how many rows.
#[derive(Clone, Debug)]
pub struct TupleArrays {
    pub columns: Vec<ColumnArray>,
    pub rows: i32,
}

/// Splits binary COPY data (each part: header, tuples, trailer) whose
/// tuples have one field of each type in `types` into one array per field,
/// holding the tuples of every part in order. A first pass sizes each
/// array, so that each is written once, without growing.
pub fn split_tuples(parts: &[&[u8]], types: &[ElementType]) -> StoreResult<TupleArrays> {
    let mut columns: Vec<ColumnArray> = types
        .iter()
        .zip(field_bytes(parts, types.len())?)
        .map(|(&ty, bytes)| ColumnArray {
            ty,
            has_null: false,
            count: 0,
            elements: Vec::with_capacity(bytes),
        })
        .collect();
    for copy in parts {
        for_each_field(copy, types.len(), |i, field| columns[i].push(field))?;
    }
    let rows = columns.first().map_or(0, |c| c.count);
    Ok(TupleArrays { columns, rows })
}

/// How many bytes each field's array elements take (lengths included).
fn field_bytes(parts: &[&[u8]], fields: usize) -> StoreResult<Vec<usize>> {
    let mut bytes = vec![0; fields];
    for copy in parts {
        for_each_field(copy, fields, |i, field| {
            bytes[i] += 4 + field.map_or(0, <[u8]>::len);
            Ok(())
        })?;
    }
    Ok(bytes)
}

/// Field `index` of each tuple (of `fields` fields) of binary COPY data.
pub fn field_of_each(copy: &[u8], fields: usize, index: usize) -> StoreResult<Vec<Option<&[u8]>>> {
    let mut values = Vec::new();
    for_each_field(copy, fields, |i, field| {
        if i == index {
            values.push(field);
        }
        Ok(())
    })?;
    Ok(values)
}

const MALFORMED: StoreError = StoreError::Corrupt("the encoder's COPY data does not parse");

/// Calls `f` with each field of each tuple (`None` for NULL) and its index
/// in the tuple, which must have `fields` fields.
fn for_each_field<'a>(
    copy: &'a [u8],
    fields: usize,
    f: impl FnMut(usize, Option<&'a [u8]>) -> StoreResult<()>,
) -> StoreResult<()> {
    binary_copy::for_each_field(copy, fields, f)
}

impl From<Malformed> for StoreError {
    fn from(_: Malformed) -> Self {
        MALFORMED
    }
}

impl ColumnArray {
    /// Appends one element (`None` for NULL) in an array's binary form: its
    /// length (-1 for NULL), then its bytes.
    fn push(&mut self, field: Option<&[u8]>) -> StoreResult<()> {
        let length = match field {
            Some(bytes) => i32::try_from(bytes.len()).map_err(|_| MALFORMED)?,
            None => -1,
        };
        self.elements.extend_from_slice(&length.to_be_bytes());
        self.elements.extend_from_slice(field.unwrap_or_default());
        self.has_null |= field.is_none();
        self.count = self.count.checked_add(1).ok_or(MALFORMED)?;
        Ok(())
    }
}

/// An array of `rows` elements, each `element` (a fixed value: the same
/// boolean, for rows that do not carry a field).
pub fn repeated(ty: ElementType, element: &[u8], rows: i32) -> StoreResult<ColumnArray> {
    let length = i32::try_from(element.len()).map_err(|_| MALFORMED)?;
    let count = usize::try_from(rows).map_err(|_| MALFORMED)?;
    let mut elements = Vec::with_capacity(count * (4 + element.len()));
    for _ in 0..count {
        elements.extend_from_slice(&length.to_be_bytes());
        elements.extend_from_slice(element);
    }
    Ok(ColumnArray {
        ty,
        has_null: false,
        count: rows,
        elements,
    })
}

impl TupleArrays {
    /// The values of column `i`, in row order (`None` for NULL): what the
    /// tests read the arrays back with.
    #[cfg(test)]
    fn values(&self, i: usize) -> impl Iterator<Item = Option<&[u8]>> {
        let mut rest: &[u8] = self.columns.get(i).map_or(&[], |c| &c.elements);
        std::iter::from_fn(move || {
            let (length, tail) = rest.split_first_chunk::<4>()?;
            match usize::try_from(i32::from_be_bytes(*length)) {
                Ok(n) => {
                    let (value, tail) = tail.split_at_checked(n)?;
                    rest = tail;
                    Some(Some(value))
                }
                Err(_) => {
                    rest = tail;
                    Some(None)
                }
            }
        })
    }

    /// Adds a column of `element` in every row.
    pub fn push_repeated(&mut self, ty: ElementType, element: &[u8]) -> StoreResult<()> {
        self.columns.push(repeated(ty, element, self.rows)?);
        Ok(())
    }
}

/// The array's type is its column's, known only at run time.
impl Type<Postgres> for ColumnArray {
    fn type_info() -> PgTypeInfo {
        // Every value says its own type (`Encode::produces`).
        PgTypeInfo::with_oid(Oid(ElementType::BYTEA.array))
    }
}

impl Encode<'_, Postgres> for ColumnArray {
    fn produces(&self) -> Option<PgTypeInfo> {
        Some(PgTypeInfo::with_oid(Oid(self.ty.array)))
    }

    /// Postgres's binary array: dimensions, a has-NULLs flag, the element
    /// type, the one dimension's length and lower bound, then the elements.
    fn encode_by_ref(&self, buf: &mut PgArgumentBuffer) -> Result<IsNull, BoxDynError> {
        for word in [1, i32::from(self.has_null)] {
            buf.extend_from_slice(&word.to_be_bytes());
        }
        buf.extend_from_slice(&self.ty.element.to_be_bytes());
        for word in [self.count, 1] {
            buf.extend_from_slice(&word.to_be_bytes());
        }
        buf.extend_from_slice(&self.elements);
        Ok(IsNull::No)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn copy_data(tuples: &[&[Option<&[u8]>]]) -> Vec<u8> {
        let mut out = crate::binary_copy::HEADER.to_vec();
        let mut w = crate::binary_copy::TupleWriter::new(&mut out);
        for tuple in tuples {
            w.tuple(i16::try_from(tuple.len()).unwrap());
            for field in *tuple {
                w.field(*field).unwrap();
            }
        }
        out.extend_from_slice(crate::binary_copy::TRAILER);
        out
    }

    #[test]
    fn tuples_become_one_array_per_field() {
        let one = 1i64.to_be_bytes();
        let two = 2i64.to_be_bytes();
        let data = copy_data(&[&[Some(&one), Some(b"a")], &[Some(&two), None]]);
        let types = [
            ElementType::of(ColumnType::Bigint),
            ElementType::of(ColumnType::Text),
        ];
        let arrays = split_tuples(&[&data], &types).unwrap();
        assert_eq!(arrays.rows, 2);
        let [ids, texts] = &arrays.columns[..] else {
            panic!("two columns")
        };
        assert!(!ids.has_null && texts.has_null);
        assert_eq!(
            ids.elements,
            [&8i32.to_be_bytes()[..], &one, &8i32.to_be_bytes(), &two].concat()
        );
        assert_eq!(
            texts.elements,
            [&1i32.to_be_bytes()[..], b"a", &(-1i32).to_be_bytes()].concat()
        );
        assert_eq!((ids.count, texts.count), (2, 2));
        let read: Vec<_> = arrays.values(1).collect();
        assert_eq!(read, [Some(&b"a"[..]), None]);
        let both = split_tuples(&[&data, &data], &types).unwrap();
        assert_eq!((both.rows, both.columns[0].count), (4, 4));
        assert!(both.columns[1].has_null);
        let ids: Vec<_> = both.values(0).collect();
        assert_eq!(ids, [Some(&one[..]), Some(&two), Some(&one), Some(&two)]);
    }

    #[test]
    fn a_tuple_of_another_width_or_cut_short_is_refused() {
        let one = 1i64.to_be_bytes();
        let data = copy_data(&[&[Some(&one)]]);
        let types = [
            ElementType::of(ColumnType::Bigint),
            ElementType::of(ColumnType::Text),
        ];
        assert!(split_tuples(&[&data], &types).is_err());
        let cut = &data[..data.len() - 4];
        assert!(split_tuples(&[cut], &types[..1]).is_err());
    }
}
