//! Sending one load until it is settled: accepted, refused, or out of
//! retries (see `retry`). Every attempt streams the body afresh from its
//! file and carries the load's one Idempotency-Key.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::TryStreamExt;

use chrono::Utc;
use idem::problem::ProblemCode;
use idem::schema::AuditReport;
use idem::wire::problem::Problem;
use reqwest::header::{ACCEPT, CONTENT_ENCODING, CONTENT_TYPE, RETRY_AFTER};
use serde::de::DeserializeOwned;
use tokio_util::io::ReaderStream;

use super::args::ServerArgs;
use super::progress::Progress;
use super::retry::{final_conflict, verdict, Verdict};
use super::Exit;

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

    /// The file's length in bytes.
    pub async fn len(&self) -> std::io::Result<u64> {
        Ok(tokio::fs::metadata(&self.path).await?.len())
    }

    /// The file, to read from its start.
    pub async fn reader(&self) -> std::io::Result<tokio::fs::File> {
        tokio::fs::File::open(&self.path).await
    }
}

/// What one load sends: a file, streamed afresh each attempt, bytes, or
/// nothing (a read).
pub enum Payload<'a> {
    File(&'a FileBody),
    Bytes {
        data: bytes::Bytes,
        content_type: &'static str,
    },
    Nothing,
}

/// A request's body, its content type and whether it is gzipped.
struct Body {
    stream: reqwest::Body,
    content_type: &'static str,
    gzip: bool,
}

impl Payload<'_> {
    /// The body of one attempt. A file's bytes count on `progress` as they
    /// go.
    async fn body(&self, progress: &Arc<Progress>) -> std::io::Result<Option<Body>> {
        Ok(match self {
            Payload::File(file) => {
                progress.restart();
                let progress = Arc::clone(progress);
                let stream = ReaderStream::with_capacity(file.reader().await?, 256 * 1024)
                    .inspect_ok(move |chunk| {
                        progress.advance(u64::try_from(chunk.len()).unwrap_or(u64::MAX))
                    });
                Some(Body {
                    stream: reqwest::Body::wrap_stream(stream),
                    content_type: file.content_type,
                    gzip: file.gzip,
                })
            }
            Payload::Bytes { data, content_type } => Some(Body {
                stream: data.clone().into(),
                content_type,
                gzip: false,
            }),
            Payload::Nothing => None,
        })
    }
}

/// The content type a file name says, and whether it is gzipped.
pub fn content_type_of(name: &str) -> Option<(&'static str, bool)> {
    let lower = name.to_ascii_lowercase();
    let (base, gzip) = match lower.strip_suffix(".gz") {
        Some(base) => (base.to_string(), true),
        None => (lower, false),
    };
    let content_type = match base.rsplit('.').next()? {
        "ndjson" | "jsonl" => "application/x-ndjson",
        "json" => "application/json",
        "csv" => "text/csv",
        "parquet" => PARQUET,
        "arrow" | "arrows" => ARROW_STREAM,
        _ => return None,
    };
    Some((content_type, gzip))
}

pub const PARQUET: &str = "application/vnd.apache.parquet";
pub const ARROW_STREAM: &str = "application/vnd.apache.arrow.stream";

/// Whether a body of `content_type` is columnar (sent whole: its rows are
/// not lines to cut into batches).
pub fn is_columnar(content_type: &str) -> bool {
    content_type == PARQUET || content_type == ARROW_STREAM
}

async fn spool_stdin() -> std::io::Result<tempfile::NamedTempFile> {
    let spooled = tempfile::NamedTempFile::new()?;
    let mut out = tokio::fs::File::create(spooled.path()).await?;
    tokio::io::copy(&mut tokio::io::stdin(), &mut out).await?;
    Ok(spooled)
}

