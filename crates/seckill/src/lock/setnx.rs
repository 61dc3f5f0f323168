//! The seed's first lock: `SETNX` and `DEL`.

use redis::AsyncCommands;

use super::LockError;
use crate::store::RedisConn;

/// `SETNX lock <holder>` with no TTL; `DEL lock` in a `finally`.
///
/// Kept exactly as flawed as the seed's: nothing ever expires it, so a holder that dies
/// before `unlock` leaves it held until someone deletes it by hand, and `unlock` deletes
/// the key whoever holds it. The holder id is stored only so that a person can see who
/// holds it; it is never checked.
pub struct SetnxLock {
    conn: RedisConn,
    key: String,
    holder: String,
}

impl SetnxLock {
    pub fn new(conn: RedisConn, key: &str, holder: &str) -> Self {
        Self {
            conn,
            key: key.to_owned(),
            holder: holder.to_owned(),
        }
    }

    /// One `SETNX`: true when the lock was free and is now ours. Never waits.
    pub async fn try_lock(&mut self) -> Result<bool, LockError> {
        Ok(self.conn.set_nx(&self.key, &self.holder).await?)
    }

    /// `DEL` the lock — whoever holds it.
    pub async fn unlock(&mut self) -> Result<(), LockError> {
        let _: u64 = self.conn.del(&self.key).await?;
        Ok(())
    }
}
