//! Streaming rows out of an open snapshot: a partition's or a whole table's
//! (Postgres's CSV as it comes, JSON written from binary COPY by
//! `render::json`, or Parquet and Arrow by `render::columnar`), or a query's
//! (each row made JSON by Postgres: history). The SQL and the streaming are
//! here; the rendering of the values is `render`'s.

use bytes::Bytes;
use futures::StreamExt;
use sqlx::{PgConnection, Row};
use tokio::sync::mpsc;

use super::sql::{quote_literal, Ident};
use super::{StoreError, StoreResult};
use crate::binary_copy::{Malformed, TupleStream};
use crate::render::columnar::{self, ArrowColumns, FileWriter, NumericShape};
use crate::render::json::{self, JsonColumns, JsonFraming};
pub use crate::render::RowFormat;
use crate::schema::{Column, ColumnType, TableDef};

type Chunks = mpsc::Sender<std::io::Result<Bytes>>;

/// Rows are sent to the client in chunks of about this size: Postgres sends
/// a row a message, and a chunk a row would cost a channel send, an HTTP
/// chunk and a write(2) a row.
const READ_CHUNK: usize = 64 * 1024;

/// The body's bytes, gathered into chunks of `READ_CHUNK`.
struct ChunkSink<'a> {
    buf: Vec<u8>,
    tx: &'a Chunks,
}

impl<'a> ChunkSink<'a> {
    fn new(tx: &'a Chunks) -> Self {
        ChunkSink {
            buf: Vec::with_capacity(READ_CHUNK + 1024),
            tx,
        }
    }

    /// Sends the chunk once it is full; false when the client has gone away.
    async fn flush_full(&mut self) -> bool {
        if self.buf.len() < READ_CHUNK {
            return true;
        }
        let chunk = std::mem::replace(&mut self.buf, Vec::with_capacity(READ_CHUNK + 1024));
        self.tx.send(Ok(Bytes::from(chunk))).await.is_ok()
    }

    /// Sends `bytes` (a Parquet row group comes whole, megabytes at once)
    /// in chunks of `READ_CHUNK`, and clears them; false when the client has
    /// gone away.
    async fn send_all(&mut self, bytes: &mut Vec<u8>) -> bool {
        for piece in bytes.chunks(READ_CHUNK) {
            self.buf.extend_from_slice(piece);
            if !self.flush_full().await {
                return false;
            }
        }
        bytes.clear();
        true
    }

    /// Sends what is left.
    async fn finish(self) {
        if !self.buf.is_empty() {
            let _ = self.tx.send(Ok(Bytes::from(self.buf))).await;
        }
    }
}

/// The rows as Postgres's own CSV (`COPY … TO STDOUT`). Stops quietly when
/// the client has gone away.
async fn send_csv(conn: &mut PgConnection, select: &str, tx: &Chunks) -> StoreResult<()> {
    let sql = format!("copy ({select}) to stdout with (format csv, header)");
    let mut parts = conn.copy_out_raw(&sql).await?;
    let mut sink = ChunkSink::new(tx);
    while let Some(part) = parts.next().await {
        sink.buf.extend_from_slice(&part?);
        if !sink.flush_full().await {
            return Ok(());
        }
    }
    sink.finish().await;
    Ok(())
}

/// The rows of `select` (a table's user columns) as JSON objects, each
/// written by `render::json` from a binary COPY of the values.
async fn send_copy_json(
    conn: &mut PgConnection,
    (select, order): (&str, &[usize]),
    columns: &JsonColumns,
    format: RowFormat,
    tx: &Chunks,
) -> StoreResult<()> {
    let sql = binary_copy_sql((select, order), columns.types(), json::sent_as_text);
    let mut parts = conn.copy_out_raw(&sql).await?;
    let mut tuples = TupleStream::new(columns.len());
    let mut sink = ChunkSink::new(tx);
    let mut framing = JsonFraming::new(format);
    while let Some(part) = parts.next().await {
        tuples
            .feed(&part?, |fields| {
                framing.before_row(&mut sink.buf);
                columns.write_row(fields, &mut sink.buf)?;
                framing.after_row(&mut sink.buf);
                Ok::<_, Malformed>(())
            })
            .map_err(malformed)?;
        if !sink.flush_full().await {
            return Ok(()); // the client went away
        }
    }
    tuples.finish().map_err(malformed)?;
    framing.end(&mut sink.buf);
    sink.finish().await;
    Ok(())
}

