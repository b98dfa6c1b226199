//! The commands that read: `idem get` (a partition's rows, to a file or
//! stdout) and `idem tables`, `idem partitions`, `idem loads`, `idem key`
//! (terminal tables for people, `--json` for scripts). Reads are retried
//! like writes (they change nothing, so any retry is safe).

use std::path::{Path, PathBuf};
use std::sync::Arc;

use comfy_table::Table;
use futures::TryStreamExt;
use idem::period::Grain;
use idem::wire::keys::KeyRecord;
use idem::wire::loads::LedgerLoad;
use idem::wire::tables::{PartitionView, TableView};
use reqwest::header::LINK;
use serde::de::DeserializeOwned;
use serde_json::{json, Value};
use tokio::io::AsyncWriteExt;

use super::args::{GetArgs, KeyArgs, ListArgs, LoadsArgs, PartitionsArgs, RowsFormat, ServerArgs};
use super::progress::{Progress, Unit};
use super::send::{
    content_type_of, read_as, settle, with_causes, Load, Payload, ReadFailure, ARROW_STREAM,
    PARQUET,
};
use super::{say, Exit};

/// Runs `idem get`: the partition as the server gives it, written whole
/// (a download cut off is started again, from a fresh file).
pub async fn get(args: GetArgs) -> Exit {
    match get_rows(&args).await {
        Ok(()) => Exit::Done,
        Err(outcome) => outcome,
    }
}

async fn get_rows(args: &GetArgs) -> Result<(), Exit> {
    let (segments, what) = match &args.ds {
        Some(ds) if !args.whole => (
            ["partitions", &args.table, ds],
            format!("{} {ds}", args.table),
        ),
        _ => (
            ["tables", &args.table, "rows"],
            format!("{} (whole table)", args.table),
        ),
    };
    let url = args.server.endpoint(&segments, &[])?;
    let accept = rows_media_type(args.format, args.output.as_deref());
    let landing = landing_file(args.output.as_deref()).map_err(|e| {
        eprintln!("idem get: cannot write beside the output: {e}");
        Exit::Usage
    })?;
    let load = Load {
        method: reqwest::Method::GET,
        url,
        key: None,
        accept: Some(accept),
        headers: Vec::new(),
        what,
    };
    let progress = Arc::new(Progress::new(&load.what, Unit::Bytes, None, false));
    settle(
        &args.server,
        &load,
        &Payload::Nothing,
        &progress,
        |response| download_to(response, landing.path()),
    )
    .await?;
    match deliver(landing, args.output.as_deref()).await {
        Ok(()) => Ok(()),
        // A reader that stopped early (`idem get … | head`) is no failure.
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        Err(e) => {
            eprintln!("idem get: cannot write the rows: {e}");
            Err(Exit::Usage)
        }
    }
}

/// The media type `idem get` asks for: `format`'s, or the one the output's
/// name says (a gzipped name says none: the server answers no gzip), or
/// NDJSON.
fn rows_media_type(format: Option<RowsFormat>, output: Option<&Path>) -> &'static str {
    let named = || match output.and_then(|path| content_type_of(&path.to_string_lossy())) {
        Some((content_type, false)) => Some(content_type),
        _ => None,
    };
    match format {
        Some(RowsFormat::Ndjson) => "application/x-ndjson",
        Some(RowsFormat::Csv) => "text/csv",
        Some(RowsFormat::Parquet) => PARQUET,
        Some(RowsFormat::Arrow) => ARROW_STREAM,
        None => named().unwrap_or("application/x-ndjson"),
    }
}

/// Where the rows land until they are complete: a new file beside the
/// output (renamed to it at the end; made as any new file, under the
/// umask), or in the temporary directory for stdout.
fn landing_file(output: Option<&Path>) -> std::io::Result<tempfile::NamedTempFile> {
    let dir = output.map_or_else(std::env::temp_dir, parent_dir);
    tempfile::Builder::new()
        .prefix(".idem-get-")
        .make_in(&dir, |path| {
            std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .open(path)
        })
}

/// The directory a file goes in (`.` for a bare name).
fn parent_dir(path: &Path) -> PathBuf {
    match path.parent() {
        Some(parent) if !parent.as_os_str().is_empty() => parent.to_path_buf(),
        _ => PathBuf::from("."),
    }
}

