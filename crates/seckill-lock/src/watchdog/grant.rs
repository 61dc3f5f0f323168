//! What a grant needs before an acquire returns it: a fenced lock's token, and the
//! replicas' confirmation when asked for. Whoever took the lock gives it back when either
//! fails.

use std::time::Duration;

use redis::{AsyncCommands, Value};

use crate::keys::LockKeys;
use crate::{Connection, LockError, millis};

/// A fenced lock's token, for a take that answered `taken`: a take issues it; a hand-off
/// from a holder of this instance does not, and one is issued now.
pub(super) async fn token<C: Connection>(
    conn: &mut C,
    keys: &LockKeys,
    taken: Value,
) -> Result<i64, LockError> {
    match taken {
        Value::Int(token) => Ok(token),
        // Handed over by a holder of this instance, whose release issued no token: one now,
        // the lock held.
        _ => Ok(conn.incr(&keys.token, 1).await?),
    }
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