/// `select` (a table's user columns), sorted by the columns at `order`
/// (the binary COPYs sort outermost too, in `binary_copy_sql`: Citus keeps
/// no subquery's order once it is wrapped).
fn ordered(select: &str, order: &[usize]) -> String {
    if order.is_empty() {
        return select.to_string();
    }
    let by: Vec<String> = order.iter().map(|i| (i + 1).to_string()).collect();
    format!("{select} order by {}", by.join(", "))
}

/// A binary COPY of `select`'s columns, of types `types`, over `_row`,
/// each cast to text where `as_text` says its reader takes Postgres's
/// text. `_row`'s columns are named `_c0`, `_c1`, … (names of idem's own,
/// which no user column takes).
fn binary_copy_sql(
    (select, order): (&str, &[usize]),
    types: impl Iterator<Item = ColumnType>,
    as_text: fn(ColumnType) -> bool,
) -> String {
    let (list, aliases): (Vec<String>, Vec<Ident>) = types
        .enumerate()
        .map(|(i, ty)| {
            let name = Ident::read_column(i);
            match as_text(ty) {
                true => (format!("_row.{name}::text"), name),
                false => (format!("_row.{name}"), name),
            }
        })
        .unzip();
    let by: Vec<String> = order
        .iter()
        .map(|i| format!("_row.{}", Ident::read_column(*i)))
        .collect();
    let order = match by.is_empty() {
        true => String::new(),
        false => format!(" order by {}", by.join(", ")),
    };
    let (list, aliases) = (list.join(", "), super::sql::join(&aliases));
    format!(
        "copy (select {list} from ({select}) _row({aliases}){order}) to stdout with (format binary)"
    )
}

/// The rows of `select` (`def`'s user columns) as a Parquet file or an
/// Arrow stream, a batch at a time (`ArrowColumns::batch_full`).
async fn send_columnar(
    conn: &mut PgConnection,
    (select, order): (&str, &[usize]),
    def: &TableDef,
    format: RowFormat,
    tx: &Chunks,
) -> StoreResult<()> {
    let shapes = numeric_shapes(conn, select, def).await?;
    let mut columns = ArrowColumns::new(def, &shapes);
    let mut file = match format {
        RowFormat::Parquet => FileWriter::parquet(columns.schema()),
        _ => FileWriter::arrow(columns.schema()),
    }
    .map_err(write_failed)?;
    let types = def.columns.iter().map(|c| c.ty);
    let sql = binary_copy_sql((select, order), types, columnar::sent_as_text);
    let mut parts = conn.copy_out_raw(&sql).await?;
    let mut tuples = TupleStream::new(def.columns.len());
    let mut sink = ChunkSink::new(tx);
    while let Some(part) = parts.next().await {
        tuples
            .feed(&part?, |fields| columns.append_row(fields))
            .map_err(malformed)?;
        if columns.batch_full() {
            let batch = columns.take_batch().map_err(malformed)?;
            file.write(&batch).map_err(write_failed)?;
            if !sink.send_all(file.written()).await {
                return Ok(()); // the client went away
            }
        }
    }
    tuples.finish().map_err(malformed)?;
    if columns.rows() > 0 {
        let batch = columns.take_batch().map_err(malformed)?;
        file.write(&batch).map_err(write_failed)?;
    }
    let mut rest = file.finish().map_err(write_failed)?;
    if sink.send_all(&mut rest).await {
        sink.finish().await;
    }
    Ok(())
}

fn malformed(_: Malformed) -> StoreError {
    StoreError::Corrupt("Postgres sent binary COPY idem cannot read")
}

fn write_failed(why: columnar::WriteFailed) -> StoreError {
    tracing::error!(error = %why, "writing rows as Parquet or Arrow failed");
    StoreError::Corrupt("writing the rows as Parquet or Arrow failed")
}

