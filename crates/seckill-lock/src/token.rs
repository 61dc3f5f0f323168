//! A lock with a TTL and a token.

use std::time::Duration;

use redis::{AsyncCommands, SetExpiry, SetOptions};

use crate::{Connection, Lock, LockError, millis, scripts, spin};

/// `SET lock <token> NX PX ttl`, released by an atomic compare-and-delete script.
///
/// Correct while the work fits in the TTL. When it does not, the lock expires under its
/// holder and a second holder gets in; the first one's release then finds a token that is
/// not its own and leaves it alone (that much the token buys).
pub struct TokenLock<C> {
    conn: C,
    key: String,
    token: String,
    ttl: Duration,
    /// The seed's release: `GET`, compare, pause this long, `DEL`.
    check_then_delete: Option<Duration>,
}

impl<C: Connection> TokenLock<C> {
    /// The lock at `key` with a `ttl`, for `token` (a unique id: the service uses the
    /// request's holder id, which names its instance).
    pub fn new(conn: C, key: &str, ttl: Duration, token: &str) -> Self {
        Self {
            conn,
            key: key.to_owned(),
            token: token.to_owned(),
            ttl,
            check_then_delete: None,
        }
    }

    /// Releases as the seed does: `GET`, compare in the application, `pause`, then `DEL`.
    /// If the lock expires during the pause and another holder takes it, the `DEL` removes
    /// the other holder's lock — why a release must be one atomic step.
    #[cfg(feature = "teaching")]
    pub fn checking_then_deleting(mut self, pause: Duration) -> Self {
        self.check_then_delete = Some(pause);
        self
    }

    /// The seed's release. False when the lock was not this holder's at the `GET`.
    async fn release_check_then_delete(&mut self, pause: Duration) -> Result<bool, LockError> {
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

impl<C: Connection> Lock for TokenLock<C> {
    /// Tries again every few milliseconds while `wait` lasts.
    async fn take(&mut self, wait: Duration) -> Result<bool, LockError> {
        let (conn, key, token) = (&self.conn, &self.key, &self.token);
        let ttl_ms = millis(self.ttl).max(1);
        spin(wait, || {
            let mut conn = conn.clone();
            let options = SetOptions::default()
                .conditional_set(redis::ExistenceCheck::NX)
                .with_expiration(SetExpiry::PX(ttl_ms));
            async move {
                let set: Option<String> = conn.set_options(key, token, options).await?;
                Ok(set.is_some())
            }
        })
        .await
    }

    /// Compare-and-delete in one step, unless the seed's release was asked for.
    async fn give_back(&mut self) -> Result<bool, LockError> {
        if let Some(pause) = self.check_then_delete {
            return self.release_check_then_delete(pause).await;
        }
        let released: i64 = scripts::TOKEN_RELEASE
            .key(&self.key)
            .arg(&self.token)
            .invoke_async(&mut self.conn)
            .await?;
        Ok(released == 1)
    }

    fn key(&self) -> &str {
        &self.key
    }

    fn holder(&self) -> &str {
        &self.token
    }

    fn lease(&self) -> Option<Duration> {
        Some(self.ttl)
    }
}
