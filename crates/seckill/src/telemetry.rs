//! Tracing set-up, done once per process.

use std::io::IsTerminal;

use tracing_subscriber::EnvFilter;

/// Logs to stderr at the level `RUST_LOG` asks for (`info` when unset).
///
/// Per-request spans are at `debug`, so the default level costs nothing on the hot path.
pub fn init() {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info"));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal())
        .init();
}
