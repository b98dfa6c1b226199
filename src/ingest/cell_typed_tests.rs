//! A columnar body's typed values (`RawField::Int`, `Micros`, `Date`) are
//! the cells their text would be, in every column type.

use super::EARLIEST_TIMESTAMP_UNIX_MICROS;
use super::{micros_text, parse_cell, parse_text, Cell, RawField};
use crate::schema::ColumnType;

#[test]
fn a_typed_integer_or_instant_is_the_cell_its_text_is_in_every_column_type() {
    use ColumnType::*;
    let types = [
        Text,
        Bigint,
        Integer,
        DoublePrecision,
        Numeric,
        Boolean,
        Date,
        Timestamptz,
        Jsonb,
        Uuid,
    ];
    let typed = |ty, raw| parse_cell(ty, raw).map(Cell::into_owned);
    let texted = |ty, text: &str| parse_text(ty, text).map(Cell::into_owned);
    for ty in types {
        for v in [
            0,
            1,
            -7,
            i64::from(i32::MAX) + 1,
            i64::MIN,
            9_007_199_254_740_993,
        ] {
            let text = v.to_string();
            assert_eq!(typed(ty, RawField::Int(v)), texted(ty, &text), "{ty:?} {v}");
        }
        let earliest = EARLIEST_TIMESTAMP_UNIX_MICROS;
        for v in [0, 1_760_230_923_123_456, -1, earliest, earliest - 1] {
            let text = micros_text(v).unwrap();
            assert_eq!(
                typed(ty, RawField::Micros(v)),
                texted(ty, &text),
                "{ty:?} {v}"
            );
        }
        for (y, m, d) in [(1, 1, 1), (2026, 10, 12), (9999, 12, 31), (1970, 1, 1)] {
            let date = chrono::NaiveDate::from_ymd_opt(y, m, d).unwrap();
            let text = format!("{y:04}-{m:02}-{d:02}");
            assert_eq!(
                typed(ty, RawField::Date(date)),
                texted(ty, &text),
                "{ty:?} {text}"
            );
        }
    }
}
