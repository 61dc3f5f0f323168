//! One try at a watchdog lock: what a try answers ([`Attempt`]), the crate's own take script
//! that makes one ([`TakeScript`]), how long a waiter sleeps after a try that found the lock
//! held ([`nap_for`]), and a fair waiter's place in the queue in Redis: kept by its tries
//! ([`FAIR_PATIENCE`]), given up when it stops waiting ([`leave_fair_queue`]).
//!
//! With the `scripting` feature a caller's own script makes the tries instead
//! (`WatchdogLock::acquire_with`): it takes the lock as `lib/lock.lua`'s `take` does, may do
//! more on the same slot in the same step, and answers with an [`Attempt`]. No stability
//! promise: the scripts' arguments follow the lock's Lua.

use std::time::Duration;

use redis::Value;

use crate::keys::LockKeys;
use crate::{Connection, LockError, millis, scripts};

/// How long a fair lock's waiter stays in the queue after each try (Redisson's
/// `threadWaitTime`, 5 s): a waiter that died drops out of the queue this long after its
/// last try. Waiters try again at half of it, so a live one never does.
pub const FAIR_PATIENCE: Duration = Duration::from_secs(5);

/// How often a waiter looks again at a lock whose holder's release sends no message (a
/// setnx or token holder on the same key).
const UNKNOWN_TTL_POLL: Duration = Duration::from_millis(100);

/// One try at a lock, as the script that tried answered.
#[derive(Debug)]
pub enum Attempt {
    /// The lock is the caller's now; what else the script returned.
    Acquired(Value),
    /// Held by another: how long to sleep before trying again (a message may come first).
    Held(Duration),
}

/// The crate's own take script, for one take by one holder: `watchdog_lock.lua`, or
/// `fenced_lock.lua` for a fenced lock (it issues a fencing token in the same step). Each
/// [`attempt`](Self::attempt) is one try.
pub(super) struct TakeScript<C> {
    pub(super) conn: C,
    pub(super) keys: LockKeys,
    pub(super) holder: String,
    pub(super) fair: bool,
    pub(super) fenced: bool,
    /// The lease the lock is taken with.
    pub(super) lease: Duration,
    /// Whether the handle holds nothing yet (a first take, not a re-entry).
    pub(super) first: bool,
}

impl<C: Connection> TakeScript<C> {
    /// One try: the lock taken (with a fenced lock's token, as an integer), or how long to
    /// sleep before the next.
    pub(super) async fn attempt(&self) -> Result<Attempt, LockError> {
        let mut script = if self.fenced {
            scripts::FENCED_LOCK.prepare_invoke()
        } else {
            scripts::WATCHDOG_LOCK.prepare_invoke()
        };
        for key in self.keys.for_scripts(self.fair) {
            script.key(key);
        }
        if self.fenced {
            script.key(&self.keys.token);
        }
        script
            .arg(millis(self.lease).max(1))
            .arg(&self.holder)
            .arg(if self.fair { "fair" } else { "unfair" })
            .arg(millis(FAIR_PATIENCE))
            .arg(if self.first { "first" } else { "again" });
        let mut conn = self.conn.clone();
        if self.fenced {
            let (code, value): (i64, i64) = script.invoke_async(&mut conn).await?;
            return Ok(match code {
                0 => Attempt::Acquired(Value::Int(value)),
                _ => Attempt::Held(nap_for(value)),
            });
        }
        let wait: Option<i64> = script.invoke_async(&mut conn).await?;
        Ok(match wait {
            None => Attempt::Acquired(Value::Nil),
            Some(ms) => Attempt::Held(nap_for(ms)),
        })
    }
}

/// A fair waiter giving up takes itself out of the queue in Redis, so that nobody waits for
/// its turn.
pub(super) async fn leave_fair_queue<C: Connection>(
    conn: &mut C,
    keys: &LockKeys,
    holder: &str,
) -> Result<(), LockError> {
    let _: i64 = scripts::FAIR_LEAVE
        .key(&keys.lock)
        .key(&keys.channel)
        .key(&keys.queue)
        .key(&keys.waiting)
        .arg(holder)
        .invoke_async(conn)
        .await?;
    Ok(())
}

/// How long to sleep after a try that found the lock held, from what the script said: the
/// holder's TTL, or -1 for a setnx or token holder, whose release publishes nothing (look
/// again every so often).
pub(super) fn nap_for(ms: i64) -> Duration {
    match ms {
        -1 => UNKNOWN_TTL_POLL,
        ms => Duration::from_millis(u64::try_from(ms).unwrap_or(0).max(1)),
    }
}

/// How long to sleep after a try that found the lock held, from what the lock's take
/// returned: the holder's TTL, or -1 for a setnx or token holder, whose release publishes
/// nothing (look again every so often).
#[cfg(feature = "scripting")]
pub fn sleep_for(ms: i64) -> Duration {
    nap_for(ms)
}
