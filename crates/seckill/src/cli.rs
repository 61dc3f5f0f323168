//! The command line.

use clap::{Parser, Subcommand};

use crate::bench::BenchArgs;
use crate::config::ServeArgs;

/// A flash-sale stock service that makes distributed locking on Redis visible.
#[derive(Debug, Parser)]
#[command(name = "seckill", version, about)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run one instance of the service.
    Serve(ServeArgs),
    /// Drive the same load at each variant through Nginx and print the comparison.
    Bench(BenchArgs),
}