/// One request: where it goes, under which key (a write's), and how to
/// name it in messages.
pub struct Load {
    pub method: reqwest::Method,
    pub url: String,
    pub key: Option<String>,
    /// The `Accept` of a read.
    pub accept: Option<&'static str>,
    /// Other headers (`If-Match`).
    pub headers: Vec<(&'static str, String)>,
    pub what: String,
}

/// How one attempt ended.
enum Attempt<T> {
    /// A 2xx, read to the end.
    Read(T),
    /// Another status, with its `Retry-After` and its body (a problem).
    Answered {
        status: u16,
        retry_after: Option<String>,
        body: String,
    },
    /// No answer, or one that broke off: why.
    NoAnswer(String),
    /// Nothing a retry can cure on this side (a file that cannot be read
    /// or written, a header that cannot be sent): why.
    Stop(String),
}

/// Why an answer could not be read.
pub enum ReadFailure {
    /// It broke off (retried like no answer).
    Cut(String),
    /// Writing it here failed (not retried: a usage error).
    Local(String),
}

/// A 2xx answer: its JSON as the server sent it (what a command prints,
/// every field of it) and the same read as the type its request answers
/// (what a command reads).
pub struct Answer<T> {
    pub json: serde_json::Value,
    pub read: T,
}

/// `json`, an answer to `what`, read as `T`. An answer this client cannot
/// read is said on `progress`, and ends the command (its outcome unknown:
/// a rerun under the same key is answered from the server's record).
pub fn read_as<T: DeserializeOwned>(
    json: serde_json::Value,
    what: &str,
    progress: &Progress,
) -> Result<Answer<T>, Exit> {
    match T::deserialize(&json) {
        Ok(read) => Ok(Answer { json, read }),
        Err(e) => {
            progress.note(&format!(
                "idem: {what}: the server's answer is not one this client reads ({e}): {json}"
            ));
            Err(Exit::GaveUp)
        }
    }
}

/// Sends a write until it is settled: its answer (see `Answer`), or how
/// it ended (why is said on stderr).
pub async fn send_until_settled<T: DeserializeOwned>(
    server: &ServerArgs,
    load: &Load,
    body: &Payload<'_>,
    progress: &Arc<Progress>,
) -> Result<Answer<T>, Exit> {
    let json = settle(server, load, body, progress, |response| async move {
        let text = response
            .text()
            .await
            .map_err(|e| ReadFailure::Cut(with_causes(&e)))?;
        Ok(serde_json::from_str(&text).unwrap_or_default())
    })
    .await?;
    read_as(json, &load.what, progress)
}

/// Sends `load` until a 2xx answer is read by `read` (an answer cut off is
/// retried like no answer), a refusal, a local failure, or the end of the
/// retries.
pub async fn settle<T, F, Fut>(
    server: &ServerArgs,
    load: &Load,
    body: &Payload<'_>,
    progress: &Arc<Progress>,
    read: F,
) -> Result<T, Exit>
where
    F: Fn(reqwest::Response) -> Fut,
    Fut: std::future::Future<Output = Result<T, ReadFailure>>,
{
    let found = settle_unless_absent(server, load, body, progress, None, read).await?;
    // Without an `absent` code every answer is read or refused.
    found.ok_or(Exit::Refused)
}

/// `settle`, except that a 404 whose problem has the code `absent` is no
/// refusal but `None`: a read of something that may not exist yet (a
/// channel that never committed).
pub async fn settle_unless_absent<T, F, Fut>(
    server: &ServerArgs,
    load: &Load,
    body: &Payload<'_>,
    progress: &Arc<Progress>,
    absent: Option<ProblemCode>,
    read: F,
) -> Result<Option<T>, Exit>
where
    F: Fn(reqwest::Response) -> Fut,
    Fut: std::future::Future<Output = Result<T, ReadFailure>>,
{
    let client = http_client()?;
    let policy = server.retry_policy();
    let mut waits = policy.waits();
    let started = Instant::now();
    let mut attempt = 0;
    loop {
        attempt += 1;
        let (after, why) = match attempt_once(&client, server, load, body, progress, &read).await {
            Attempt::Read(value) => return Ok(Some(value)),
            Attempt::Answered { status, body, .. }
                if status == 404 && absent.is_some() && problem_code(&body) == absent =>
            {
                return Ok(None)
            }
            Attempt::Answered {
                status,
                retry_after,
                body,
            } => match settled_verdict(status, retry_after.as_deref(), &body) {
                Verdict::Refused => {
                    report_refusal(load, status, &body, progress);
                    if status == 401 {
                        progress.note(token_hint(server.token.is_some()));
                    }
                    return Err(Exit::Refused);
                }
                Verdict::Retry { after } => (after, format!("HTTP {status}")),
                // A 2xx is read, never answered: nothing to wait for.
                Verdict::Done => (None, format!("HTTP {status}")),
            },
            Attempt::NoAnswer(why) => (None, why),
            Attempt::Stop(why) => {
                progress.note(&format!("idem: {}: {why}", load.what));
                return Err(Exit::Usage);
            }
        };
        let Some(wait) = policy.next_wait(waits.next(), after, started.elapsed()) else {
            progress.note(&format!(
                "idem: {}: gave up after {attempt} attempts in {:.0} s; last: {why}",
                load.what,
                started.elapsed().as_secs_f64()
            ));
            return Err(Exit::GaveUp);
        };
        progress.note(&format!(
            "idem: {}: attempt {attempt} failed ({why}); retrying in {:.1} s",
            load.what,
            wait.as_secs_f64()
        ));
        tokio::time::sleep(wait).await;
    }
}

/// The verdict on an answer: a final 409 (see `final_conflict`) is a
/// refusal, whatever its status alone would say.
fn settled_verdict(status: u16, retry_after: Option<&str>, body: &str) -> Verdict {
    match final_conflict(status, problem_code(body)) {
        true => Verdict::Refused,
        false => verdict(Some(status), retry_after, Utc::now()),
    }
}

/// The `code` of a problem body, if it is one.
fn problem_code(body: &str) -> Option<ProblemCode> {
    serde_json::from_str::<Problem>(body)
        .ok()
        .map(|problem| problem.code)
}

/// What to do about a 401: the token is where the client looks for it.
fn token_hint(token_sent: bool) -> &'static str {
    match token_sent {
        false => "idem: the server needs a bearer token: set IDEM_TOKEN (or pass --token)",
        true => {
            "idem: the server did not accept the token: set IDEM_TOKEN (or --token) to a valid one"
        }
    }
}

