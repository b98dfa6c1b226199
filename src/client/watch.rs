//! `idem watch TABLE`: each load of TABLE as the server announces it
//! (`GET /loads/events`), a line each, until interrupted. A stream the
//! server ends at its lifetime is resumed from the last load seen; one that
//! breaks ends the command with exit code 2, saying where to resume
//! (`--after`).

use futures::StreamExt;

use super::args::WatchArgs;
use super::send::{http_client, with_causes};
use super::{say, Exit};
use idem::wire::loads::LedgerLoad;

/// Runs `idem watch`.
pub async fn watch(args: WatchArgs) -> Exit {
    let client = match http_client() {
        Ok(client) => client,
        Err(exit) => return exit,
    };
    let mut after = args.after;
    loop {
        match follow(&client, &args, &mut after).await {
            // The server ended the stream at its lifetime: resume.
            Ok(()) => continue,
            Err(exit) => {
                if let Some(after) = after {
                    eprintln!("idem: resume with --after {after}");
                }
                return exit;
            }
        }
    }
}

/// One stream, each load printed; `Ok` when the server closed it as it
/// does at its lifetime, the exit otherwise.
async fn follow(
    client: &reqwest::Client,
    args: &WatchArgs,
    after: &mut Option<i64>,
) -> Result<(), Exit> {
    let url = args
        .server
        .endpoint(&["loads", "events"], &[("table", &args.table)])?;
    let mut request = client.get(url);
    if let Some(token) = &args.server.token {
        request = request.bearer_auth(token);
    }
    if let Some(after) = after {
        request = request.header("last-event-id", after.to_string());
    }
    let response = request.send().await.map_err(|e| {
        eprintln!("idem: no answer from the server: {}", with_causes(&e));
        Exit::GaveUp
    })?;
    if !response.status().is_success() {
        let status = response.status();
        let text = response.text().await.unwrap_or_default();
        eprintln!("idem: the server answered {status}: {text}");
        return Err(Exit::Refused);
    }
    let mut body = response.bytes_stream();
    let mut buffer = String::new();
    while let Some(chunk) = body.next().await {
        let chunk = chunk.map_err(|e| {
            eprintln!("idem: the stream broke: {}", with_causes(&e));
            Exit::GaveUp
        })?;
        buffer.push_str(&String::from_utf8_lossy(&chunk));
        while let Some(end) = buffer.find("\n\n") {
            let block: String = buffer.drain(..end + 2).collect();
            match event_of(&block) {
                Some(("close", _, _)) => return Ok(()),
                Some(("load", Some(id), data)) => {
                    let load: LedgerLoad = serde_json::from_str(&data).map_err(|e| {
                        eprintln!("idem: a load event the client does not read: {e}");
                        Exit::GaveUp
                    })?;
                    say(line(&load));
                    *after = Some(id);
                }
                _ => {}
            }
        }
    }
    eprintln!("idem: the server ended the stream");
    Err(Exit::GaveUp)
}

/// An event block's name, id and data (heartbeats, comments, have none).
fn event_of(block: &str) -> Option<(&str, Option<i64>, String)> {
    let (mut name, mut id, mut data) = (None, None, String::new());
    for line in block.lines() {
        if let Some(value) = line.strip_prefix("event:") {
            name = Some(value.trim());
        } else if let Some(value) = line.strip_prefix("id:") {
            id = value.trim().parse().ok();
        } else if let Some(value) = line.strip_prefix("data:") {
            data.push_str(value.trim_start());
        }
    }
    Some((name?, id, data))
}

/// A load as one line: when, table and partition, mode, status, rows.
fn line(load: &LedgerLoad) -> String {
    format!(
        "{} {} {} {} {} rows={} load={}",
        load.finished_at.format("%Y-%m-%dT%H:%M:%SZ"),
        load.table,
        load.ds.as_deref().unwrap_or("-"),
        load.mode,
        load.status.as_str(),
        load.rows_written,
        load.load_id
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_event_block_reads_as_its_name_id_and_data() {
        let block = "event: load\nid: 7\ndata: {\"a\":1}\n\n";
        assert_eq!(
            event_of(block),
            Some(("load", Some(7), "{\"a\":1}".to_string()))
        );
        assert_eq!(event_of(": heartbeat\n\n"), None);
    }
}
