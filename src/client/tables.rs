//! `idem declare TABLE FILE.json` (`PUT /tables/{table}`) and `idem drop
//! TABLE` (`DELETE /tables/{table}?confirm={table}`). Both are idempotent
//! on the server, so they are retried like any load.

use std::sync::Arc;

use super::args::{DeclareArgs, DropArgs};
use super::progress::{Progress, Unit};
use super::send::{send_until_settled, Answer, Load, Payload};
use super::{say, Exit};

/// Runs `idem declare`: the table as the server has it after, with its
/// `changes`, on stdout.
pub async fn declare(args: DeclareArgs) -> Exit {
    let declaration = match read_declaration(&args).await {
        Ok(declaration) => declaration,
        Err(why) => {
            eprintln!("idem declare: {why}");
            return Exit::Usage;
        }
    };
    let url = match args.server.endpoint(&["tables", &args.table], &[]) {
        Ok(url) => url,
        Err(outcome) => return outcome,
    };
    let load = Load {
        method: reqwest::Method::PUT,
        url,
        key: None,
        accept: None,
        headers: Vec::new(),
        what: format!("declare {}", args.table),
    };
    let payload = Payload::Bytes {
        data: declaration.into(),
        content_type: "application/json",
    };
    match send(&args.server, &load, &payload).await {
        Ok(table) => {
            say(&table.json);
            Exit::Done
        }
        Err(outcome) => outcome,
    }
}

/// The declaration's bytes, from the file or stdin (`-`); the server says
/// what is wrong with them.
async fn read_declaration(args: &DeclareArgs) -> Result<Vec<u8>, String> {
    if args.file.as_os_str() == "-" {
        let mut bytes = Vec::new();
        tokio::io::AsyncReadExt::read_to_end(&mut tokio::io::stdin(), &mut bytes)
            .await
            .map_err(|e| format!("reading stdin: {e}"))?;
        return Ok(bytes);
    }
    tokio::fs::read(&args.file)
        .await
        .map_err(|e| format!("cannot read {}: {e}", args.file.display()))
}

/// Runs `idem drop`: the table, its partitions and everything the server
/// keeps of it but its ledger, gone (nothing on stdout; done also when the
/// table was not there).
pub async fn drop(args: DropArgs) -> Exit {
    let table = args.table.as_str();
    let url = match args
        .server
        .endpoint(&["tables", table], &[("confirm", table)])
    {
        Ok(url) => url,
        Err(outcome) => return outcome,
    };
    let load = Load {
        method: reqwest::Method::DELETE,
        url,
        key: None,
        accept: None,
        headers: Vec::new(),
        what: format!("drop {table}"),
    };
    match send(&args.server, &load, &Payload::Nothing).await {
        Ok(_) => {
            eprintln!("idem drop: {table}: dropped (or was not there)");
            Exit::Done
        }
        Err(outcome) => outcome,
    }
}

/// Sends `load` until it is settled: the answer, printed as it came (the
/// table as declared, or a drop's receipt, or nothing).
async fn send(
    server: &super::args::ServerArgs,
    load: &Load,
    payload: &Payload<'_>,
) -> Result<Answer<serde_json::Value>, Exit> {
    let progress = Arc::new(Progress::new(&load.what, Unit::Bytes, None, false));
    send_until_settled(server, load, payload, &progress).await
}
