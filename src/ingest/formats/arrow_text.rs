//! One Arrow value as the text a CSV cell would carry (what the typing of
//! `cell::parse_text` takes), or as JSON (a nested value for a `jsonb`
//! column, and a bad row's raw form). Every value is written exactly: all of
//! a decimal's digits, a timestamp to its nanosecond (the typing then rounds
//! it as Postgres does), a float by the shortest text that reads back as the
//! same double.

use std::fmt::Write;

use arrow_array::cast::AsArray;
use arrow_array::types::*;
use arrow_array::{Array, ArrowPrimitiveType};
use arrow_schema::{DataType, Field, TimeUnit};
use chrono::{DateTime, Datelike, NaiveDate, NaiveTime, Timelike};

use crate::schema::arrow_fields::{
    DATE_INFINITY, EXTENSION_NAME_KEY, IDEM_TYPE_KEY, JSON_EXTENSION, TIMESTAMP_INFINITY,
};
use crate::schema::ColumnType;

/// Why a column's values cannot be taken, if they cannot (checked once per
/// body, before any row): idem has no column type for them.
pub fn unsupported(ty: &DataType) -> Option<String> {
    let why = |what: &str| Some(format!("{what} values have no idem column type"));
    match ty {
        DataType::Binary | DataType::LargeBinary | DataType::BinaryView => why("binary"),
        DataType::FixedSizeBinary(n) if *n != 16 => {
            why("fixed-size binary (other than a 16-byte uuid)")
        }
        DataType::Duration(_) | DataType::Interval(_) => why("duration and interval"),
        DataType::Union(..) | DataType::RunEndEncoded(..) => why("union and run-end encoded"),
        DataType::Dictionary(_, value) => unsupported(value),
        DataType::List(f) | DataType::LargeList(f) | DataType::FixedSizeList(f, _) => {
            nested_unsupported(f.data_type())
        }
        DataType::ListView(f) | DataType::LargeListView(f) => nested_unsupported(f.data_type()),
        DataType::Struct(fields) => fields
            .iter()
            .find_map(|f| nested_unsupported(f.data_type())),
        DataType::Map(f, _) => nested_unsupported(f.data_type()),
        _ => None,
    }
}

/// The idem column type of a body's field: the one its metadata names for
/// a text column (the canonical `arrow.json` extension: jsonb; idem's own
/// `idem.type`, as idem writes a numeric column no decimal type holds), or
/// else its Arrow type's (`column_type`).
pub fn field_column_type(field: &Field) -> Option<ColumnType> {
    if holds_text(field) {
        let named = |key: &str| field.metadata().get(key).map(String::as_str);
        if named(EXTENSION_NAME_KEY) == Some(JSON_EXTENSION) {
            return Some(ColumnType::Jsonb);
        }
        if let Some(ty) = named(IDEM_TYPE_KEY).and_then(ColumnType::parse) {
            return Some(ty);
        }
    }
    column_type(field.data_type())
}

/// Whether a field's values are JSON text (the `arrow.json` extension): a
/// bad row's raw form writes them as JSON, not as strings.
pub fn holds_json_text(field: &Field) -> bool {
    holds_text(field)
        && field.metadata().get(EXTENSION_NAME_KEY).map(String::as_str) == Some(JSON_EXTENSION)
}

fn holds_text(field: &Field) -> bool {
    matches!(
        field.data_type(),
        DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View
    )
}

/// The idem column type that holds a column of `ty` exactly (a table made
/// from a columnar body takes its types from here); `None` for the types
/// `unsupported` refuses.
pub fn column_type(ty: &DataType) -> Option<ColumnType> {
    Some(match ty {
        DataType::Int8 | DataType::Int16 | DataType::Int32 | DataType::UInt8 | DataType::UInt16 => {
            ColumnType::Integer
        }
        DataType::Int64 | DataType::UInt32 => ColumnType::Bigint,
        // Past bigint's range.
        DataType::UInt64 => ColumnType::Numeric,
        DataType::Float16 | DataType::Float32 | DataType::Float64 => ColumnType::DoublePrecision,
        DataType::Decimal32(..)
        | DataType::Decimal64(..)
        | DataType::Decimal128(..)
        | DataType::Decimal256(..) => ColumnType::Numeric,
        DataType::Boolean => ColumnType::Boolean,
        DataType::Date32 | DataType::Date64 => ColumnType::Date,
        DataType::Timestamp(..) => ColumnType::Timestamptz,
        DataType::FixedSizeBinary(16) => ColumnType::Uuid,
        DataType::Utf8
        | DataType::LargeUtf8
        | DataType::Utf8View
        | DataType::Time32(_)
        | DataType::Time64(_)
        | DataType::Null => ColumnType::Text,
        DataType::Dictionary(_, value) => return column_type(value),
        nested if is_nested(nested) && unsupported(nested).is_none() => ColumnType::Jsonb,
        _ => return None,
    })
}

