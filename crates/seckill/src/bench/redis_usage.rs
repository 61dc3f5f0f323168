//! What Redis itself spent on a load: commands and CPU time from `INFO`, read on every
//! master of the store (one for a standalone Redis, each master of a Cluster), so that a
//! row can say how the work spread over them.

use std::time::Duration;

use anyhow::Context;
use redis::aio::MultiplexedConnection;

use crate::store::{RedisMode, Store, StoreConfig};

/// One connection per master, opened at the start of the bench.
pub struct Masters {
    nodes: Vec<(String, MultiplexedConnection)>,
}

/// One master's counters at one moment.
#[derive(Debug, Clone, Copy)]
pub struct Usage {
    pub commands: u64,
    pub cpu_seconds: f64,
}

impl Masters {
    /// The masters behind `urls` (one server, or the seed nodes of a Cluster, which is
    /// asked for its masters), each with a connection of its own.
    pub async fn connect(
        mode: RedisMode,
        urls: &str,
        sentinel_master: Option<&str>,
    ) -> anyhow::Result<Self> {
        let config = StoreConfig {
            mode,
            urls: urls.to_owned(),
            tls_ca: None,
            timeout: Duration::from_secs(5),
            sentinel_master: sentinel_master.map(str::to_owned),
        };
        let seeds = config
            .url_list()
            .iter()
            .map(|u| (*u).to_owned())
            .collect::<Vec<_>>();
        let first = seeds
            .first()
            .context("--redis-url names no server")?
            .clone();
        let store = Store::connect(config)?;
        let masters = store
            .masters()
            .await
            .with_context(|| format!("asking {urls} for its masters"))?;
        let mut nodes = Vec::with_capacity(masters.len());
        for master in masters {
            let url = match mode {
                RedisMode::Standalone => first.clone(),
                RedisMode::Cluster | RedisMode::Sentinel => with_address(&first, &master.addr),
            };
            let conn = redis::Client::open(url.as_str())?
                .get_multiplexed_async_connection()
                .await
                .with_context(|| format!("connecting to {} for INFO", master.addr))?;
            nodes.push((master.addr, conn));
        }
        Ok(Self { nodes })
    }

    /// Every master's counters now, in the masters' order.
    pub async fn read(&mut self) -> anyhow::Result<Vec<(String, Usage)>> {
        let mut usage = Vec::with_capacity(self.nodes.len());
        for (addr, conn) in &mut self.nodes {
            usage.push((addr.clone(), Usage::read(conn).await?));
        }
        Ok(usage)
    }
}

impl Usage {
    async fn read(conn: &mut MultiplexedConnection) -> anyhow::Result<Self> {
        let info: String = redis::cmd("INFO").query_async(conn).await?;
        let value = |name: &str| {
            info.lines()
                .find_map(|line| line.strip_prefix(name)?.strip_prefix(':'))
                .map(str::trim)
                .with_context(|| format!("INFO has no {name}"))
        };
        Ok(Self {
            commands: value("total_commands_processed")?.parse()?,
            cpu_seconds: value("used_cpu_sys")?.parse::<f64>()?
                + value("used_cpu_user")?.parse::<f64>()?,
        })
    }
}

/// The commands and CPU microseconds each master spent between two readings (the `INFO`
/// of the first reading is counted in the second, and taken off).
pub fn spent(before: &[(String, Usage)], after: &[(String, Usage)]) -> Vec<(String, u64, f64)> {
    before
        .iter()
        .zip(after)
        .map(|((addr, b), (_, a))| {
            (
                addr.clone(),
                a.commands.saturating_sub(b.commands + 1),
                (a.cpu_seconds - b.cpu_seconds).max(0.0) * 1e6,
            )
        })
        .collect()
}

/// `seed` with its `host:port` replaced by `addr`, keeping the scheme and credentials.
fn with_address(seed: &str, addr: &str) -> String {
    let (scheme, rest) = seed.split_once("://").unwrap_or(("redis", seed));
    let credentials = rest
        .rsplit_once('@')
        .map(|(c, _)| format!("{c}@"))
        .unwrap_or_default();
    format!("{scheme}://{credentials}{addr}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn master_urls_keep_the_seed_credentials() {
        assert_eq!(
            with_address("redis://127.0.0.1:7001", "127.0.0.1:7003"),
            "redis://127.0.0.1:7003"
        );
        assert_eq!(
            with_address("rediss://u:p@h:1/0", "10.0.0.2:7002"),
            "rediss://u:p@10.0.0.2:7002"
        );
    }
}
