use clap::Parser;
use idem::config::{Cli, Command};

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    match Cli::parse().command {
        Command::Serve(args) => idem::app::run(*args).await,
        Command::Migrate(args) => idem::app::migrate(args).await,
    }
}
