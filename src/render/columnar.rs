//! Rows read back as Arrow: a binary COPY of a table's user columns put
//! into typed Arrow arrays, a batch at a time, and written as a Parquet
//! file (zstd) or an Arrow IPC stream. Each column's Arrow type is one
//! that a body of it loads back into the same column type
//! (`ingest::formats::arrow_text::field_column_type`), with the same values:
//! a partition read as Parquet and PUT back is unchanged.

use std::collections::HashMap;
use std::sync::Arc;

use arrow_array::builder::{
    BooleanBuilder, Date32Builder, Decimal128Builder, FixedSizeBinaryBuilder, Float64Builder,
    Int32Builder, Int64Builder, StringBuilder, TimestampMicrosecondBuilder,
};
use arrow_array::{ArrayRef, RecordBatch};
use arrow_schema::{DataType, Field, Schema, SchemaRef, TimeUnit};
use parquet::arrow::ArrowWriter;
use parquet::basic::{Compression, ZstdLevel};
use parquet::file::properties::WriterProperties;

use crate::binary_copy::{Malformed, TupleReader};
use crate::schema::arrow_fields::{
    DATE_INFINITY, EXTENSION_NAME_KEY, IDEM_TYPE_KEY, JSON_EXTENSION, TIMESTAMP_INFINITY,
    UUID_EXTENSION,
};
use crate::schema::{ColumnType, TableDef};

/// Rows put in one Arrow batch (and one Arrow IPC message), at most: a
/// batch ends sooner once its values hold `BATCH_BYTES`.
const BATCH_ROWS: usize = 8_192;
const BATCH_BYTES: usize = 8 << 20;
/// Rows in one Parquet row group, at most: what a reader holds at once,
/// and the writer until the group is written; a group ends sooner once its
/// encoded pages hold `ROW_GROUP_BYTES` (wide rows).
const ROW_GROUP_ROWS: usize = 131_072;
const ROW_GROUP_BYTES: usize = 32 << 20;
/// Decimal128's most digits.
const DECIMAL_PRECISION: u8 = 38;
/// Days and microseconds from the Unix epoch to Postgres's, 2000-01-01.
const EPOCH_DAYS: i32 = 10_957;
const EPOCH_MICROS: i64 = 946_684_800_000_000;

/// What the values of a `numeric` column allow: one decimal type at their
/// common scale, or, when they have none (or more digits than a decimal
/// holds, or `NaN` or an infinity), their text.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum NumericShape {
    Decimal { scale: i8 },
    Text,
}

impl NumericShape {
    /// From the column's smallest and largest scale and its largest
    /// absolute value's text (`None` when every value is NULL).
    pub(crate) fn of(
        min_scale: Option<i32>,
        max_scale: Option<i32>,
        max_abs: Option<&str>,
    ) -> Self {
        let (Some(low), Some(high), Some(max_abs)) = (min_scale, max_scale, max_abs) else {
            // No finite value: NULLs only, or a NaN or an infinity.
            return match max_abs {
                None => NumericShape::Decimal { scale: 0 },
                Some(_) => NumericShape::Text,
            };
        };
        let whole = max_abs.split('.').next().unwrap_or(max_abs);
        let digits = whole.len() + usize::try_from(high).unwrap_or(usize::MAX);
        match (
            low == high,
            i8::try_from(high),
            whole.bytes().all(|b| b.is_ascii_digit()),
        ) {
            (true, Ok(scale), true) if digits <= usize::from(DECIMAL_PRECISION) => {
                NumericShape::Decimal { scale }
            }
            _ => NumericShape::Text,
        }
    }
}

/// The Arrow field a column is written as.
fn arrow_field(name: &str, ty: ColumnType, nullable: bool, numeric: NumericShape) -> Field {
    let mut metadata = HashMap::new();
    let data_type = match ty {
        ColumnType::Text => DataType::Utf8,
        ColumnType::Bigint => DataType::Int64,
        ColumnType::Integer => DataType::Int32,
        ColumnType::DoublePrecision => DataType::Float64,
        ColumnType::Numeric => match numeric {
            NumericShape::Decimal { scale } => DataType::Decimal128(DECIMAL_PRECISION, scale),
            NumericShape::Text => {
                metadata.insert(IDEM_TYPE_KEY.into(), ty.sql_name().into());
                DataType::Utf8
            }
        },
        ColumnType::Boolean => DataType::Boolean,
        ColumnType::Date => DataType::Date32,
        ColumnType::Timestamptz => DataType::Timestamp(TimeUnit::Microsecond, Some("UTC".into())),
        ColumnType::Jsonb => {
            metadata.insert(EXTENSION_NAME_KEY.into(), JSON_EXTENSION.into());
            DataType::Utf8
        }
        ColumnType::Uuid => {
            metadata.insert(EXTENSION_NAME_KEY.into(), UUID_EXTENSION.into());
            DataType::FixedSizeBinary(16)
        }
    };
    Field::new(name, data_type, nullable).with_metadata(metadata)
}

