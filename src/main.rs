use clap::Parser;

mod cli;
mod client;

use cli::{usage_error, Cli, Command};

// Small POSTs allocate and free many short-lived buffers across the
// runtime's threads; with mimalloc idem spends about a fifth less CPU per
// 100-row POST than with glibc's malloc (bench/small_writes.sh (b),
// measured in alternating runs; docs/performance/results.md).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> anyhow::Result<()> {
    let command = match Cli::try_parse() {
        Ok(cli) => cli.command,
        Err(e) => usage_error(e),
    };
    let mut runtime = tokio::runtime::Builder::new_multi_thread();
    // The server's threads are a setting (IDEM_WORKER_THREADS); a client
    // command keeps tokio's default, a thread a core.
    if let Command::Serve(args) = &command {
        runtime.worker_threads(args.worker_threads);
    }
    runtime.enable_all().build()?.block_on(run(command))
}

async fn run(command: Command) -> anyhow::Result<()> {
    let outcome = match command {
        Command::Serve(args) => return idem::app::run(*args).await,
        Command::Migrate(args) => return idem::app::migrate(args).await,
        Command::Put(args) => client::put::put(args).await,
        Command::Post(args) => client::post::post(args).await,
        Command::Backfill(args) => client::backfill::backfill(args).await,
        Command::Load(args) => client::load::load(args).await,
        Command::Get(args) => client::show::get(args).await,
        Command::Tables(args) => client::show::tables(args).await,
        Command::Partitions(args) => client::show::partitions(args).await,
        Command::Loads(args) => client::show::loads(args).await,
        Command::Watch(args) => client::watch::watch(args).await,
        Command::Key(args) => client::show::key(args).await,
        Command::Declare(args) => client::tables::declare(args).await,
        Command::Drop(args) => client::tables::drop(args).await,
        Command::Rejects(args) => client::rejects::rejects(args).await,
        Command::Replay(args) => client::rejects::replay(args).await,
        Command::Channels(args) => client::channels::channels(args).await,
    };
    std::process::exit(i32::from(outcome.exit_code()))
}
