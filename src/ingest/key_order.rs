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
    /// The first row's partition and key (to join a watch of the rows
    /// before, see `then`).
    first: Option<(Option<Period>, Vec<KeyValue>)>,
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
            first: None,
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
        if first {
            self.first = Some((period, self.last_key.clone()));
        } else if order != Ordering::Greater {
            self.ascending = false;
        }
    }

    /// Joins the watch of the rows that came right after these (watched on
    /// their own): ascending when both are and `next`'s first row comes
    /// after this one's last.
    pub fn then(&mut self, next: &KeyOrder) {
        if !self.ascending {
            return;
        }
        if !next.ascending {
            self.ascending = false;
            return;
        }
        let Some((period, key)) = &next.first else {
            return;
        };
        if self.first.is_none() {
            self.first = Some((*period, key.clone()));
        } else if (period, key) <= (&self.last_period, &self.last_key) {
            self.ascending = false;
            return;
        }
        self.last_period = next.last_period;
        self.last_key.clone_from(&next.last_key);
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
    fn watches_of_consecutive_rows_join_as_one() {
        let bodies: [&[(Option<Period>, i64)]; 4] = [
            &[(day(1), 5), (day(1), 7), (day(2), 1), (day(2), 2)],
            &[(day(1), 5), (day(1), 7), (day(1), 6), (day(2), 2)],
            &[(day(1), 5), (day(1), 7), (day(1), 7), (day(2), 2)],
            &[(day(2), 5), (day(1), 7)],
        ];
        for rows in bodies {
            for cut in 0..=rows.len() {
                let (head, tail) = rows.split_at(cut);
                let mut joined = KeyOrder::new(true);
                let mut second = KeyOrder::new(true);
                head.iter()
                    .for_each(|(p, k)| joined.see(*p, [&Cell::Int(*k)]));
                tail.iter()
                    .for_each(|(p, k)| second.see(*p, [&Cell::Int(*k)]));
                joined.then(&second);
                assert_eq!(joined.ascending(), watch(rows), "cut at {cut}: {rows:?}");
            }
        }
    }

    #[test]
    fn a_text_key_is_never_taken_as_ordered() {
        let mut order = KeyOrder::new(true);
        order.see(day(1), [&Cell::Text("a".into())]);
        assert!(!order.ascending());
    }
}