pub(super) fn http_client() -> Result<reqwest::Client, Exit> {
    reqwest::Client::builder()
        .connect_timeout(Duration::from_secs(10))
        .read_timeout(Duration::from_secs(120))
        .build()
        .map_err(|e| {
            eprintln!("idem: cannot make an HTTP client: {e}");
            Exit::Usage
        })
}

async fn attempt_once<T, F, Fut>(
    client: &reqwest::Client,
    server: &ServerArgs,
    load: &Load,
    body: &Payload<'_>,
    progress: &Arc<Progress>,
    read: &F,
) -> Attempt<T>
where
    F: Fn(reqwest::Response) -> Fut,
    Fut: std::future::Future<Output = Result<T, ReadFailure>>,
{
    let mut request = client.request(load.method.clone(), &load.url);
    match body.body(progress).await {
        Ok(Some(body)) => {
            request = request
                .header(CONTENT_TYPE, body.content_type)
                .body(body.stream);
            if body.gzip {
                request = request.header(CONTENT_ENCODING, "gzip");
            }
        }
        Ok(None) => {}
        Err(e) => return Attempt::Stop(format!("cannot read the body: {e}")),
    }
    if let Some(key) = &load.key {
        request = request.header("idempotency-key", key);
    }
    if let Some(accept) = load.accept {
        request = request.header(ACCEPT, accept);
    }
    for (name, value) in &load.headers {
        request = request.header(*name, value);
    }
    if let Some(token) = &server.token {
        request = request.bearer_auth(token);
    }
    let response = match request.send().await {
        Ok(response) => response,
        Err(e) if e.is_builder() => return Attempt::Stop(with_causes(&e)),
        Err(e) => return Attempt::NoAnswer(with_causes(&e)),
    };
    let status = response.status().as_u16();
    if response.status().is_success() {
        return match read(response).await {
            Ok(value) => Attempt::Read(value),
            Err(ReadFailure::Cut(why)) => Attempt::NoAnswer(format!("reading the answer: {why}")),
            Err(ReadFailure::Local(why)) => Attempt::Stop(why),
        };
    }
    let retry_after = response
        .headers()
        .get(RETRY_AFTER)
        .and_then(|v| v.to_str().ok())
        .map(str::to_string);
    // The status decides; a problem cut off only tells less.
    Attempt::Answered {
        status,
        retry_after,
        body: response.text().await.unwrap_or_default(),
    }
}