/// Inside a nested value binary is written as hex (JSON has no bytes).
fn nested_unsupported(ty: &DataType) -> Option<String> {
    match ty {
        DataType::Binary
        | DataType::LargeBinary
        | DataType::BinaryView
        | DataType::FixedSizeBinary(_) => None,
        other => unsupported(other),
    }
}

/// A value no Postgres column can hold (a date past chrono's range, a time
/// of day past 24 hours): the row is bad.
pub type OutOfRange = String;

/// Writes the value at `row` of `array` as cell text; `false` when it is
/// null (nothing written).
pub fn write_text(array: &dyn Array, row: usize, out: &mut String) -> Result<bool, OutOfRange> {
    if array.is_null(row) {
        return Ok(false);
    }
    match array.data_type() {
        DataType::Utf8 => out.push_str(array.as_string::<i32>().value(row)),
        DataType::LargeUtf8 => out.push_str(array.as_string::<i64>().value(row)),
        DataType::Utf8View => out.push_str(array.as_string_view().value(row)),
        // A body's own columns are unpacked a batch at a time
        // (`columnar::unpack`); this is a dictionary inside a nested value.
        DataType::Dictionary(..) => {
            let dictionary = array.as_any_dictionary();
            let key = dictionary.normalized_keys()[row];
            return write_text(dictionary.values().as_ref(), key, out);
        }
        ty if is_nested(ty) => write_json(array, row, out)?,
        _ => write_scalar(array, row, out, false)?,
    }
    Ok(true)
}

/// Lists, structs and maps: what only a `jsonb` column takes, as JSON.
pub fn is_nested(ty: &DataType) -> bool {
    matches!(
        ty,
        DataType::List(_)
            | DataType::LargeList(_)
            | DataType::FixedSizeList(..)
            | DataType::ListView(_)
            | DataType::LargeListView(_)
            | DataType::Struct(_)
            | DataType::Map(..)
    )
}

/// Writes the value at `row` of `array` as JSON (`null` when null).
pub fn write_json(array: &dyn Array, row: usize, out: &mut String) -> Result<(), OutOfRange> {
    if array.is_null(row) {
        out.push_str("null");
        return Ok(());
    }
    match array.data_type() {
        DataType::Utf8 => json_string(array.as_string::<i32>().value(row), out),
        DataType::LargeUtf8 => json_string(array.as_string::<i64>().value(row), out),
        DataType::Utf8View => json_string(array.as_string_view().value(row), out),
        DataType::Dictionary(..) => {
            let dictionary = array.as_any_dictionary();
            let key = dictionary.normalized_keys()[row];
            write_json(dictionary.values().as_ref(), key, out)?;
        }
        DataType::List(_) => {
            let list = array.as_list::<i32>();
            json_elements(list.value(row).as_ref(), out)?;
        }
        DataType::LargeList(_) => {
            let list = array.as_list::<i64>();
            json_elements(list.value(row).as_ref(), out)?;
        }
        DataType::FixedSizeList(..) => {
            json_elements(array.as_fixed_size_list().value(row).as_ref(), out)?
        }
        DataType::ListView(_) => {
            json_elements(array.as_list_view::<i32>().value(row).as_ref(), out)?
        }
        DataType::LargeListView(_) => {
            json_elements(array.as_list_view::<i64>().value(row).as_ref(), out)?
        }
        DataType::Struct(fields) => {
            let record = array.as_struct();
            out.push('{');
            for (i, field) in fields.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                json_string(field.name(), out);
                out.push(':');
                write_json(record.column(i).as_ref(), row, out)?;
            }
            out.push('}');
        }
        DataType::Map(..) => {
            let map = array.as_map();
            let entries = map.value(row);
            out.push('{');
            for i in 0..entries.len() {
                if i > 0 {
                    out.push(',');
                }
                let mut key = String::new();
                write_text(entries.column(0).as_ref(), i, &mut key)?;
                json_string(&key, out);
                out.push(':');
                write_json(entries.column(1).as_ref(), i, out)?;
            }
            out.push('}');
        }
        _ => write_scalar(array, row, out, true)?,
    }
    Ok(())
}