/// The shape of each numeric column of `def`, in order, from its values in
/// `select` (one pass over them, before the rows are read).
async fn numeric_shapes(
    conn: &mut PgConnection,
    select: &str,
    def: &TableDef,
) -> StoreResult<Vec<NumericShape>> {
    let numeric: Vec<usize> = (def.columns.iter().enumerate())
        .filter(|(_, c)| c.ty == ColumnType::Numeric)
        .map(|(i, _)| i)
        .collect();
    if numeric.is_empty() {
        return Ok(Vec::new());
    }
    let aggregates: Vec<String> = numeric
        .iter()
        .map(|i| {
            let c = format!("_row.{}", Ident::read_column(*i));
            format!("min(scale({c})), max(scale({c})), max(abs({c}))::text")
        })
        .collect();
    let aliases: Vec<Ident> = (0..def.columns.len()).map(Ident::read_column).collect();
    let sql = format!(
        "select {} from ({select}) _row({})",
        aggregates.join(", "),
        super::sql::join(&aliases)
    );
    let row = sqlx::query(&sql).fetch_one(&mut *conn).await?;
    (0..numeric.len())
        .map(|k| {
            let min: Option<i32> = row.try_get(3 * k)?;
            let max: Option<i32> = row.try_get(3 * k + 1)?;
            let max_abs: Option<String> = row.try_get(3 * k + 2)?;
            Ok(NumericShape::of(min, max, max_abs.as_deref()))
        })
        .collect()
}

/// A row of `_row` as one JSON object. `row_to_json` writes SQL NULL and a
/// jsonb `null` alike; where a jsonb column may be NULL, the object is built
/// field by field (each as `row_to_json` writes it) and leaves a SQL-NULL
/// jsonb column out, as a JSON body leaves it out. `||` rather than
/// `concat_ws`: a function takes at most 100 arguments, a table has more
/// columns. For a read that selects idem's fields `extra` (none of them
/// jsonb) after the user columns.
pub(super) fn json_row_with(def: &TableDef, extra: &[Ident]) -> String {
    let nullable_jsonb = |c: &Column| c.ty == ColumnType::Jsonb && c.nullable;
    if !def.columns.iter().any(nullable_jsonb) {
        return "row_to_json(_row)::text".into();
    }
    let extra = extra.iter().map(|column| {
        let key = quote_literal(&format!(",\"{}\":", column.unquoted()));
        let value = format!("_row.{column}");
        format!("{key} || coalesce(to_json({value})::text, 'null')")
    });
    let fields: Vec<String> = def
        .columns
        .iter()
        .map(|c| {
            // Names are `[a-z_][a-z0-9_]*`: nothing to escape in JSON.
            let key = quote_literal(&format!(",\"{}\":", c.name.as_str()));
            let value = format!("_row.{}", Ident::column(&c.name));
            if nullable_jsonb(c) {
                format!("coalesce({key} || {value}::text, '')")
            } else {
                format!("{key} || coalesce(to_json({value})::text, 'null')")
            }
        })
        .chain(extra)
        .collect();
    format!("'{{' || substr({}, 2) || '}}'", fields.join(" || "))
}

/// The rows of a query as JSON objects (`json_row_with`), each made by
/// Postgres.
async fn send_query_json(
    conn: &mut PgConnection,
    read: (&str, &str, &[String], &str),
    format: RowFormat,
    tx: &Chunks,
) -> StoreResult<()> {
    let (select, json_row, params, order_by) = read;
    // The alias starts with `_`, as no user column does: a column named
    // like it would be taken for the whole row.
    let sql = format!("select {json_row} from ({select}) _row order by {order_by}");
    let mut query = sqlx::query_scalar::<_, String>(&sql);
    for param in params {
        query = query.bind(param);
    }
    let mut rows = query.fetch(&mut *conn);
    let mut sink = ChunkSink::new(tx);
    let mut framing = JsonFraming::new(format);
    while let Some(row) = rows.next().await {
        framing.before_row(&mut sink.buf);
        sink.buf.extend_from_slice(row?.as_bytes());
        framing.after_row(&mut sink.buf);
        if !sink.flush_full().await {
            return Ok(()); // the client went away
        }
    }
    framing.end(&mut sink.buf);
    sink.finish().await;
    Ok(())
}

