//! The `idem` binary's command line: `serve` and `migrate` run the server
//! (their settings live in `idem::config`), the other commands are the
//! client's (`client`).

use clap::{Parser, Subcommand};
use idem::config::{DatabaseArgs, ServeArgs};

use crate::client::{self, args};

#[derive(Debug, Parser)]
#[command(
    name = "idem",
    version,
    about = "Lands data in Postgres idempotently, over HTTP"
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Apply migrations, then serve HTTP until SIGTERM or SIGINT.
    Serve(Box<ServeArgs>),
    /// Apply the database migrations and exit.
    Migrate(DatabaseArgs),
    /// Client: PUT a file as partition DS of TABLE (or with --whole FILE
    /// as the whole table), retried under one Idempotency-Key; --dry-run
    /// stages and audits only. Exit codes: 0 done, 1 refused by the server
    /// (a failed audit included), 2 gave up after retries, 3 usage error.
    Put(args::PutArgs),
    /// Client: POST a file's rows to TABLE in batches, each under its own
    /// Idempotency-Key (a rerun sends only what is missing); with --channel
    /// NAME --offset-from-line, each batch commits its last record's number
    /// as the channel's offset (a rerun on the grown file sends only the new
    /// records). Exit codes as for `put`.
    Post(args::PostArgs),
    /// Client: PUT every partition from --from to --to, each from its file
    /// (--files with {ds}), --parallel at a time; a rerun loads only what
    /// is missing. Ends with a table of the partitions. With --atomic the
    /// range is one load (a part per file), published at once.
    Backfill(args::BackfillArgs),
    /// Client: a load that outlives a request, step by step: open, part,
    /// publish, status, audit, abandon. Exit codes as for `put`.
    Load(args::LoadArgs),
    /// Client: a partition's rows (with --whole, the table's), to stdout or
    /// -o FILE.
    Get(args::GetArgs),
    /// Client: the tables.
    Tables(args::ListArgs),
    /// Client: a table's partitions.
    Partitions(args::PartitionsArgs),
    /// Client: the loads ledger, newest first.
    Loads(args::LoadsArgs),
    /// Client: each load of TABLE as the server announces it, a line each,
    /// until interrupted; exits 2 when the stream breaks (and says how to
    /// resume).
    Watch(args::WatchArgs),
    /// Client: what the server recorded under an Idempotency-Key.
    Key(args::KeyArgs),
    /// Client: declare (or safely change) TABLE from a JSON file, as
    /// `PUT /tables/{table}` takes it.
    Declare(args::DeclareArgs),
    /// Client: drop TABLE with its partitions, rejects and keys (the
    /// ledger keeps its loads, marked dropped).
    Drop(args::DropArgs),
    /// Client: the rows of TABLE a `quarantine` policy kept.
    Rejects(args::RejectsArgs),
    /// Client: send TABLE's pending rejects again, under a key new to each
    /// run.
    Replay(args::ReplayArgs),
    /// Client: the caller's channels and their committed offsets; NAME
    /// alone as JSON; NAME --reset forgets its offset (an admin token).
    Channels(args::ChannelsArgs),
}

/// Help and the version exit 0; wrong arguments exit with the documented
/// usage code (3), not clap's 2, which means "gave up" here.
pub fn usage_error(error: clap::Error) -> ! {
    let code = match error.use_stderr() {
        true => i32::from(client::Exit::Usage.exit_code()),
        false => 0,
    };
    let _ = error.print();
    std::process::exit(code)
}
