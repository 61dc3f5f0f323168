//! What Redis itself spent on a load: commands and CPU time from `INFO`, read on every
//! master of the store (one for a standalone Redis, each master of a Cluster), so that a
//! row can say how the work spread over them.

use std::time::Duration;

use anyhow::Context;
use redis::aio::MultiplexedConnection;
use seckill::config::RedisArgs;
use seckill::store::{RedisMode, Store};

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
    /// The masters behind `redis` (one server, or the initial nodes of a Cluster, which
    /// is asked for its masters, or the sentinels' master), each with a connection of its
    /// own.
    pub async fn connect(redis: &RedisArgs) -> anyhow::Result<Self> {
        let (mode, urls) = (redis.redis_mode, &redis.redis_url);
        let config = redis.store_config(Duration::from_secs(5))?;
        let first = config
            .url_list()
            .first()
            .map(|u| (*u).to_owned())
            .context("--redis-url names no server")?;
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

    /// Whether `key` exists on one of the masters: the instances write there.
    pub async fn holds(&mut self, key: &str) -> bool {
        for (_, conn) in &mut self.nodes {
            let exists: Result<bool, _> = redis::cmd("EXISTS").arg(key).query_async(conn).await;
            if matches!(exists, Ok(true)) {
                return true;
            }
        }
        false
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

/// `node` with its `host:port` replaced by `addr`, keeping the scheme and credentials.
fn with_address(node: &str, addr: &str) -> String {
    let (scheme, rest) = node.split_once("://").unwrap_or(("redis", node));
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
    fn master_urls_keep_the_credentials() {
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