fn json_elements(elements: &dyn Array, out: &mut String) -> Result<(), OutOfRange> {
    out.push('[');
    for i in 0..elements.len() {
        if i > 0 {
            out.push(',');
        }
        write_json(elements, i, out)?;
    }
    out.push(']');
    Ok(())
}

fn json_string(text: &str, out: &mut String) {
    // serde_json escapes exactly as JSON needs; a `String` never fails.
    out.push_str(&serde_json::to_string(text).unwrap_or_default());
}

/// A non-null value that is neither text nor nested: numbers bare, the rest
/// (dates, times, timestamps, uuids, bytes) as text, quoted when `json`.
fn write_scalar(
    array: &dyn Array,
    row: usize,
    out: &mut String,
    json: bool,
) -> Result<(), OutOfRange> {
    let start = out.len();
    let quoted = match array.data_type() {
        DataType::Null => {
            out.push_str("null");
            false
        }
        DataType::Boolean => {
            let value = array.as_boolean().value(row);
            out.push_str(if value { "true" } else { "false" });
            false
        }
        DataType::Date32
        | DataType::Date64
        | DataType::Timestamp(..)
        | DataType::Time32(_)
        | DataType::Time64(_) => write_temporal(array, row, out)?,
        DataType::Binary
        | DataType::LargeBinary
        | DataType::BinaryView
        | DataType::FixedSizeBinary(_) => write_bytes(array, row, out),
        _ => write_number(array, row, out),
    };
    if json && quoted {
        let text = out.split_off(start);
        json_string(&text, out);
    }
    Ok(())
}

/// An integer, float or decimal; `true` when written as text (a float
/// that is not finite, or a type `unsupported` refuses before any row).
fn write_number(array: &dyn Array, row: usize, out: &mut String) -> bool {
    match array.data_type() {
        DataType::Int8 => number::<Int8Type>(array, row, out),
        DataType::Int16 => number::<Int16Type>(array, row, out),
        DataType::Int32 => number::<Int32Type>(array, row, out),
        DataType::Int64 => number::<Int64Type>(array, row, out),
        DataType::UInt8 => number::<UInt8Type>(array, row, out),
        DataType::UInt16 => number::<UInt16Type>(array, row, out),
        DataType::UInt32 => number::<UInt32Type>(array, row, out),
        DataType::UInt64 => number::<UInt64Type>(array, row, out),
        DataType::Float16 => float(
            f64::from(array.as_primitive::<Float16Type>().value(row)),
            out,
        ),
        DataType::Float32 => float(
            f64::from(array.as_primitive::<Float32Type>().value(row)),
            out,
        ),
        DataType::Float64 => float(array.as_primitive::<Float64Type>().value(row), out),
        DataType::Decimal32(_, scale) => {
            decimal(&value_text::<Decimal32Type>(array, row), *scale, out)
        }
        DataType::Decimal64(_, scale) => {
            decimal(&value_text::<Decimal64Type>(array, row), *scale, out)
        }
        DataType::Decimal128(_, scale) => {
            decimal(&value_text::<Decimal128Type>(array, row), *scale, out)
        }
        DataType::Decimal256(_, scale) => {
            decimal(&value_text::<Decimal256Type>(array, row), *scale, out)
        }
        other => {
            let _ = write!(out, "{other}");
            true
        }
    }
}

/// A date, timestamp or time of day, as text.
fn write_temporal(array: &dyn Array, row: usize, out: &mut String) -> Result<bool, OutOfRange> {
    match array.data_type() {
        DataType::Date32 => match array.as_primitive::<Date32Type>().value(row) {
            DATE_INFINITY => infinity(true, out),
            days if days == -DATE_INFINITY => infinity(false, out),
            days => date(i64::from(days).checked_mul(86_400_000), out),
        },
        DataType::Date64 => date(Some(array.as_primitive::<Date64Type>().value(row)), out),
        DataType::Timestamp(unit, _) => match timestamp_value(array, row, unit) {
            TIMESTAMP_INFINITY => infinity(true, out),
            value if value == -TIMESTAMP_INFINITY => infinity(false, out),
            value => timestamp(value, unit, out),
        },
        DataType::Time32(unit) | DataType::Time64(unit) => {
            time(time_nanos(array, row, unit), unit, out)
        }
        other => Err(format!("{other} is no date or time")),
    }
}

