//! Postgres's `infinity` and `-infinity` in date and timestamp columns, and
//! the earliest instant idem takes.

use crate::binary_copy::TupleWriter;
use crate::schema::ColumnType;

/// Postgres's `-infinity` (before every date) and `infinity` (after every date).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Infinity {
    Past,
    Future,
}

impl Infinity {
    /// `infinity` or `-infinity` in any case, the words Postgres reads and
    /// writes (it refuses `+infinity` in these types).
    pub fn parse(t: &str) -> Option<Self> {
        if t.eq_ignore_ascii_case("infinity") {
            Some(Infinity::Future)
        } else if t.eq_ignore_ascii_case("-infinity") {
            Some(Infinity::Past)
        } else {
            None
        }
    }

    /// As a JSON string, which no finite date or instant is written as.
    pub fn write_canonical(self, out: &mut Vec<u8>) {
        out.extend_from_slice(match self {
            Infinity::Future => b"\"infinity\"",
            Infinity::Past => b"\"-infinity\"",
        });
    }

    /// As Postgres holds them: the largest and smallest day count of a
    /// `date` (`DATEVAL_NOEND`, `DATEVAL_NOBEGIN`), microsecond count of a
    /// `timestamptz` (`DT_NOEND`, `DT_NOBEGIN`).
    pub fn write_binary(self, ty: ColumnType, out: &mut Vec<u8>) -> Result<(), String> {
        let future = self == Infinity::Future;
        match ty {
            ColumnType::Date => {
                let days = if future { i32::MAX } else { i32::MIN };
                TupleWriter::new(out).fixed(&days.to_be_bytes());
            }
            ColumnType::Timestamptz => {
                let micros = if future { i64::MAX } else { i64::MIN };
                TupleWriter::new(out).fixed(&micros.to_be_bytes());
            }
            _ => return Err(format!("{} holds no infinity", ty.sql_name())),
        }
        Ok(())
    }
}

/// 0001-01-01 00:00:00 UTC in microseconds since the Unix epoch: the
/// earliest instant idem takes. Postgres holds earlier ones, but writes them
/// with a ` BC` suffix that no format reads back (nor does Postgres read a
/// year 0 or a signed year), so they are refused, as in `date` columns.
pub const EARLIEST_TIMESTAMP_UNIX_MICROS: i64 = -62_135_596_800_000_000;

/// Refuses, with the reason, an instant before `EARLIEST_TIMESTAMP_UNIX_MICROS`.
pub fn check_earliest(micros: i64) -> Result<i64, String> {
    if micros < EARLIEST_TIMESTAMP_UNIX_MICROS {
        return Err(
            "timestamp is before 0001-01-01 00:00:00 (UTC); years before 1 are \
                    refused, as in date columns"
                .into(),
        );
    }
    Ok(micros)
}

#[cfg(test)]
mod tests {
    use crate::ingest::cell::{parse_text, Cell};
    use crate::schema::ColumnType::{self, Date, Timestamptz};

    fn canonical(cell: &Cell) -> String {
        let mut out = Vec::new();
        cell.write_canonical(&mut out);
        String::from_utf8(out).unwrap()
    }

    fn binary(ty: ColumnType, text: &str) -> Vec<u8> {
        let mut out = Vec::new();
        parse_text(ty, text)
            .unwrap()
            .write_binary(ty, &mut out)
            .unwrap();
        out
    }

    #[test]
    fn infinity_is_taken_in_date_and_timestamptz_columns_as_postgres_writes_it() {
        for ty in [Date, Timestamptz] {
            for (text, form) in [
                ("infinity", "\"infinity\""),
                ("Infinity", "\"infinity\""),
                (" INFINITY ", "\"infinity\""),
                ("-infinity", "\"-infinity\""),
                ("-Infinity", "\"-infinity\""),
            ] {
                let cell = parse_text(ty, text);
                assert_eq!(cell.as_ref().map(canonical), Ok(form.to_string()), "{text}");
            }
            // Postgres reads neither.
            assert!(parse_text(ty, "+infinity").is_err());
            assert!(parse_text(ty, "inf").is_err());
        }
        // As Postgres holds them: the largest and smallest day and microsecond counts.
        assert_eq!(
            binary(Date, "infinity"),
            [0, 0, 0, 4, 0x7f, 0xff, 0xff, 0xff]
        );
        assert_eq!(binary(Date, "-infinity"), [0, 0, 0, 4, 0x80, 0, 0, 0]);
        let micros = |v: i64| [&[0, 0, 0, 8][..], &v.to_be_bytes()].concat();
        assert_eq!(binary(Timestamptz, "infinity"), micros(i64::MAX));
        assert_eq!(binary(Timestamptz, "-infinity"), micros(i64::MIN));
    }

    #[test]
    fn a_timestamp_before_year_1_is_refused_as_a_date_is() {
        for early in [
            "0000-12-31T00:00:00Z",
            "0001-01-01T00:00:00+01:00",
            "0001-01-01 00:59:59.999999+01",
            "-4713-11-24 00:00:00Z",
        ] {
            let err = parse_text(Timestamptz, early).unwrap_err();
            assert!(err.contains("before 0001-01-01"), "{early}: {err}");
        }
        for first in ["0001-01-01T00:00:00Z", "0001-01-01 01:00+01", "0001-01-01"] {
            assert_eq!(
                parse_text(Timestamptz, first).as_ref().map(canonical),
                Ok("\"0001-01-01T00:00:00.000000Z\"".to_string()),
                "{first}"
            );
        }
    }
}
