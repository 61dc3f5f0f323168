use clap::Parser;
use seckill::config::{Cli, Command};
use seckill::startup::Application;

/// A request allocates a few dozen small buffers (headers, keys, the answer) and frees them
/// on other threads; mimalloc does that in about half the instructions of glibc's malloc
/// (callgrind, PERFORMANCE.md).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    seckill::telemetry::init();
    // `rediss://` goes through rustls, which needs its crypto chosen once per process.
    let _ = rustls::crypto::ring::default_provider().install_default();
    // Every connection is a file descriptor, and the usual soft limit (1024) is below what
    // one instance behind Nginx, or the bench, holds under load. Raise it to the hard limit.
    match rlimit::increase_nofile_limit(u64::MAX) {
        Ok(limit) => tracing::debug!(limit, "open files limit"),
        Err(err) => tracing::warn!(error = %err, "cannot raise the open files limit"),
    }
    match Cli::parse().command {
        Command::Serve(args) => {
            let app = Application::build(args).await?;
            // The first line on stdout is the bound address: scripts and tests that start
            // the service on port 0 read it from here.
            println!("listening on {}", app.local_addr());
            app.run_until_stopped().await?;
        }
    }
    Ok(())
}