/// Postgres's `infinity` or `-infinity`, which a date or timestamp holds
/// as `DATE_INFINITY` or `TIMESTAMP_INFINITY` (or its negation).
fn infinity(future: bool, out: &mut String) -> Result<bool, OutOfRange> {
    out.push_str(if future { "infinity" } else { "-infinity" });
    Ok(true)
}

/// A 16-byte value as a uuid, other bytes as hex; always text.
fn write_bytes(array: &dyn Array, row: usize, out: &mut String) -> bool {
    match array.data_type() {
        DataType::FixedSizeBinary(16) => {
            let bytes = array.as_fixed_size_binary().value(row);
            let uuid = uuid::Uuid::from_slice(bytes).unwrap_or_default();
            let _ = write!(out, "{}", uuid.hyphenated());
            true
        }
        DataType::Binary => hex(array.as_binary::<i32>().value(row), out),
        DataType::LargeBinary => hex(array.as_binary::<i64>().value(row), out),
        DataType::BinaryView => hex(array.as_binary_view().value(row), out),
        _ => hex(array.as_fixed_size_binary().value(row), out),
    }
}

/// A primitive value's own text (a decimal's unscaled integer).
fn value_text<T: ArrowPrimitiveType>(array: &dyn Array, row: usize) -> String
where
    T::Native: std::fmt::Display,
{
    array.as_primitive::<T>().value(row).to_string()
}

fn number<T: ArrowPrimitiveType>(array: &dyn Array, row: usize, out: &mut String) -> bool
where
    T::Native: itoa::Integer,
{
    out.push_str(itoa::Buffer::new().format(array.as_primitive::<T>().value(row)));
    false
}

/// Rust writes the shortest text that reads back as the same double
/// (`inf`, `-inf` and `NaN` included, which the typing takes).
fn float(value: f64, out: &mut String) -> bool {
    let _ = write!(out, "{value}");
    !value.is_finite()
}

/// An unscaled integer's digits with the decimal point put back.
fn decimal(unscaled: &str, scale: i8, out: &mut String) -> bool {
    let (sign, digits) = match unscaled.strip_prefix('-') {
        Some(digits) => ("-", digits),
        None => ("", unscaled),
    };
    out.push_str(sign);
    let scale = i64::from(scale);
    if scale <= 0 {
        out.push_str(digits);
        (0..-scale).for_each(|_| out.push('0'));
        return false;
    }
    let scale = usize::try_from(scale).unwrap_or(0);
    if digits.len() > scale {
        let (whole, fraction) = digits.split_at(digits.len() - scale);
        let _ = write!(out, "{whole}.{fraction}");
    } else {
        let _ = write!(out, "0.{digits:0>scale$}");
    }
    false
}

fn date(millis: Option<i64>, out: &mut String) -> Result<bool, OutOfRange> {
    let at = millis
        .and_then(DateTime::from_timestamp_millis)
        .ok_or("the date is out of range")?;
    push_date(at.date_naive(), out);
    Ok(true)
}

/// `YYYY-MM-DD`, written digit by digit for the years 0 to 9999 (a format
/// string is read anew on every call), as chrono writes it otherwise.
fn push_date(date: NaiveDate, out: &mut String) {
    match u32::try_from(date.year()) {
        Ok(year) if year <= 9999 => {
            push_padded(year, 4, out);
            out.push('-');
            push_padded(date.month(), 2, out);
            out.push('-');
            push_padded(date.day(), 2, out);
        }
        _ => {
            let _ = write!(out, "{}", date.format("%Y-%m-%d"));
        }
    }
}

fn push_padded(value: u32, width: usize, out: &mut String) {
    let mut digits = itoa::Buffer::new();
    let digits = digits.format(value);
    (digits.len()..width).for_each(|_| out.push('0'));
    out.push_str(digits);
}