/// Whether the COPY selects a column of type `ty` as text: a numeric, whose
/// binary form idem does not take apart.
pub(crate) fn sent_as_text(ty: ColumnType) -> bool {
    ty == ColumnType::Numeric
}

/// One column's values of the batch being built.
enum Builder {
    Text(StringBuilder),
    /// jsonb's binary form: a version byte, then its text.
    Json(StringBuilder),
    Int64(Int64Builder),
    Int32(Int32Builder),
    Float64(Float64Builder),
    Decimal(Decimal128Builder, i8),
    Boolean(BooleanBuilder),
    Date(Date32Builder),
    Timestamp(TimestampMicrosecondBuilder),
    Uuid(FixedSizeBinaryBuilder),
}

impl Builder {
    fn new(ty: ColumnType, numeric: NumericShape) -> Self {
        match (ty, numeric) {
            (ColumnType::Numeric, NumericShape::Decimal { scale }) => {
                Builder::Decimal(Decimal128Builder::with_capacity(BATCH_ROWS), scale)
            }
            (ColumnType::Text | ColumnType::Numeric, _) => Builder::Text(StringBuilder::new()),
            (ColumnType::Jsonb, _) => Builder::Json(StringBuilder::new()),
            (ColumnType::Bigint, _) => Builder::Int64(Int64Builder::with_capacity(BATCH_ROWS)),
            (ColumnType::Integer, _) => Builder::Int32(Int32Builder::with_capacity(BATCH_ROWS)),
            (ColumnType::DoublePrecision, _) => {
                Builder::Float64(Float64Builder::with_capacity(BATCH_ROWS))
            }
            (ColumnType::Boolean, _) => Builder::Boolean(BooleanBuilder::with_capacity(BATCH_ROWS)),
            (ColumnType::Date, _) => Builder::Date(Date32Builder::with_capacity(BATCH_ROWS)),
            (ColumnType::Timestamptz, _) => Builder::Timestamp(
                TimestampMicrosecondBuilder::with_capacity(BATCH_ROWS).with_timezone("UTC"),
            ),
            (ColumnType::Uuid, _) => {
                Builder::Uuid(FixedSizeBinaryBuilder::with_capacity(BATCH_ROWS, 16))
            }
        }
    }

    /// Appends a value from its binary COPY form (`None`: SQL NULL).
    fn append(&mut self, value: Option<&[u8]>) -> Result<(), Malformed> {
        let Some(bytes) = value else {
            self.append_null();
            return Ok(());
        };
        match self {
            Builder::Text(b) => b.append_value(utf8(bytes)?),
            Builder::Json(b) => match bytes.split_first() {
                Some((1, text)) => b.append_value(utf8(text)?),
                _ => return Err(Malformed),
            },
            Builder::Int64(b) => b.append_value(i64::from_be_bytes(fixed(bytes)?)),
            Builder::Int32(b) => b.append_value(i32::from_be_bytes(fixed(bytes)?)),
            Builder::Float64(b) => b.append_value(f64::from_be_bytes(fixed(bytes)?)),
            Builder::Decimal(b, scale) => b.append_value(unscaled(utf8(bytes)?, *scale)?),
            Builder::Boolean(b) => b.append_value(fixed::<1>(bytes)? != [0]),
            Builder::Date(b) => b.append_value(unix_days(i32::from_be_bytes(fixed(bytes)?))?),
            Builder::Timestamp(b) => {
                b.append_value(unix_micros(i64::from_be_bytes(fixed(bytes)?))?)
            }
            Builder::Uuid(b) => b.append_value(bytes).map_err(|_| Malformed)?,
        }
        Ok(())
    }

    fn append_null(&mut self) {
        match self {
            Builder::Text(b) | Builder::Json(b) => b.append_null(),
            Builder::Int64(b) => b.append_null(),
            Builder::Int32(b) => b.append_null(),
            Builder::Float64(b) => b.append_null(),
            Builder::Decimal(b, _) => b.append_null(),
            Builder::Boolean(b) => b.append_null(),
            Builder::Date(b) => b.append_null(),
            Builder::Timestamp(b) => b.append_null(),
            Builder::Uuid(b) => b.append_null(),
        }
    }

