//! The seed's first lock: `SETNX`, with no TTL.

use std::time::Duration;

use redis::AsyncCommands;

use crate::{Connection, HolderId, Lock, LockError, Spin, scripts};

/// `SETNX lock <holder>` with no TTL.
///
/// As flawed as the seed's on purpose: nothing ever expires it, so a holder that dies
/// before releasing leaves it held until someone deletes it by hand. Released by
/// compare-and-delete, or — [`releasing_blindly`](Self::releasing_blindly), the seed's
/// `finally { DEL }` — by a plain `DEL` of whoever holds it.
pub struct SetnxLock<C> {
    conn: C,
    key: String,
    holder: String,
    blind_release: bool,
}

impl<C: Connection> SetnxLock<C> {
    /// The lock at `key`, for `holder` (its id is what the lock holds).
    pub fn new(conn: C, key: &str, holder: &HolderId) -> Self {
        Self {
            conn,
            key: key.to_owned(),
            holder: holder.to_string(),
            blind_release: false,
        }
    }

    /// Releases with a plain `DEL`, whoever holds the lock by then, as the seed's `finally`
    /// does: a holder whose lock was deleted meanwhile deletes the next holder's.
    pub fn releasing_blindly(mut self) -> Self {
        self.blind_release = true;
        self
    }
}

impl<C: Connection> SetnxLock<C> {
    /// Compare-and-delete: whether the lock still held this holder's value.
    async fn release_own(&mut self) -> Result<bool, LockError> {
        let released: i64 = scripts::TOKEN_RELEASE
            .key(&self.key)
            .arg(&self.holder)
            .invoke_async(&mut self.conn)
            .await?;
        Ok(released == 1)
    }
}

impl<C: Connection> Lock for SetnxLock<C> {
    /// One `SETNX`, and more every few milliseconds while `wait` lasts.
    async fn take(&mut self, wait: Duration) -> Result<bool, LockError> {
        let spin = Spin::for_up_to(wait);
        loop {
            let set: bool = self.conn.set_nx(&self.key, &self.holder).await?;
            if set {
                return Ok(true);
            }
            if !spin.pause().await {
                return Ok(false);
            }
        }
    }

    async fn give_back(&mut self) -> Result<bool, LockError> {
        if self.blind_release {
            let deleted: u64 = self.conn.del(&self.key).await?;
            return Ok(deleted == 1);
        }
        self.release_own().await
    }

    /// A take whose answer never came may have set this holder's value: that, and only
    /// that, is deleted — even for a lock that releases blindly, since the seed's
    /// `finally { DEL }` runs only for a holder that got the lock. (A blind `DEL` here would
    /// delete the lock of whoever holds it, with that holder still inside.)
    async fn clean_up(&mut self) -> Result<(), LockError> {
        self.release_own().await?;
        Ok(())
    }

    fn key(&self) -> &str {
        &self.key
    }

    fn holder(&self) -> &str {
        &self.holder
    }
}
