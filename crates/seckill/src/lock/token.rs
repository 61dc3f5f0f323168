//! A lock with a TTL and an owner token.

use std::time::Duration;

use redis::{AsyncCommands, SetExpiry, SetOptions};
use tokio::time::Instant;
use uuid::Uuid;

use super::{LockError, retry_delay};
use crate::scripts;
use crate::store::RedisConn;

/// `SET lock <uuid> NX PX ttl`, released by an atomic compare-and-delete script.
///
/// Correct while the work fits in the TTL. When it does not, the lock expires under its
/// holder and a second holder gets in; the first one's release then finds a token that is
/// not its own and leaves it alone (that much the token buys).
pub struct TokenLock {
    conn: RedisConn,
    key: String,
    token: String,
    ttl: Duration,
}

impl TokenLock {
    pub fn new(conn: RedisConn, key: &str, ttl: Duration) -> Self {
        Self::with_token(conn, key, ttl, &Uuid::new_v4().to_string())
    }

    /// With the caller's own unique token (the service uses the request's holder id, which
    /// names its instance).
    pub fn with_token(conn: RedisConn, key: &str, ttl: Duration, token: &str) -> Self {
        Self {
            conn,
            key: key.to_owned(),
            token: token.to_owned(),
            ttl,
        }
    }

    /// The value this holder writes into the lock.
    pub fn token(&self) -> &str {
        &self.token
    }

    /// Takes the lock, trying again every few milliseconds for up to `wait`.
    /// Returns false when it was still held when `wait` ran out.
    pub async fn try_lock(&mut self, wait: Duration) -> Result<bool, LockError> {
        let deadline = Instant::now() + wait;
        let ttl_ms = u64::try_from(self.ttl.as_millis())
            .unwrap_or(u64::MAX)
            .max(1);
        loop {
            let options = SetOptions::default()
                .conditional_set(redis::ExistenceCheck::NX)
                .with_expiration(SetExpiry::PX(ttl_ms));
            let set: Option<String> = self
                .conn
                .set_options(&self.key, &self.token, options)
                .await?;
            if set.is_some() {
                return Ok(true);
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Ok(false);
            }
            tokio::time::sleep(retry_delay(left)).await;
        }
    }

    /// Releases the lock if it is still ours, in one atomic step.
    /// Returns false when it had expired (and maybe passed to someone else) before.
    pub async fn unlock(&mut self) -> Result<bool, LockError> {
        let released: i64 = scripts::TOKEN_RELEASE
            .key(&self.key)
            .arg(&self.token)
            .invoke_async(&mut self.conn)
            .await?;
        Ok(released == 1)
    }

    /// The seed's flawed release: `GET`, compare in the application, pause, then `DEL`.
    /// If the lock expires during the pause and another holder takes it, this deletes the
    /// other holder's lock. Only fault injection uses it, to show why release must be atomic.
    pub async fn unlock_check_then_delete(&mut self, pause: Duration) -> Result<bool, LockError> {
        let current: Option<String> = match self.conn.get(&self.key).await {
            Ok(current) => current,
            // A watchdog holder's hash: somebody else's lock.
            Err(err) if err.code() == Some("WRONGTYPE") => return Ok(false),
            Err(err) => return Err(err.into()),
        };
        if current.as_deref() != Some(self.token.as_str()) {
            return Ok(false);
        }
        tokio::time::sleep(pause).await;
        let _: u64 = self.conn.del(&self.key).await?;
        Ok(true)
    }
}