    /// The values appended since the last batch, as an array.
    fn finish(&mut self) -> Result<ArrayRef, Malformed> {
        Ok(match self {
            Builder::Text(b) | Builder::Json(b) => Arc::new(b.finish()),
            Builder::Int64(b) => Arc::new(b.finish()),
            Builder::Int32(b) => Arc::new(b.finish()),
            Builder::Float64(b) => Arc::new(b.finish()),
            Builder::Decimal(b, scale) => Arc::new(
                b.finish()
                    .with_precision_and_scale(DECIMAL_PRECISION, *scale)
                    .map_err(|_| Malformed)?,
            ),
            Builder::Boolean(b) => Arc::new(b.finish()),
            Builder::Date(b) => Arc::new(b.finish()),
            Builder::Timestamp(b) => Arc::new(b.finish()),
            Builder::Uuid(b) => Arc::new(b.finish()),
        })
    }
}

fn fixed<const N: usize>(bytes: &[u8]) -> Result<[u8; N], Malformed> {
    bytes.try_into().map_err(|_| Malformed)
}

fn utf8(bytes: &[u8]) -> Result<&str, Malformed> {
    std::str::from_utf8(bytes).map_err(|_| Malformed)
}

/// A numeric's text (every digit of its scale, which is the column's) as
/// a decimal's unscaled integer.
fn unscaled(text: &str, scale: i8) -> Result<i128, Malformed> {
    let fraction = text.split_once('.').map_or(0, |(_, f)| f.len());
    if i8::try_from(fraction) != Ok(scale) {
        return Err(Malformed);
    }
    let digits: String = text.chars().filter(|c| *c != '.').collect();
    digits.parse().map_err(|_| Malformed)
}

/// A Postgres date (days since 2000-01-01) as Arrow's (since 1970-01-01),
/// its infinities as `DATE_INFINITY`.
fn unix_days(days: i32) -> Result<i32, Malformed> {
    match days {
        i32::MAX => Ok(DATE_INFINITY),
        i32::MIN => Ok(-DATE_INFINITY),
        days => days.checked_add(EPOCH_DAYS).ok_or(Malformed),
    }
}

/// A Postgres instant (microseconds since 2000-01-01 UTC) as Arrow's (since
/// the Unix epoch), its infinities as `TIMESTAMP_INFINITY`.
fn unix_micros(micros: i64) -> Result<i64, Malformed> {
    match micros {
        i64::MAX => Ok(TIMESTAMP_INFINITY),
        i64::MIN => Ok(-TIMESTAMP_INFINITY),
        micros => micros.checked_add(EPOCH_MICROS).ok_or(Malformed),
    }
}

/// A read's columns as Arrow: their schema, and the batch being built.
pub(crate) struct ArrowColumns {
    schema: SchemaRef,
    builders: Vec<Builder>,
    rows: usize,
    /// The bytes of the values appended since the last batch.
    bytes: usize,
}

impl ArrowColumns {
    /// `numeric` holds a shape for each numeric column of `def`, in order.
    pub(crate) fn new(def: &TableDef, numeric: &[NumericShape]) -> Self {
        let mut shapes = numeric.iter().copied();
        let mut fields = Vec::with_capacity(def.columns.len());
        let mut builders = Vec::with_capacity(def.columns.len());
        for column in &def.columns {
            let shape = match column.ty {
                ColumnType::Numeric => shapes.next().unwrap_or(NumericShape::Text),
                _ => NumericShape::Text,
            };
            let name = column.name.as_str();
            fields.push(arrow_field(name, column.ty, column.nullable, shape));
            builders.push(Builder::new(column.ty, shape));
        }
        ArrowColumns {
            schema: Arc::new(Schema::new(fields)),
            builders,
            rows: 0,
            bytes: 0,
        }
    }

    pub(crate) fn schema(&self) -> &SchemaRef {
        &self.schema
    }

    pub(crate) fn rows(&self) -> usize {
        self.rows
    }

    /// Whether the batch being built is full (`BATCH_ROWS`, `BATCH_BYTES`).
    pub(crate) fn batch_full(&self) -> bool {
        self.rows >= BATCH_ROWS || self.bytes >= BATCH_BYTES
    }

    /// Appends the tuple `fields` reads.
    pub(crate) fn append_row(&mut self, fields: &mut TupleReader<'_>) -> Result<(), Malformed> {
        for builder in &mut self.builders {
            let value = fields.field()?;
            self.bytes += value.map_or(0, <[u8]>::len);
            builder.append(value)?;
        }
        self.rows += 1;
        Ok(())
    }

