//! The table a write goes to: its stored definition, or for a table nobody
//! declared, one guessed from the body (a columnar body's own schema, or the
//! first records of a text body), the sample read put back in front of the
//! rest of the body.

use sha2::Sha256;
use sqlx::PgConnection;
use tokio::io::{AsyncReadExt, AsyncSeekExt};

use super::body::{classify_read_error, BodyReader, BodySource};
use super::spool::{spool_body, spool_failed, Spooled};
use crate::config::Settings;
use crate::ingest::formats::{arrow_stream_columns, parquet_columns, ReadError};
use crate::ingest::infer::{infer_table, table_of_columns};
use crate::ingest::{BadRow, BodyFormat};
use crate::names::{ColumnName, TableName};
use crate::pipeline::error::{WriteError, WriteResult};
use crate::schema::{ColumnType, TableDef, DEFAULT_PARTITION_COLUMN};
use crate::store::catalog;

/// How much of a body is sampled, at least, to infer an undeclared table's
/// columns; never less than one whole record (`max_record_bytes`).
const INFER_SAMPLE_BYTES: u64 = 1 << 20;

/// The table a write goes to, as found or as guessed.
pub enum Target {
    Stored(TableDef),
    /// Not declared yet: the write creates it in its own transaction, so a
    /// refused or failed first write leaves no table behind.
    Inferred(TableDef),
}

impl Target {
    pub fn def(&self) -> &TableDef {
        match self {
            Target::Stored(def) | Target::Inferred(def) => def,
        }
    }

    pub fn into_def(self) -> TableDef {
        match self {
            Target::Stored(def) | Target::Inferred(def) => def,
        }
    }

    /// The table `body` goes to, and the body to read. An undeclared one
    /// (unless switched off, or the request says `create` false:
    /// `?create=false`) takes the columns of a columnar body's schema, or
    /// is guessed from the first records of a text body; the sample is put
    /// back in front of the rest of the body.
    pub async fn resolve(
        settings: &Settings,
        conn: &mut PgConnection,
        table: &TableName,
        create: bool,
        body: BodySource,
    ) -> WriteResult<(Target, BodyReader)> {
        let (format, mut body) = (body.format, body.reader);
        if let Some(def) = catalog::table_def(&mut *conn, table).await? {
            return Ok((Target::Stored(def), body));
        }
        if !(create && settings.auto_create_tables) {
            return Err(WriteError::TableNotFound(table.clone()));
        }
        let partition_by =
            ColumnName::parse(DEFAULT_PARTITION_COLUMN).expect("the default is a valid name");
        if format == BodyFormat::Parquet {
            let (columns, body) = spooled_parquet_columns(settings, body).await?;
            let def = table_of_columns(table, &partition_by, columns)?;
            return Ok((Target::Inferred(def), body));
        }
        let mut head = Vec::with_capacity(64 * 1024);
        (&mut body)
            .take(INFER_SAMPLE_BYTES.max(settings.max_record_bytes.saturating_add(1)))
            .read_to_end(&mut head)
            .await
            .map_err(|e| classify_read_error(&e))?;
        let def = match format {
            // An Arrow stream's schema comes first: its types, not guesses.
            BodyFormat::ArrowStream => {
                let columns = arrow_stream_columns(&head).map_err(refused_sample)?;
                table_of_columns(table, &partition_by, columns)?
            }
            _ => infer_table(table, &partition_by, format, &head)?,
        };
        let body: BodyReader = Box::new(std::io::Cursor::new(head).chain(body));
        Ok((Target::Inferred(def), body))
    }
}

/// A Parquet body's columns, from its footer: the body is spooled whole
/// first (the footer comes last) and handed back as the spool, rewound.
async fn spooled_parquet_columns(
    settings: &Settings,
    body: BodyReader,
) -> WriteResult<(Vec<(String, Option<ColumnType>)>, BodyReader)> {
    let dir = settings.spool_dir.as_deref();
    let mut file = match spool_body(body, &mut Sha256::default(), dir).await? {
        Spooled::Kept(file) => file,
        Spooled::Full { error, .. } => return Err(spool_failed(error)),
    };
    let footer = file.try_clone().await.map_err(spool_failed)?;
    let footer = footer.into_std().await;
    let columns = tokio::task::spawn_blocking(move || parquet_columns(footer))
        .await?
        .map_err(refused_sample)?;
    // The footer's reader moved the offset the two handles share.
    file.seek(std::io::SeekFrom::Start(0))
        .await
        .map_err(spool_failed)?;
    Ok((columns, Box::new(file)))
}

/// A columnar body whose schema cannot be read: refused as broken (a
/// spool's disk failing is idem's).
fn refused_sample(e: ReadError) -> WriteError {
    match e {
        ReadError::Malformed(error) => WriteError::Malformed {
            error: Box::new(BadRow::from(error)),
            rows_received: 0,
        },
        ReadError::Io(e) | ReadError::Spool(e) => spool_failed(e),
        other => WriteError::Internal(anyhow::anyhow!("reading a schema: {other:?}")),
    }
}
