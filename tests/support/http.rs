//! HTTP as the tests speak it beside reqwest: a JSON body read with its text
//! in the failure, `/readyz` polled until ready, and one request written by
//! hand over TCP, its answer read off the wire even when the server answers
//! before the body is all sent.

use std::time::{Duration, Instant};

use reqwest::Response;
use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::{Idem, ADMIN_TOKEN};

pub async fn json_body(r: Response) -> Value {
    let text = r.text().await.unwrap();
    serde_json::from_str(&text).unwrap_or_else(|_| panic!("not JSON: {text}"))
}

/// `GET /readyz`'s status (0 when there was no answer).
pub async fn readyz(client: &reqwest::Client, idem: &Idem) -> u16 {
    match client.get(idem.url("/readyz")).send().await {
        Ok(r) => r.status().as_u16(),
        Err(_) => 0,
    }
}

/// Polls `/readyz` until it answers 200, at most `within`; how long it took.
pub async fn wait_ready(
    client: &reqwest::Client,
    idem: &Idem,
    within: Duration,
) -> Option<Duration> {
    let started = Instant::now();
    while started.elapsed() < within {
        if readyz(client, idem).await == 200 {
            return Some(started.elapsed());
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    None
}

/// An answer read off the wire by `raw_request`.
#[derive(Debug)]
pub struct RawAnswer {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: String,
    pub elapsed: Duration,
}

impl RawAnswer {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    /// The problem's `code`, when the body is one.
    pub fn code(&self) -> String {
        serde_json::from_str::<serde_json::Value>(&self.body)
            .ok()
            .and_then(|v| v["code"].as_str().map(str::to_string))
            .unwrap_or_default()
    }
}

/// How a raw request sends its body.
pub enum RawBody {
    /// All of it, with its `Content-Length`.
    Whole(Vec<u8>),
    /// These bytes, then nothing more, the connection kept open, although
    /// `Content-Length` promises `declared` bytes.
    Stall { sent: Vec<u8>, declared: u64 },
}

/// One HTTP/1.1 request over a connection of its own, written by hand: the
/// body is written while the answer is read, so an answer that comes before
/// the body is all sent (a refusal) is still read, whatever happens to the
/// rest of the body. Fails when there is no answer within `deadline`.
pub async fn raw_request(
    addr: &str,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: RawBody,
    deadline: Duration,
) -> Result<RawAnswer, String> {
    let started = Instant::now();
    let stream = tokio::net::TcpStream::connect(addr)
        .await
        .map_err(|e| format!("connect: {e}"))?;
    let (mut reader, mut writer) = stream.into_split();
    let declared = match &body {
        RawBody::Whole(b) => b.len() as u64,
        RawBody::Stall { declared, .. } => *declared,
    };
    let mut head = format!(
        "{method} {path} HTTP/1.1\r\nhost: {addr}\r\nconnection: close\r\nauthorization: Bearer {ADMIN_TOKEN}\r\ncontent-length: {declared}\r\n"
    );
    for (k, v) in headers {
        head.push_str(&format!("{k}: {v}\r\n"));
    }
    head.push_str("\r\n");
    let sending = tokio::spawn(async move {
        writer.write_all(head.as_bytes()).await?;
        match body {
            RawBody::Whole(b) => {
                for chunk in b.chunks(64 * 1024) {
                    writer.write_all(chunk).await?;
                }
            }
            RawBody::Stall { sent, .. } => {
                writer.write_all(&sent).await?;
                writer.flush().await?;
                // Nothing more; the connection stays open until aborted.
                std::future::pending::<()>().await;
            }
        }
        writer.flush().await?;
        // Keep the write half open until the answer is read.
        std::future::pending::<()>().await;
        Ok::<_, std::io::Error>(())
    });
    let answer = tokio::time::timeout(deadline, read_answer(&mut reader)).await;
    sending.abort();
    let (status, headers, body) = answer
        .map_err(|_| format!("no answer within {deadline:?}"))?
        .map_err(|e| format!("reading the answer: {e}"))?;
    Ok(RawAnswer {
        status,
        headers,
        body,
        elapsed: started.elapsed(),
    })
}

pub type Answer = (u16, Vec<(String, String)>, String);

pub async fn read_answer(reader: &mut tokio::net::tcp::OwnedReadHalf) -> std::io::Result<Answer> {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 16 * 1024];
    let head_end = loop {
        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break i;
        }
        let n = reader.read(&mut chunk).await?;
        if n == 0 {
            return Err(std::io::Error::other(format!(
                "connection closed before an answer ({} bytes)",
                buf.len()
            )));
        }
        buf.extend_from_slice(&chunk[..n]);
    };
    let head = String::from_utf8_lossy(&buf[..head_end]).to_string();
    let mut lines = head.split("\r\n");
    let status: u16 = lines
        .next()
        .and_then(|l| l.split(' ').nth(1))
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| std::io::Error::other(format!("not an HTTP answer: {head}")))?;
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_string()))
        .collect();
    let length = headers
        .iter()
        .find(|(k, _)| k == "content-length")
        .and_then(|(_, v)| v.parse::<usize>().ok());
    let mut body = buf[head_end + 4..].to_vec();
    loop {
        if length.is_some_and(|l| body.len() >= l) {
            break;
        }
        let n = reader.read(&mut chunk).await?;
        if n == 0 {
            break;
        }
        body.extend_from_slice(&chunk[..n]);
    }
    Ok((status, headers, String::from_utf8_lossy(&body).to_string()))
}

/// A PUT of one order's day through `idem`, which must take it (200): that
/// idem serves and writes.
pub async fn put_one_order(idem: &Idem, table: &str) {
    let put = super::client()
        .put(idem.url(&format!("/partitions/{table}/2026-01-01")))
        .header("content-type", "application/x-ndjson")
        .body("{\"order_id\":1,\"ds\":\"2026-01-01\"}\n")
        .send()
        .await
        .expect("a PUT");
    let status = put.status();
    assert_eq!(status, 200, "{}", put.text().await.unwrap_or_default());
}
