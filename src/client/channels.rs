//! `idem channels [NAME [--reset]]` (the caller's channels and their
//! committed offsets, from `GET /channels`) and the read of one channel's
//! offset that `idem post --channel` starts from.

use std::sync::Arc;

use idem::problem::ProblemCode;
use idem::wire::channels::ChannelView;
use serde_json::json;

use super::args::{ChannelsArgs, ServerArgs};
use super::progress::{Progress, Unit};
use super::send::{
    read_as, settle, settle_unless_absent, with_causes, Answer, Load, Payload, ReadFailure,
};
use super::show::{list, Column};
use super::{say, Exit};

/// The problem code of a channel that never committed.
const NOT_FOUND: ProblemCode = ProblemCode::ChannelNotFound;

/// Runs `idem channels`: a table of the caller's channels, one channel as
/// JSON, or a channel reset.
pub async fn channels(args: ChannelsArgs) -> Exit {
    let outcome = match (&args.name, args.reset) {
        (None, _) => return list_channels(&args).await,
        (Some(name), false) => show_channel(&args.list.server, name).await,
        (Some(name), true) => reset_channel(&args.list.server, name).await,
    };
    match outcome {
        Ok(()) => Exit::Done,
        Err(outcome) => outcome,
    }
}

async fn list_channels(args: &ChannelsArgs) -> Exit {
    let columns: [Column<ChannelView>; 7] = [
        ("channel", |c| json!(c.name)),
        ("table", |c| json!(c.table)),
        ("offset", |c| json!(c.committed_offset)),
        ("kind", |c| json!(c.offset_kind)),
        ("commits", |c| json!(c.commits)),
        ("committed", |c| json!(c.committed_at)),
        ("load", |c| json!(c.load_id)),
    ];
    list(&args.list, &["channels"], &[], &columns).await
}

async fn show_channel(server: &ServerArgs, name: &str) -> Result<(), Exit> {
    match read_channel(server, name).await? {
        Some(channel) => {
            say(channel.json);
            Ok(())
        }
        None => {
            eprintln!(
                "idem channels: {name}: nothing committed on this channel (code {NOT_FOUND})"
            );
            Err(Exit::Refused)
        }
    }
}

/// `DELETE /channels/{name}`: done also when the channel was never used.
async fn reset_channel(server: &ServerArgs, name: &str) -> Result<(), Exit> {
    let load = Load {
        method: reqwest::Method::DELETE,
        url: server.endpoint(&["channels", name], &[])?,
        key: None,
        accept: None,
        headers: Vec::new(),
        what: format!("channel {name}"),
    };
    let progress = Arc::new(Progress::new(&load.what, Unit::Bytes, None, false));
    // A reset is the same whenever it lands: retrying it is safe.
    settle(server, &load, &Payload::Nothing, &progress, |_| async {
        Ok(())
    })
    .await?;
    say(json!({"channel": name, "reset": true}));
    Ok(())
}

/// The channel as `GET /channels/{name}` gives it; `None` when it never
/// committed.
async fn read_channel(
    server: &ServerArgs,
    name: &str,
) -> Result<Option<Answer<ChannelView>>, Exit> {
    let load = Load {
        method: reqwest::Method::GET,
        url: server.endpoint(&["channels", name], &[])?,
        key: None,
        accept: Some("application/json"),
        headers: Vec::new(),
        what: format!("channel {name}"),
    };
    let progress = Arc::new(Progress::new(&load.what, Unit::Bytes, None, false));
    let read = |response: reqwest::Response| async move {
        let cut = |why: String| ReadFailure::Cut(why);
        let text = response.text().await.map_err(|e| cut(with_causes(&e)))?;
        serde_json::from_str(&text).map_err(|e| cut(e.to_string()))
    };
    let found = settle_unless_absent(
        server,
        &load,
        &Payload::Nothing,
        &progress,
        Some(NOT_FOUND),
        read,
    )
    .await?;
    found
        .map(|json| read_as(json, &load.what, &progress))
        .transpose()
}

/// The records of a file the channel `name` has committed: its offset, a
/// record number (0 when it never committed).
pub async fn committed_records(server: &ServerArgs, name: &str) -> Result<u64, Exit> {
    let Some(channel) = read_channel(server, name).await? else {
        return Ok(0);
    };
    let channel = channel.read;
    let offset = &channel.committed_offset;
    offset.parse().map_err(|_| {
        eprintln!(
            "idem post: channel {name} has committed offset {offset:?} ({} offsets), not a \
             record number: it is fed by something else; use another channel",
            channel.offset_kind
        );
        Exit::Usage
    })
}
