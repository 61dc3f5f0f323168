use clap::Parser;
use seckill::cli::{Cli, Command};
use seckill::startup::Application;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    seckill::telemetry::init();
    match Cli::parse().command {
        Command::Serve(args) => {
            let app = Application::build(args).await?;
            // The first line on stdout is the bound address: scripts and tests that start
            // the service on port 0 read it from here.
            println!("listening on {}", app.local_addr());
            app.run_until_stopped().await?;
        }
        Command::Bench(args) => {
            seckill::bench::run(args).await?;
        }
    }
    Ok(())
}
