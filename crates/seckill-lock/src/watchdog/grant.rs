//! What a grant needs before an acquire returns it: a fenced lock's token, and the
//! replicas' confirmation when asked for. Whoever took the lock gives it back when either
//! fails.

use std::time::Duration;

use redis::Value;

use crate::keys::LockKeys;
use crate::{Connection, LockError, millis, scripts};

/// A fenced lock's token, for a take that answered `taken`: a take issues it; a hand-off
/// from a holder of this instance does not, and one is issued now — only while `holder`
/// still holds the lock. One it lost before (delayed past its lease: another may hold the
/// lock, with a token of its own) is [`LockError::Lost`], not a token higher than the
/// holder's.
pub(super) async fn token<C: Connection>(
    conn: &mut C,
    keys: &LockKeys,
    holder: &str,
    taken: Value,
) -> Result<i64, LockError> {
    if let Value::Int(token) = taken {
        return Ok(token);
    }
    let token: Option<i64> = scripts::FENCED_TOKEN
        .key(&keys.lock)
        .key(&keys.token)
        .arg(holder)
        .invoke_async(conn)
        .await?;
    token.ok_or(LockError::Lost)
}

/// The grant confirmed by `replicas` replicas within `timeout`, as Redis's `WAIT` reports
/// ([`confirmed_by_replicas`](super::WatchdogLock::confirmed_by_replicas)); fewer is
/// [`LockError::NotConfirmed`].
pub(super) async fn confirm<C: Connection>(
    conn: &mut C,
    replicas: u32,
    timeout: Duration,
) -> Result<(), LockError> {
    let confirmed: i64 = redis::cmd("WAIT")
        .arg(replicas)
        .arg(millis(timeout).max(1))
        .query_async(conn)
        .await?;
    if confirmed >= i64::from(replicas) {
        return Ok(());
    }
    Err(LockError::NotConfirmed {
        wanted: replicas,
        confirmed: u32::try_from(confirmed.max(0)).unwrap_or(0),
    })
}

#[cfg(test)]
mod tests {
    use redis::{AsyncCommands, Value};
    use seckill_testkit::RedisServer;

    use super::token;
    use crate::LockError;
    use crate::keys::Namespace;

    /// A hand-off's token is issued while its new holder holds the lock; once the lock is
    /// gone (the holder delayed past its lease, the key expired), none is, and the counter
    /// does not move: no token higher than the next holder's for a lock not held.
    #[tokio::test]
    async fn a_hand_off_lost_before_its_token_gets_none() {
        let redis = RedisServer::start();
        let mut conn = redis.conn().await;
        let keys = Namespace::new("test").keys("{handed}");
        let _: () = conn.hset(&keys.lock, "new-holder", 1).await.unwrap();
        let issued = token(&mut conn, &keys, "new-holder", Value::Nil).await;
        assert_eq!(issued.unwrap(), 1, "held: the token is issued");
        let _: () = conn.del(&keys.lock).await.unwrap();
        let issued = token(&mut conn, &keys, "new-holder", Value::Nil).await;
        assert!(matches!(issued, Err(LockError::Lost)), "{issued:?}");
        let counter: i64 = conn.get(&keys.token).await.unwrap();
        assert_eq!(counter, 1, "no token issued for a lock not held");
        let taken = token(&mut conn, &keys, "new-holder", Value::Int(7)).await;
        assert_eq!(taken.unwrap(), 7, "a take's own token is kept as it is");
    }
}