/// How a read's rows become JSON.
enum JsonRows {
    /// A table's user columns, written by `render::json` (and, as Parquet or
    /// Arrow, by `render::columnar` from `def`).
    Columns { json: JsonColumns, def: TableDef },
    /// A query's rows, each made JSON by this expression over `_row`, with
    /// the query's parameters (text, cast by the query), in the order of
    /// `order_by` (over `_row`).
    Query {
        json_row: String,
        params: Vec<String>,
        order_by: String,
    },
}

/// A read of rows in an open snapshot: the query and how a row is written
/// as JSON.
pub(super) struct RowsRead {
    tx: sqlx::Transaction<'static, sqlx::Postgres>,
    select: String,
    json: JsonRows,
    /// The columns (by position in `select`) rows are sent in the order
    /// of; none: as Postgres reads them (see `read_order`).
    order: Vec<usize>,
}

/// The order a read of `def`'s user columns gives rows in. On one
/// Postgres, as stored (a partition's rows in the order written; a whole
/// table's partitions in order, by `open_table`'s `union all`). On Citus,
/// whose shards answer in no set order: by partition column, then key
/// (keyless: every column), so that two reads of one version give the
/// same bytes, and partitions come in order.
fn read_order(def: &TableDef) -> Vec<usize> {
    if !def.distribution.needs_citus() {
        return Vec::new();
    }
    let identity = def.identity();
    if identity.is_empty() {
        return (0..def.columns.len()).collect();
    }
    def.partition_index()
        .into_iter()
        .chain(identity.iter().filter_map(|c| def.column_index(c.as_str())))
        .collect()
}

impl RowsRead {
    /// A read of `select`, which selects `def`'s user columns in order.
    pub(super) fn columns(
        tx: sqlx::Transaction<'static, sqlx::Postgres>,
        select: String,
        def: &TableDef,
    ) -> Self {
        RowsRead {
            tx,
            select,
            json: JsonRows::Columns {
                json: JsonColumns::of(def),
                def: def.clone(),
            },
            order: read_order(def),
        }
    }

    /// A read of `select`, its rows written as JSON by `json_row`
    /// (`json_row_with`) with `params` bound (not for CSV, whose COPY takes
    /// none).
    pub(super) fn new(
        tx: sqlx::Transaction<'static, sqlx::Postgres>,
        (select, order_by): (String, String),
        json_row: String,
        params: Vec<String>,
    ) -> Self {
        RowsRead {
            tx,
            select,
            json: JsonRows::Query {
                json_row,
                params,
                order_by,
            },
            order: Vec::new(),
        }
    }

    /// Streams the rows. They travel through a small channel: a slow
    /// client slows the query, nothing piles up.
    pub(super) fn stream(self, format: RowFormat) -> mpsc::Receiver<std::io::Result<Bytes>> {
        let (tx, rx) = mpsc::channel(4);
        let Self {
            tx: mut snapshot,
            select,
            json,
            order,
        } = self;
        tokio::spawn(async move {
            let result = match (format, &json) {
                (RowFormat::Csv, _) => {
                    send_csv(&mut snapshot, &ordered(&select, &order), &tx).await
                }
                (_, JsonRows::Columns { def, .. }) if format.is_columnar() => {
                    send_columnar(&mut snapshot, (&select, &order), def, format, &tx).await
                }
                (_, JsonRows::Columns { json, .. }) => {
                    send_copy_json(&mut snapshot, (&select, &order), json, format, &tx).await
                }
                (
                    _,
                    JsonRows::Query {
                        json_row,
                        params,
                        order_by,
                    },
                ) => {
                    let read = (
                        select.as_str(),
                        json_row.as_str(),
                        &params[..],
                        order_by.as_str(),
                    );
                    send_query_json(&mut snapshot, read, format, &tx).await
                }
            };
            if let Err(e) = result {
                tracing::error!(error = %e, "reading rows failed");
                let _ = tx
                    .send(Err(std::io::Error::other("reading the rows failed")))
                    .await;
            }
            // Read only: ending it is all a commit does; dropping would too.
            let _ = snapshot.commit().await;
        });
        rx
    }
}
