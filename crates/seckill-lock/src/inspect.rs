//! What an operator sees of a lock, whichever kind holds it, and the way to free it.

use std::time::Duration;

use crate::keys::LockKeys;
use crate::{Connection, LockError, scripts};

/// A lock as Redis has it now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LockState {
    /// Whether anyone holds it.
    pub held: bool,
    /// Time left before it expires; `None` when it is free or never expires.
    pub ttl: Option<Duration>,
    /// Held with no TTL at all: only a `DEL` frees it (the setnx deadlock).
    pub never_expires: bool,
    /// The holder's id: a string lock's value, or a watchdog lock's (first) hash field.
    pub holder: Option<String>,
}

/// The lock at `key`, whatever kind holds it: a string (setnx, token, Redlock) or a
/// watchdog hash.
pub async fn inspect<C: Connection>(conn: &mut C, key: &str) -> Result<LockState, LockError> {
    let (pttl, holder): (i64, Option<String>) =
        scripts::LOCK_STATE.key(key).invoke_async(conn).await?;
    // PTTL: -2 no key, -1 no expiry, otherwise milliseconds left.
    Ok(LockState {
        held: pttl != -2,
        ttl: u64::try_from(pttl).ok().map(Duration::from_millis),
        never_expires: pttl == -1,
        holder,
    })
}

/// Deletes the lock at `keys` whoever holds it, of whatever kind, and tells its waiters
/// (a fair lock's head by name): the operator's way out of the setnx deadlock. True when a
/// lock was held.
pub async fn force_release<C: Connection>(
    conn: &mut C,
    keys: &LockKeys,
) -> Result<bool, LockError> {
    let deleted: i64 = scripts::FORCE_UNLOCK
        .key(&keys.lock)
        .key(&keys.channel)
        .key(&keys.queue)
        .key(&keys.waiting)
        .invoke_async(conn)
        .await?;
    Ok(deleted == 1)
}
