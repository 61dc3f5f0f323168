use clap::Parser;
use seckill_bench::args::Cli;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    // Every connection is a file descriptor, and the memory suite holds 2,000 at once.
    if let Err(err) = rlimit::increase_nofile_limit(u64::MAX) {
        eprintln!("cannot raise the open files limit: {err}");
    }
    seckill_bench::run(Cli::parse().args).await?;
    Ok(())
}
