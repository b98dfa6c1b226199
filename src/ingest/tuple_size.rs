//! The least a row takes in a Postgres heap page, from the values it
//! carries: a row over a page once Postgres has done all it can (moved long
//! values out of line or compressed them, TOAST) is one Postgres refuses
//! ("row is too big"), so the encoder refuses it first, as a bad row that
//! names its line, instead of failing the whole load in the database.
//!
//! The count errs low, never high: a row it passes may still be refused
//! (then the load fails as `limit_exceeded`), a row it refuses never fits.

use crate::schema::{ColumnType, MAX_ROW_BYTES};

/// A heap tuple's fixed header (`offsetof(HeapTupleHeaderData, t_bits)`).
const TUPLE_HEADER: usize = 23;
/// Values of variable width up to this size stay inline as they are: only
/// larger ones are compressed or moved out (`MAXALIGN(TOAST_POINTER_SIZE)`,
/// counted with the 4-byte header a value has before it is stored).
const TOAST_CANDIDATE: usize = 24;
/// The least a value of variable width that was a candidate takes: a
/// compressed value's 8-byte header and one byte (a pointer to a value moved
/// out of line takes 18).
const LEAST_TOASTED: usize = 9;
/// The binary COPY numeric's header (digit count, weight, sign, scale),
/// against the 2 bytes of the stored short form.
const NUMERIC_HEADER_SAVED: usize = 6;
/// idem's own columns: `_load_id` (uuid) and two 32-byte digests, `_row_id`
/// and `_row_hash` (bytea, each a candidate), and the nullable hash a merge
/// sets, which is null in a new row.
const SYSTEM_BYTES: usize = 16 + 2 * LEAST_TOASTED;
const SYSTEM_COLUMNS: usize = 4;

/// A row's size at least, added up value by value.
pub struct TupleSize {
    /// The table's columns, idem's included (for the null bitmap).
    columns: usize,
    data: usize,
}

impl TupleSize {
    /// A row of `user_columns` columns (the partition's start, when the
    /// table keeps it, included), and idem's own.
    pub fn new(user_columns: usize) -> Self {
        TupleSize {
            columns: user_columns + SYSTEM_COLUMNS,
            data: SYSTEM_BYTES,
        }
    }

    /// One value of type `ty`, as its binary COPY field (a 4-byte length,
    /// -1 for NULL, then the bytes).
    pub fn add(&mut self, ty: ColumnType, field: &[u8]) {
        let Some(len) = field
            .get(..4)
            .and_then(|l| usize::try_from(i32::from_be_bytes(l.try_into().ok()?)).ok())
        else {
            return; // NULL: a bit in the bitmap, no data
        };
        self.data += match ty.fixed_width() {
            Some((size, _)) => size,
            None => variable(ty, len),
        };
    }

    /// The row's least size in bytes: its header with the null bitmap (a
    /// new row always has a null: the merge's hash), aligned, then data.
    pub fn bytes(&self) -> usize {
        (TUPLE_HEADER + self.columns.div_ceil(8)).next_multiple_of(8) + self.data
    }

    /// A refusal's message when the row cannot fit a page.
    pub fn check(&self) -> Result<(), String> {
        let bytes = self.bytes();
        if bytes <= MAX_ROW_BYTES {
            return Ok(());
        }
        Err(format!(
            "the row takes at least {bytes} bytes once its long values are moved out of line; \
             a Postgres row holds at most {MAX_ROW_BYTES} (send fewer or longer values, or split the table)"
        ))
    }
}

/// The least a value of variable width takes stored, from the length of
/// its binary COPY form. Padding is not counted (it only adds).
fn variable(ty: ColumnType, len: usize) -> usize {
    let data = match ty {
        ColumnType::Numeric => len.saturating_sub(NUMERIC_HEADER_SAVED),
        // jsonb is stored in a form of its own, which can be smaller than
        // its text: only its header is sure.
        ColumnType::Jsonb => return 1,
        _ => len,
    };
    if data + 4 > TOAST_CANDIDATE {
        LEAST_TOASTED
    } else {
        // A short value's 1-byte header.
        data + 1
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn field(bytes: &[u8]) -> Vec<u8> {
        let mut out = i32::try_from(bytes.len()).unwrap().to_be_bytes().to_vec();
        out.extend_from_slice(bytes);
        out
    }

    fn row_of(columns: usize, value: &[u8]) -> TupleSize {
        let mut size = TupleSize::new(columns);
        for _ in 0..columns {
            size.add(ColumnType::Text, &field(value));
        }
        size
    }

    #[test]
    fn short_values_count_whole_and_long_ones_as_what_toast_leaves() {
        // 1,500 values of 10 bytes stay inline: 11 bytes each.
        let short = row_of(1500, b"0123456789");
        assert_eq!(short.bytes(), 216 + 34 + 1500 * 11);
        assert!(short.check().unwrap_err().contains("8160"));
        // 1,500 values of 5,000 bytes leave at least 9 bytes each.
        assert!(row_of(1500, &[b'y'; 5000]).check().is_err());
        assert!(row_of(700, &[b'y'; 5000]).check().is_ok());
        assert!(row_of(1500, b"x").check().is_ok());
    }

    #[test]
    fn nulls_take_no_data_and_fixed_values_their_width() {
        let mut size = TupleSize::new(2);
        size.add(ColumnType::Text, &(-1i32).to_be_bytes());
        size.add(ColumnType::Bigint, &field(&[0; 8]));
        assert_eq!(size.bytes(), 24 + 34 + 8);
    }
}
