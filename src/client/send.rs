//! Sending one load until it is settled: accepted, refused, or out of
//! retries (see `retry`). Every attempt streams the body afresh from its
//! file and carries the load's one Idempotency-Key.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use reqwest::header::{CONTENT_ENCODING, CONTENT_TYPE, RETRY_AFTER};
use tokio_util::io::ReaderStream;

use super::args::ServerArgs;
use super::retry::{verdict, Verdict};
use super::Outcome;

/// A file to send as a body: its content type from its name (or
/// `--format`), gzipped bodies sent as such. Stdin is copied to a
/// temporary file first, so that a retry can send it again.
pub struct FileBody {
    path: PathBuf,
    pub content_type: &'static str,
    pub gzip: bool,
    /// Holds stdin's copy for as long as the body is needed.
    _spooled: Option<tempfile::NamedTempFile>,
}

impl FileBody {
    pub async fn open(path: &Path, format: Option<&str>) -> Result<Self, String> {
        let name = match format {
            Some(format) => format!("body.{format}"),
            None if path == Path::new("-") => {
                return Err("reading stdin (-) needs --format ndjson|json|csv[.gz]".into())
            }
            None => path.to_string_lossy().into_owned(),
        };
        let (content_type, gzip) = content_type_of(&name).ok_or_else(|| {
            format!(
                "{name:?}: the format is not .ndjson, .jsonl, .json or .csv (optionally .gz); say it with --format"
            )
        })?;
        let (path, spooled) = if path == Path::new("-") {
            let spooled = spool_stdin()
                .await
                .map_err(|e| format!("reading stdin: {e}"))?;
            (spooled.path().to_path_buf(), Some(spooled))
        } else {
            (path.to_path_buf(), None)
        };
        Ok(FileBody {
            path,
            content_type,
            gzip,
            _spooled: spooled,
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The file, to read from its start.
    pub async fn reader(&self) -> std::io::Result<tokio::fs::File> {
        tokio::fs::File::open(&self.path).await
    }
}

/// What one load sends: a file, streamed afresh each attempt, or bytes.
pub enum Payload<'a> {
    File(&'a FileBody),
    Bytes {
        data: bytes::Bytes,
        content_type: &'static str,
    },
}

impl Payload<'_> {
    /// The body of one attempt, and its content type and encoding.
    async fn body(&self) -> std::io::Result<(reqwest::Body, &'static str, bool)> {
        Ok(match self {
            Payload::File(file) => {
                let stream = ReaderStream::new(file.reader().await?);
                let body = reqwest::Body::wrap_stream(stream);
                (body, file.content_type, file.gzip)
            }
            Payload::Bytes { data, content_type } => (data.clone().into(), content_type, false),
        })
    }
}

/// The content type a file name says, and whether it is gzipped.
fn content_type_of(name: &str) -> Option<(&'static str, bool)> {
    let lower = name.to_ascii_lowercase();
    let (base, gzip) = match lower.strip_suffix(".gz") {
        Some(base) => (base.to_string(), true),
        None => (lower, false),
    };
    let content_type = match base.rsplit('.').next()? {
        "ndjson" | "jsonl" => "application/x-ndjson",
        "json" => "application/json",
        "csv" => "text/csv",
        _ => return None,
    };
    Some((content_type, gzip))
}

async fn spool_stdin() -> std::io::Result<tempfile::NamedTempFile> {
    let spooled = tempfile::NamedTempFile::new()?;
    let mut out = tokio::fs::File::create(spooled.path()).await?;
    tokio::io::copy(&mut tokio::io::stdin(), &mut out).await?;
    Ok(spooled)
}

/// One load: where it goes, under which key, and how to name it in messages.
pub struct Load {
    pub method: reqwest::Method,
    pub url: String,
    pub key: String,
    pub what: String,
}

/// What one attempt brought back.
struct Answer {
    status: Option<u16>,
    retry_after: Option<String>,
    body: String,
    /// Why no answer came.
    failure: Option<String>,
}

/// Sends `load` until it is settled: its receipt, or how it ended (why is
/// said on stderr).
pub async fn send_until_settled(
    server: &ServerArgs,
    load: &Load,
    body: &Payload<'_>,
) -> Result<serde_json::Value, Outcome> {
    let client = match reqwest::Client::builder()
        .connect_timeout(Duration::from_secs(10))
        .read_timeout(Duration::from_secs(120))
        .build()
    {
        Ok(client) => client,
        Err(e) => {
            eprintln!("idem: cannot make an HTTP client: {e}");
            return Err(Outcome::Usage);
        }
    };
    let policy = server.retry_policy();
    let mut waits = policy.waits();
    let started = Instant::now();
    let mut attempt = 0;
    loop {
        attempt += 1;
        let answer = attempt_once(&client, server, load, body).await;
        let after = match verdict(
            answer.status,
            answer.retry_after.as_deref(),
            chrono::Utc::now(),
        ) {
            Verdict::Done => {
                return Ok(serde_json::from_str(&answer.body).unwrap_or_default());
            }
            Verdict::Refused => {
                report_refusal(load, &answer);
                return Err(Outcome::Refused);
            }
            Verdict::Retry { after } => after,
        };
        let why = answer
            .failure
            .unwrap_or_else(|| format!("HTTP {}", answer.status.unwrap_or_default()));
        match policy.next_wait(waits.next(), after, started.elapsed()) {
            Some(wait) => {
                if !server.quiet {
                    eprintln!(
                        "idem: {}: attempt {attempt} failed ({why}); retrying in {:.1} s",
                        load.what,
                        wait.as_secs_f64()
                    );
                }
                tokio::time::sleep(wait).await;
            }
            None => {
                eprintln!(
                    "idem: {}: gave up after {attempt} attempts in {:.0} s; last: {why}",
                    load.what,
                    started.elapsed().as_secs_f64()
                );
                return Err(Outcome::GaveUp);
            }
        }
    }
}

async fn attempt_once(
    client: &reqwest::Client,
    server: &ServerArgs,
    load: &Load,
    body: &Payload<'_>,
) -> Answer {
    let no_answer = |failure: String| Answer {
        status: None,
        retry_after: None,
        body: String::new(),
        failure: Some(failure),
    };
    let (stream, content_type, gzip) = match body.body().await {
        Ok(body) => body,
        Err(e) => return no_answer(format!("reading the body: {e}")),
    };
    let mut request = client
        .request(load.method.clone(), &load.url)
        .header("idempotency-key", &load.key)
        .header(CONTENT_TYPE, content_type)
        .body(stream);
    if gzip {
        request = request.header(CONTENT_ENCODING, "gzip");
    }
    if let Some(token) = &server.token {
        request = request.bearer_auth(token);
    }
    let response = match request.send().await {
        Ok(response) => response,
        Err(e) => return no_answer(e.to_string()),
    };
    let status = response.status().as_u16();
    let retry_after = response
        .headers()
        .get(RETRY_AFTER)
        .and_then(|v| v.to_str().ok())
        .map(str::to_string);
    match response.text().await {
        Ok(text) => Answer {
            status: Some(status),
            retry_after,
            body: text,
            failure: None,
        },
        Err(e) => no_answer(format!("reading the answer: {e}")),
    }
}

/// One line with the problem's title, detail and code, then the first bad
/// rows of a 422.
fn report_refusal(load: &Load, answer: &Answer) {
    let status = answer.status.unwrap_or_default();
    let problem: serde_json::Value = serde_json::from_str(&answer.body).unwrap_or_default();
    let text = |field: &str| problem[field].as_str().unwrap_or("").to_string();
    eprintln!(
        "idem: {}: refused, HTTP {status} {}: {} (code {})",
        load.what,
        text("title"),
        text("detail"),
        text("code")
    );
    for row in problem["errors"].as_array().into_iter().flatten().take(5) {
        eprintln!(
            "  line {}, column {}: {}",
            row["line"],
            row["column"].as_str().unwrap_or("-"),
            row["message"].as_str().unwrap_or("")
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_file_name_says_its_format() {
        assert_eq!(
            content_type_of("d/2026-10-12.csv"),
            Some(("text/csv", false))
        );
        assert_eq!(
            content_type_of("x.NDJSON.gz"),
            Some(("application/x-ndjson", true))
        );
        assert_eq!(
            content_type_of("x.jsonl"),
            Some(("application/x-ndjson", false))
        );
        assert_eq!(
            content_type_of("x.json.gz"),
            Some(("application/json", true))
        );
        assert_eq!(content_type_of("body.csv.gz"), Some(("text/csv", true)));
        assert_eq!(content_type_of("x.parquet"), None);
        assert_eq!(content_type_of("x"), None);
    }
}
