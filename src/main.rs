use clap::Parser;
use idem::config::{Cli, Command};

// Small POSTs allocate and free many short-lived buffers across the
// runtime's threads; with mimalloc idem spends about a fifth less CPU per
// 100-row POST than with glibc's malloc (bench/small_writes.sh (b),
// measured in alternating runs; README).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    match Cli::parse().command {
        Command::Serve(args) => idem::app::run(*args).await,
        Command::Migrate(args) => idem::app::migrate(args).await,
        Command::Put(args) => {
            let outcome = idem::client::put::put(args).await;
            std::process::exit(i32::from(outcome.exit_code()))
        }
        Command::Post(args) => {
            let outcome = idem::client::post::post(args).await;
            std::process::exit(i32::from(outcome.exit_code()))
        }
    }
}