/// The answer's body, streamed into the file at `path` (from its start:
/// an attempt after a cut writes it anew).
async fn download_to(response: reqwest::Response, path: &Path) -> Result<(), ReadFailure> {
    let local = |e: std::io::Error| ReadFailure::Local(format!("cannot write the rows: {e}"));
    let mut out = tokio::fs::File::create(path).await.map_err(local)?;
    let mut body = response.bytes_stream();
    while let Some(chunk) = body
        .try_next()
        .await
        .map_err(|e| ReadFailure::Cut(with_causes(&e)))?
    {
        out.write_all(&chunk).await.map_err(local)?;
    }
    out.flush().await.map_err(local)
}

/// The downloaded rows, renamed to `output` or copied to stdout.
async fn deliver(file: tempfile::NamedTempFile, output: Option<&Path>) -> std::io::Result<()> {
    match output {
        Some(path) => file.persist(path).map(drop).map_err(|e| e.error),
        None => {
            let mut rows = tokio::fs::File::open(file.path()).await?;
            let mut stdout = tokio::io::stdout();
            tokio::io::copy(&mut rows, &mut stdout).await?;
            stdout.flush().await
        }
    }
}

/// Runs `idem tables`.
pub async fn tables(args: ListArgs) -> Exit {
    let columns: [Column<TableView>; 6] = [
        ("table", |t| json!(t.def.name)),
        ("partitions", partitions_shown),
        ("rows", |t| json!(t.rows)),
        ("grain", |t| json!(t.def.grain)),
        ("primary key", |t| json!(t.def.primary_key)),
        ("updated", |t| json!(t.updated_at)),
    ];
    list(&args, &["tables"], &[], &columns).await
}

/// A table without partitions shows `whole` for them, not a count of 0
/// that reads as a partitioned table still empty.
fn partitions_shown(table: &TableView) -> Value {
    match table.def.grain {
        Grain::Whole => json!("whole"),
        _ => json!(table.partitions),
    }
}

/// Runs `idem partitions TABLE`.
pub async fn partitions(args: PartitionsArgs) -> Exit {
    let columns: [Column<PartitionView>; 5] = [
        ("ds", |p| json!(p.ds)),
        ("rows", |p| json!(p.rows)),
        ("published", |p| json!(p.published_at)),
        ("load", |p| json!(p.load_id)),
        ("sha256", |p| json!(p.content_sha256)),
    ];
    let path = ["partitions", args.table.as_str()];
    list(&args.list, &path, &[], &columns).await
}

/// Runs `idem loads`.
pub async fn loads(args: LoadsArgs) -> Exit {
    let columns: [Column<LedgerLoad>; 9] = [
        ("load", |l| json!(l.load_id)),
        ("table", |l| json!(l.table)),
        ("ds", |l| json!(l.ds)),
        ("mode", |l| json!(l.mode)),
        ("status", |l| json!(l.status)),
        ("rows", |l| json!(l.rows_written)),
        ("changed", |l| json!(l.changed)),
        ("key", |l| json!(l.idempotency_key)),
        ("finished", |l| json!(l.finished_at)),
    ];
    let mut query = Vec::new();
    if let Some(table) = &args.table {
        query.push(("table", table.as_str()));
    }
    if let Some(ds) = &args.ds {
        query.push(("ds", ds.as_str()));
    }
    list(&args.list, &["loads"], &query, &columns).await
}

/// Runs `idem key KEY`: what the server recorded under an Idempotency-Key.
pub async fn key(args: KeyArgs) -> Exit {
    let fetched = async {
        let url = args
            .server
            .endpoint(&["idempotency-keys", &args.key], &[])?;
        let (record, _) = fetch_page(&args.server, url, &args.key).await?;
        let progress = Progress::new(&args.key, Unit::Bytes, None, false);
        read_as::<KeyRecord>(record, &args.key, &progress)
    };
    let record = match fetched.await {
        Ok(record) => record,
        Err(outcome) => return outcome,
    };
    if args.json {
        say(&record.json);
        return Exit::Done;
    }
    let mut table = Table::new();
    table.load_style(comfy_table::presets::NOTHING);
    for (name, value) in key_rows(&record.read) {
        if !value.is_null() {
            table.add_row([name.to_string(), cell(&value)]);
        }
    }
    say(&table);
    Exit::Done
}

/// What `idem key` shows of a key's record (a null is left out): the key,
/// and, once its request completed, the answer it keeps.
fn key_rows(record: &KeyRecord) -> Vec<(&'static str, Value)> {
    match record {
        KeyRecord::InFlight(key) => vec![("key", json!(key.key)), ("status", json!(key.status))],
        KeyRecord::Completed(key) => {
            let receipt = key.response.receipt();
            let receipt = receipt.as_ref();
            vec![
                ("key", json!(key.key)),
                ("status", json!(key.status)),
                ("load", json!(key.load_id)),
                ("created", json!(key.created_at)),
                ("expires", json!(key.expires_at)),
                ("answer", json!(key.response.status)),
                ("table", json!(receipt.map(|r| r.table()))),
                ("ds", json!(receipt.and_then(|r| r.ds()))),
                ("changed", json!(receipt.and_then(|r| r.changed()))),
                (
                    "rows written",
                    json!(receipt.and_then(|r| r.rows_written())),
                ),
            ]
        }
    }
}