fn timestamp_value(array: &dyn Array, row: usize, unit: &TimeUnit) -> i64 {
    match unit {
        TimeUnit::Second => array.as_primitive::<TimestampSecondType>().value(row),
        TimeUnit::Millisecond => array.as_primitive::<TimestampMillisecondType>().value(row),
        TimeUnit::Microsecond => array.as_primitive::<TimestampMicrosecondType>().value(row),
        TimeUnit::Nanosecond => array.as_primitive::<TimestampNanosecondType>().value(row),
    }
}

/// An instant in microseconds since the Unix epoch as the text its
/// column's cell would carry (see `timestamp`).
pub fn micros_text(micros: i64) -> Result<String, OutOfRange> {
    let mut out = String::with_capacity(32);
    timestamp(micros, &TimeUnit::Microsecond, &mut out)?;
    Ok(out)
}

/// A timestamp as UTC with every digit of its unit. Arrow stores the
/// instant since the Unix epoch whether or not a time zone is named; one
/// without a zone is taken as UTC.
fn timestamp(value: i64, unit: &TimeUnit, out: &mut String) -> Result<bool, OutOfRange> {
    let (seconds, nanos) = match unit {
        TimeUnit::Second => (value, 0),
        TimeUnit::Millisecond => (value.div_euclid(1_000), value.rem_euclid(1_000) * 1_000_000),
        TimeUnit::Microsecond => (
            value.div_euclid(1_000_000),
            value.rem_euclid(1_000_000) * 1_000,
        ),
        TimeUnit::Nanosecond => (
            value.div_euclid(1_000_000_000),
            value.rem_euclid(1_000_000_000),
        ),
    };
    let at = u32::try_from(nanos)
        .ok()
        .and_then(|nanos| DateTime::from_timestamp(seconds, nanos))
        .ok_or("the timestamp is out of range")?;
    push_date(at.date_naive(), out);
    out.push('T');
    push_time_of_day(at.time(), out);
    if at.nanosecond() != 0 {
        out.push('.');
        push_padded(at.nanosecond(), 9, out);
    }
    out.push('Z');
    Ok(true)
}

fn push_time_of_day(at: NaiveTime, out: &mut String) {
    push_padded(at.hour(), 2, out);
    out.push(':');
    push_padded(at.minute(), 2, out);
    out.push(':');
    push_padded(at.second(), 2, out);
}

fn time_nanos(array: &dyn Array, row: usize, unit: &TimeUnit) -> i64 {
    match unit {
        TimeUnit::Second => {
            i64::from(array.as_primitive::<Time32SecondType>().value(row)) * 1_000_000_000
        }
        TimeUnit::Millisecond => {
            i64::from(array.as_primitive::<Time32MillisecondType>().value(row)) * 1_000_000
        }
        // Past a day either way: refused by `time`.
        TimeUnit::Microsecond => array
            .as_primitive::<Time64MicrosecondType>()
            .value(row)
            .saturating_mul(1_000),
        TimeUnit::Nanosecond => array.as_primitive::<Time64NanosecondType>().value(row),
    }
}

/// A time of day as `HH:MM:SS` and the fraction its unit holds, every digit
/// of it (`01:02:03.000004` for microseconds): idem keeps it in a text
/// column, so one value is always one text.
fn time(nanos: i64, unit: &TimeUnit, out: &mut String) -> Result<bool, OutOfRange> {
    let seconds = u32::try_from(nanos.div_euclid(1_000_000_000)).unwrap_or(u32::MAX);
    let fraction = u32::try_from(nanos.rem_euclid(1_000_000_000)).unwrap_or(0);
    let format = match unit {
        TimeUnit::Second => "%H:%M:%S",
        TimeUnit::Millisecond => "%H:%M:%S%.3f",
        TimeUnit::Microsecond => "%H:%M:%S%.6f",
        TimeUnit::Nanosecond => "%H:%M:%S%.9f",
    };
    let at = NaiveTime::from_num_seconds_from_midnight_opt(seconds, fraction)
        .ok_or("the time of day is out of range")?;
    let _ = write!(out, "{}", at.format(format));
    Ok(true)
}

/// Bytes as Postgres writes `bytea`: `\x` and two hex digits a byte.
fn hex(bytes: &[u8], out: &mut String) -> bool {
    out.push_str("\\x");
    out.push_str(&::hex::encode(bytes));
    true
}
