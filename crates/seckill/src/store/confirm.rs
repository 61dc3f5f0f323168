//! `WAIT` for replicas: how many must have a write before it is trusted, and how long
//! they may take to say so.

use std::time::Duration;

use redis::RedisError;

use super::RedisConn;

/// `--redis-wait-replicas` (a sale) or `--lock-wait-replicas` (a lock): how many replicas
/// must have a write before it is trusted, and how long `WAIT` may take.
#[derive(Debug, Clone, Copy)]
pub struct ReplicaConfirm {
    pub replicas: u32,
    pub timeout: Duration,
}

impl ReplicaConfirm {
    /// `replicas` replicas, within `timeout`; `None` for none (no `WAIT` at all).
    pub fn of(replicas: u32, timeout: Duration) -> Option<Self> {
        (replicas > 0).then_some(Self { replicas, timeout })
    }

    /// Whether enough replicas have everything `conn` wrote to the master of `key`'s slot
    /// (`WAIT` on that connection). Says so in the log when they do not.
    pub async fn confirmed(&self, conn: &mut RedisConn, key: &str) -> Result<bool, RedisError> {
        let acked = conn.wait_replicas(key, self.replicas, self.timeout).await?;
        if acked < self.replicas {
            tracing::warn!(%key, acked, wanted = self.replicas, "not confirmed by enough replicas in time");
        }
        Ok(acked >= self.replicas)
    }
}