/// An error and what caused it (reqwest's own message is only "error
/// sending request").
pub(super) fn with_causes(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut cause = error.source();
    while let Some(inner) = cause {
        text.push_str(": ");
        text.push_str(&inner.to_string());
        cause = inner.source();
    }
    text
}

/// One line with the problem's title, detail and code, then the first bad
/// rows of a 422, or the failed audits of a refused publish.
fn report_refusal(load: &Load, status: u16, body: &str, progress: &Progress) {
    let Ok(problem) = serde_json::from_str::<Problem>(body) else {
        // Not a problem (a proxy's page, say): its first words.
        let start: String = body.chars().take(200).collect();
        let start = start.split_whitespace().collect::<Vec<_>>().join(" ");
        progress.note(&format!(
            "idem: {}: refused, HTTP {status}: {start}",
            load.what
        ));
        return;
    };
    progress.note(&format!(
        "idem: {}: refused, HTTP {status} {}: {} (code {})",
        load.what, problem.title, problem.detail, problem.code
    ));
    if let Some(report) = &problem.report {
        report_audits(report, progress);
    }
    for row in problem.errors.iter().flatten().take(5) {
        progress.note(&format!(
            "  line {}, column {}: {}",
            row.line,
            row.column.as_deref().unwrap_or("-"),
            row.message
        ));
    }
}

/// The failed audits of an `audit_failed` problem's report, said one line
/// each (expected, found), then its first example row.
pub(super) fn report_audits(report: &AuditReport, progress: &Progress) {
    for line in audit_lines(report) {
        progress.note(&line);
    }
}

/// The lines `report_audits` says.
fn audit_lines(report: &AuditReport) -> Vec<String> {
    let mut lines = Vec::new();
    for audit in report.audits.iter().filter(|audit| !audit.passed) {
        let scope = match (&audit.partition, &audit.columns) {
            (Some(ds), _) => format!(" {ds}"),
            (None, Some(columns)) => format!(" ({})", columns.join(", ")),
            (None, None) => String::new(),
        };
        lines.push(format!(
            "  audit {}{scope} failed: expected {}, found {}",
            audit.audit, audit.expected, audit.found
        ));
        if let Some(example) = audit.examples.first() {
            lines.push(format!("    e.g. {example}"));
        }
    }
    lines
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_failed_audit_is_said_with_its_partition_or_columns_and_an_example() {
        let report: AuditReport =
            serde_json::from_value(serde_json::json!({"passed": false, "audits": [
                {"audit": "min_rows", "partition": "2026-10-04", "columns": null, "passed": false,
                 "expected": 5, "found": 2, "examples": []},
                {"audit": "not_null", "partition": null, "columns": ["status"], "passed": false,
                 "expected": 0, "found": 1, "examples": [{"order_id": 7, "status": null}]},
                {"audit": "max_rows", "partition": "2026-10-04", "columns": null, "passed": true,
                 "expected": 9, "found": 2, "examples": []}
            ]}))
            .unwrap();
        assert_eq!(
            audit_lines(&report),
            [
                "  audit min_rows 2026-10-04 failed: expected 5, found 2",
                "  audit not_null (status) failed: expected 0, found 1",
                r#"    e.g. {"order_id":7,"status":null}"#,
            ]
        );
    }

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
        assert_eq!(content_type_of("x.parquet"), Some((PARQUET, false)));
        assert_eq!(content_type_of("x.arrows"), Some((ARROW_STREAM, false)));
        assert_eq!(content_type_of("x.xlsx"), None);
        assert_eq!(content_type_of("x"), None);
    }
}
