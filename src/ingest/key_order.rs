//! Whether a body's rows came in the order of their table's unique index
//! (partition, then key), as Postgres compares them: a merge of such rows
//! locks their keys in index order without sorting them first.

use std::cmp::Ordering;

use chrono::NaiveDate;
use uuid::Uuid;

use super::cell::Cell;
use crate::period::Period;

/// Watches the keys of the rows encoded so far.
pub struct KeyOrder {
    ascending: bool,
    last_period: Option<Period>,
    last_key: Vec<KeyValue>,
}

/// A key value whose order in Rust is Postgres's (no collation, no
/// numeric scale): integers, dates, timestamps, uuids (byte order).
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum KeyValue {
    Int(i64),
    Date(NaiveDate),
    Timestamp(i64),
    Uuid(Uuid),
}

impl KeyValue {
    fn of(cell: &Cell<'_>) -> Option<KeyValue> {
        Some(match cell {
            Cell::Int(n) => KeyValue::Int(*n),
            Cell::Date(d) => KeyValue::Date(*d),
            Cell::Timestamp(t) => KeyValue::Timestamp(*t),
            Cell::Uuid(u) => KeyValue::Uuid(*u),
            _ => return None,
        })
    }
}

impl KeyOrder {
    /// A watch for a table with a key; without one (`keyed` false), rows are
    /// never in key order (their index holds `_row_id`, a digest).
    pub fn new(keyed: bool) -> Self {
        KeyOrder {
            ascending: keyed,
            last_period: None,
            last_key: Vec::new(),
        }
    }

    /// Sees the next row's partition and key values. Two rows of one key, or
    /// a value whose order only Postgres can tell (text, numeric), end the
    /// watch.
    pub fn see<'c, 'v: 'c>(
        &mut self,
        period: Option<Period>,
        key: impl IntoIterator<Item = &'c Cell<'v>>,
    ) {
        if !self.ascending {
            return;
        }
        let first = self.last_key.is_empty();
        let mut order = period.cmp(&self.last_period);
        self.last_period = period;
        for (i, cell) in key.into_iter().enumerate() {
            let Some(value) = KeyValue::of(cell) else {
                self.ascending = false;
                return;
            };
            match self.last_key.get_mut(i) {
                Some(last) => {
                    order = order.then(value.cmp(last));
                    *last = value;
                }
                None => self.last_key.push(value),
            }
        }
        if !first && order != Ordering::Greater {
            self.ascending = false;
        }
    }

    /// Whether every row seen so far came after the one before it.
    pub fn ascending(&self) -> bool {
        self.ascending
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::period::Grain;

    fn day(d: u32) -> Option<Period> {
        let date = NaiveDate::from_ymd_opt(2026, 10, d).unwrap();
        Some(Period::containing(
            date.and_hms_opt(0, 0, 0).unwrap(),
            Grain::Day,
        ))
    }

    fn watch(rows: &[(Option<Period>, i64)]) -> bool {
        let mut order = KeyOrder::new(true);
        for (period, key) in rows {
            order.see(*period, [&Cell::Int(*key)]);
        }
        order.ascending()
    }

    #[test]
    fn rows_in_partition_then_key_order_are_ascending() {
        assert!(watch(&[(day(1), 5), (day(1), 7), (day(2), 1), (day(2), 2)]));
    }

    #[test]
    fn a_smaller_or_repeated_key_ends_the_order() {
        assert!(!watch(&[(day(1), 5), (day(1), 4)]));
        assert!(!watch(&[(day(1), 5), (day(1), 5)]));
        assert!(!watch(&[(day(2), 1), (day(1), 9)]));
    }

    #[test]
    fn a_text_key_is_never_taken_as_ordered() {
        let mut order = KeyOrder::new(true);
        order.see(day(1), [&Cell::Text("a".into())]);
        assert!(!order.ascending());
    }
}
