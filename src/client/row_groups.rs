//! A Parquet file cut into POST batches by row group: each row group read
//! and written again as a Parquet file of its own, one at a time, so the
//! client holds one row group's rows, and each batch is a body the server
//! reads as any Parquet body.

use std::fs::File;
use std::path::Path;

use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
use parquet::arrow::ArrowWriter;
use parquet::basic::{Compression, ZstdLevel};
use parquet::file::properties::WriterProperties;

/// How many row groups the Parquet file at `path` has.
pub fn row_group_count(path: &Path) -> Result<usize, String> {
    let builder = open(path)?;
    Ok(builder.metadata().num_row_groups())
}

/// Row group `index` (from 0) of the file at `path`, as a Parquet file of
/// its own (zstd), and how many rows it holds.
pub fn row_group_file(path: &Path, index: usize) -> Result<(Vec<u8>, u64), String> {
    let builder = open(path)?;
    let schema = builder.schema().clone();
    let batches = builder
        .with_row_groups(vec![index])
        .build()
        .map_err(|e| e.to_string())?;
    let properties = WriterProperties::builder()
        .set_compression(Compression::ZSTD(ZstdLevel::default()))
        .build();
    let mut file = Vec::new();
    let mut writer =
        ArrowWriter::try_new(&mut file, schema, Some(properties)).map_err(|e| e.to_string())?;
    let mut rows = 0u64;
    for batch in batches {
        let batch = batch.map_err(|e| e.to_string())?;
        rows += u64::try_from(batch.num_rows()).unwrap_or(u64::MAX);
        writer.write(&batch).map_err(|e| e.to_string())?;
    }
    writer.close().map_err(|e| e.to_string())?;
    Ok((file, rows))
}

fn open(path: &Path) -> Result<ParquetRecordBatchReaderBuilder<File>, String> {
    let file = File::open(path).map_err(|e| e.to_string())?;
    ParquetRecordBatchReaderBuilder::try_new(file)
        .map_err(|e| format!("{} is not a Parquet file: {e}", path.display()))
}