/// A column of a list: its heading, and its cell of an item.
pub(super) type Column<T> = (&'static str, fn(&T) -> Value);

/// Lists the items at `path` (following the server's `Link` pages up to
/// `--limit`) as a table of `columns`, or as JSON (the items as the server
/// sent them).
pub(super) async fn list<T: DeserializeOwned>(
    args: &ListArgs,
    path: &[&str],
    query: &[(&str, &str)],
    columns: &[Column<T>],
) -> Exit {
    let items = match fetch_all(&args.server, path, query, args.limit).await {
        Ok(items) => items,
        Err(outcome) => return outcome,
    };
    if args.json {
        say(Value::Array(items));
        return Exit::Done;
    }
    let what = path.join("/");
    let progress = Progress::new(&what, Unit::Bytes, None, false);
    let mut table = Table::new();
    table.load_style(comfy_table::presets::UTF8_BORDERS_ONLY);
    table.set_header(columns.iter().map(|(heading, _)| *heading));
    for item in items {
        let item = match read_as::<T>(item, &what, &progress) {
            Ok(item) => item.read,
            Err(outcome) => return outcome,
        };
        table.add_row(columns.iter().map(|(_, shown)| cell(&shown(&item))));
    }
    say(&table);
    Exit::Done
}

/// A value as a table cell: strings bare, lists joined, nothing for null.
fn cell(value: &Value) -> String {
    match value {
        Value::Null => String::new(),
        Value::String(text) => text.clone(),
        Value::Array(items) => items.iter().map(cell).collect::<Vec<_>>().join(", "),
        other => other.to_string(),
    }
}

/// Up to `limit` items of a paged list.
async fn fetch_all(
    server: &ServerArgs,
    path: &[&str],
    query: &[(&str, &str)],
    limit: u32,
) -> Result<Vec<Value>, Exit> {
    let limit = usize::try_from(limit).unwrap_or(usize::MAX);
    let mut url = server.endpoint(path, query)?;
    let mut items = Vec::new();
    loop {
        let (page, next) = fetch_page(server, url.clone(), &path.join("/")).await?;
        items.extend(page.as_array().into_iter().flatten().cloned());
        let next = next.and_then(|next| reqwest::Url::parse(&url).ok()?.join(&next).ok());
        match next {
            Some(next) if items.len() < limit => url = next.into(),
            _ => break,
        }
    }
    items.truncate(limit);
    Ok(items)
}

/// One JSON answer, and the path of its `Link: <…>; rel="next"` page.
async fn fetch_page(
    server: &ServerArgs,
    url: String,
    what: &str,
) -> Result<(Value, Option<String>), Exit> {
    let load = Load {
        method: reqwest::Method::GET,
        url,
        key: None,
        accept: Some("application/json"),
        headers: Vec::new(),
        what: what.to_string(),
    };
    let progress = Arc::new(Progress::new(what, Unit::Bytes, None, false));
    settle(
        server,
        &load,
        &Payload::Nothing,
        &progress,
        |response| async move {
            let next = response
                .headers()
                .get(LINK)
                .and_then(|link| link.to_str().ok())
                .and_then(next_page);
            let cut = |why: String| ReadFailure::Cut(why);
            let text = response.text().await.map_err(|e| cut(with_causes(&e)))?;
            let value = serde_json::from_str(&text).map_err(|e| cut(e.to_string()))?;
            Ok((value, next))
        },
    )
    .await
}

/// The target of `rel="next"` in a `Link` header.
fn next_page(link: &str) -> Option<String> {
    link.split(',').find_map(|part| {
        let (target, params) = part.split_once(';')?;
        params.contains("rel=\"next\"").then(|| {
            target
                .trim()
                .trim_start_matches('<')
                .trim_end_matches('>')
                .to_string()
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_next_page_is_read_off_the_link_header() {
        assert_eq!(
            next_page("</loads?limit=2&cursor=01a2>; rel=\"next\"").as_deref(),
            Some("/loads?limit=2&cursor=01a2")
        );
        assert_eq!(
            next_page("</a>; rel=\"prev\", </b>; rel=\"next\"").as_deref(),
            Some("/b")
        );
        assert_eq!(next_page("</a>; rel=\"prev\""), None);
    }
}