    /// The rows appended since the last batch, as one.
    pub(crate) fn take_batch(&mut self) -> Result<RecordBatch, Malformed> {
        let arrays = self
            .builders
            .iter_mut()
            .map(Builder::finish)
            .collect::<Result<Vec<_>, _>>()?;
        (self.rows, self.bytes) = (0, 0);
        RecordBatch::try_new(self.schema.clone(), arrays).map_err(|_| Malformed)
    }
}

/// The file being written: its bytes are taken as they are ready.
pub(crate) enum FileWriter {
    Parquet(Box<ArrowWriter<Vec<u8>>>),
    Arrow(Box<arrow_ipc::writer::StreamWriter<Vec<u8>>>),
}

/// Why writing the file failed (an encoder's error; nothing the client did).
pub(crate) type WriteFailed = String;

impl FileWriter {
    pub(crate) fn parquet(schema: &SchemaRef) -> Result<Self, WriteFailed> {
        let properties = WriterProperties::builder()
            .set_compression(Compression::ZSTD(ZstdLevel::default()))
            .set_max_row_group_row_count(Some(ROW_GROUP_ROWS))
            .set_max_row_group_bytes(Some(ROW_GROUP_BYTES))
            .set_dictionary_enabled(false)
            .build();
        ArrowWriter::try_new(Vec::new(), schema.clone(), Some(properties))
            .map(|w| FileWriter::Parquet(Box::new(w)))
            .map_err(|e| e.to_string())
    }

    pub(crate) fn arrow(schema: &SchemaRef) -> Result<Self, WriteFailed> {
        arrow_ipc::writer::StreamWriter::try_new(Vec::new(), schema)
            .map(|w| FileWriter::Arrow(Box::new(w)))
            .map_err(|e| e.to_string())
    }

    pub(crate) fn write(&mut self, batch: &RecordBatch) -> Result<(), WriteFailed> {
        match self {
            FileWriter::Parquet(w) => w.write(batch).map_err(|e| e.to_string()),
            FileWriter::Arrow(w) => w.write(batch).map_err(|e| e.to_string()),
        }
    }

    /// The bytes written so far and not yet sent: the caller sends and
    /// clears them, and the buffer's room serves the next ones.
    pub(crate) fn written(&mut self) -> &mut Vec<u8> {
        match self {
            FileWriter::Parquet(w) => w.inner_mut(),
            FileWriter::Arrow(w) => w.get_mut(),
        }
    }

    /// Ends the file (a Parquet footer, an Arrow end-of-stream marker); the
    /// bytes not yet taken.
    pub(crate) fn finish(self) -> Result<Vec<u8>, WriteFailed> {
        match self {
            FileWriter::Parquet(w) => w.into_inner().map_err(|e| e.to_string()),
            FileWriter::Arrow(mut w) => {
                w.finish().map_err(|e| e.to_string())?;
                w.into_inner().map_err(|e| e.to_string())
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_numeric_column_is_a_decimal_only_at_one_scale_within_38_digits() {
        let of = NumericShape::of;
        assert_eq!(
            of(Some(2), Some(2), Some("12.50")),
            NumericShape::Decimal { scale: 2 }
        );
        assert_eq!(of(Some(1), Some(2), Some("12.50")), NumericShape::Text);
        assert_eq!(of(None, None, None), NumericShape::Decimal { scale: 0 });
        assert_eq!(of(None, None, Some("NaN")), NumericShape::Text);
        assert_eq!(of(Some(0), Some(0), Some("Infinity")), NumericShape::Text);
        let wide = "9".repeat(37);
        assert_eq!(
            of(Some(1), Some(1), Some(&format!("{wide}.5"))),
            NumericShape::Decimal { scale: 1 }
        );
        assert_eq!(
            of(Some(2), Some(2), Some(&format!("{wide}.55"))),
            NumericShape::Text
        );
    }

    #[test]
    fn numerics_dates_and_instants_move_to_arrow_exactly() {
        assert_eq!(unscaled("-12.50", 2), Ok(-1250));
        assert_eq!(unscaled("7", 0), Ok(7));
        assert_eq!(unscaled("7.5", 2), Err(Malformed));
        assert_eq!(unix_days(0), Ok(EPOCH_DAYS));
        assert_eq!(unix_days(i32::MIN), Ok(-DATE_INFINITY));
        assert_eq!(unix_micros(-EPOCH_MICROS), Ok(0));
        assert_eq!(unix_micros(i64::MAX), Ok(TIMESTAMP_INFINITY));
    }
}
