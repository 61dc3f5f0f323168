//! What a holder can ask Redis, and itself, about its watchdog lock.

use std::time::Duration;

use redis::AsyncCommands;

use super::WatchdogLock;
use crate::{Connection, LockError};

impl<C: Connection> WatchdogLock<C> {
    /// Held by anyone.
    pub async fn is_locked(&self) -> Result<bool, LockError> {
        Ok(self.shared.conn.clone().exists(&self.keys.lock).await?)
    }

    /// Held by this holder.
    pub async fn is_held(&self) -> Result<bool, LockError> {
        let mut conn = self.shared.conn.clone();
        Ok(conn.hexists(&self.keys.lock, &self.holder).await?)
    }

    /// This holder's holds, as Redis counts them.
    pub async fn hold_count(&self) -> Result<u32, LockError> {
        let mut conn = self.shared.conn.clone();
        let holds: Option<u32> = conn.hget(&self.keys.lock, &self.holder).await?;
        Ok(holds.unwrap_or(0))
    }

    /// Time left before the lock expires; `None` when nobody holds it.
    pub async fn remaining_ttl(&self) -> Result<Option<Duration>, LockError> {
        let ttl: i64 = self.shared.conn.clone().pttl(&self.keys.lock).await?;
        Ok(u64::try_from(ttl).ok().map(Duration::from_millis))
    }

    /// Whether a watchdog is renewing this handle's lock right now.
    pub fn is_renewing(&self) -> bool {
        self.watchdog.as_ref().is_some_and(|w| !w.is_finished())
    }
}
