//! Redisson's reentrant lock (`RLock`), async-native.
//!
//! The lock is a hash `owner -> hold count` with a lease. While it is held with no explicit
//! lease, a watchdog task renews the lease every lease/3. Waiters sleep until an unlock
//! message or the lock's remaining TTL, whichever comes first.
//!
//! Where this departs from Redisson, and why:
//! - The owner is a process UUID plus a per-task number handed in by the caller, never a
//!   thread id: async tasks hop threads, and two tasks share one (redisson#6878).
//! - The watchdog belongs to the handle that took the lock and is stopped *before* the
//!   unlock script runs, and by `abandon` and `Drop`: no renewal outlives its lock
//!   (redisson#7272). A renewal that finds the lock gone raises a flag the holder can
//!   read ([`WatchdogLock::is_lost`]) and is counted, instead of stopping silently
//!   (redisson#5697, #5698, #3194).
//! - One pattern subscription per instance serves every lock, so waiters cost no
//!   connections and no subscribe/unsubscribe round trips (redisson#1763, #3349). An
//!   unlock message wakes one waiter of this instance, not all of them; a waiter also
//!   tries again at the lock's remaining TTL, so a lost message cannot strand it.
//! - A holder hands the lock straight to a waiter of its own instance when one is asleep
//!   (a few times in a row, then it releases for everybody): one script instead of a
//!   release, a message and a try ([`super::waiters`]).
//! - The fair lock (`RedissonFairLock`) keeps Redisson's queue in Redis — a list in arrival
//!   order and a timeout per waiter, so a dead waiter drops out — but its release names the
//!   queue's head in the message, so only that waiter wakes, wherever it is.
//! - Taking and giving back can carry more work on the same slot: [`WatchdogLock::try_lock_with`]
//!   and [`WatchdogLock::unlock_with`] run the caller's script in their place (the
//!   variants enter and commit their critical section in the same round trips).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use redis::{AsyncCommands, Value};
use tokio::task::JoinHandle;
use tokio::time::Instant;

use super::LockError;
use super::waiters::{Shared, Woke};
use crate::scripts;

pub use super::waiters::{DEFAULT_HAND_OFFS, WatchdogCounters, WatchdogLocks};

/// Redisson's `lockWatchdogTimeout`: the lease used, and renewed, when none is asked for.
pub const DEFAULT_LEASE: Duration = Duration::from_secs(30);

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

/// What a release script is asked to do, for [`WatchdogLock::unlock_with`].
#[derive(Debug, Clone)]
pub struct Release {
    pub owner: String,
    /// Re-applied while holds remain.
    pub lease: Duration,
    /// A fair lock: the release names the queue's head.
    pub fair: bool,
    /// A waiter of this instance to hand the lock to, if the lock is given up.
    pub successor: Option<Successor>,
}

/// The waiter a release may hand the lock to.
#[derive(Debug, Clone)]
pub struct Successor {
    pub owner: String,
    /// The lease it asked for.
    pub lease: Duration,
    /// How long it expects to hold the lock.
    pub hold: Duration,
}

/// What a release script did with the lock.
#[derive(Debug)]
pub enum Released {
    /// The owner did not hold it (it expired, or was taken away).
    NotHeld,
    /// Holds remain.
    StillHeld,
    /// Deleted, and the waiters told.
    Released,
    /// Given to the successor; what the script returned for it.
    HandedOn(Value),
}

impl Released {
    /// From the code `lib/lock.lua`'s `release` returns (nil, 0, 1, 2).
    pub fn from_code(code: Option<i64>, for_successor: Value) -> Self {
        match code {
            None => Self::NotHeld,
            Some(0) => Self::StillHeld,
            Some(2) => Self::HandedOn(for_successor),
            Some(_) => Self::Released,
        }
    }
}

/// One owner's handle on one reentrant lock.
///
/// Release is async and cannot run in `Drop`: a handle dropped while holding stops its
/// watchdog and logs a warning, and the lock expires one lease later.
pub struct WatchdogLock {
    shared: Arc<Shared>,
    key: String,
    channel: String,
    /// A fair lock's queue and waiters' deadlines; `None` for the unfair lock.
    fair: Option<(String, String)>,
    owner: String,
    /// How long this owner expects to hold the lock, told to a holder that hands it over.
    hold: Duration,
    /// Whether its release may hand the lock to a waiter of this instance.
    hands_off: bool,
    /// Holds taken through this handle and not yet given back.
    holds: u32,
    watchdog: Option<JoinHandle<()>>,
    lost: Arc<AtomicBool>,
}

impl WatchdogLocks {
    /// A handle on the lock at `key` for `owner`. Handles with the same owner re-enter
    /// each other's holds; give each task its own owner id.
    pub fn lock(&self, key: &str, channel: &str, owner: &str) -> WatchdogLock {
        WatchdogLock {
            shared: self.shared.clone(),
            key: key.to_owned(),
            channel: channel.to_owned(),
            fair: None,
            owner: owner.to_owned(),
            hold: Duration::ZERO,
            hands_off: true,
            holds: 0,
            watchdog: None,
            lost: Arc::new(AtomicBool::new(false)),
        }
    }
}

impl WatchdogLock {
    /// Makes this handle take the lock fairly: in the order waiters first tried, across
    /// instances, through the queue at `queue` and the waiters' deadlines at `waiting`
    /// (both on the lock's slot).
    pub fn fair(mut self, queue: &str, waiting: &str) -> Self {
        self.fair = Some((queue.to_owned(), waiting.to_owned()));
        self
    }

    /// How long this owner expects to hold the lock once it has it: a holder that hands
    /// it the lock counts it as inside its critical section for that long.
    pub fn expecting_to_hold(mut self, hold: Duration) -> Self {
        self.hold = hold;
        self
    }

    /// Whether giving the lock back may hand it to a waiter of this instance (the
    /// default), rather than always releasing it for everybody.
    pub fn handing_off(mut self, hands_off: bool) -> Self {
        self.hands_off = hands_off;
        self
    }

    pub fn is_fair(&self) -> bool {
        self.fair.is_some()
    }

    /// Takes the lock, waiting as long as it takes. The watchdog keeps it until `unlock`.
    pub async fn lock(&mut self) -> Result<(), LockError> {
        self.try_lock_inner(None, None).await.map(|_| ())
    }

    /// Takes the lock, waiting up to `wait`. With a `lease`, the lock expires after it
    /// and no watchdog runs (as in Redisson); without one, the watchdog renews the
    /// default lease until `unlock`. Returns false when `wait` ran out.
    pub async fn try_lock(
        &mut self,
        wait: Duration,
        lease: Option<Duration>,
    ) -> Result<bool, LockError> {
        self.try_lock_inner(Some(wait), lease).await
    }

    async fn try_lock_inner(
        &mut self,
        wait: Option<Duration>,
        lease: Option<Duration>,
    ) -> Result<bool, LockError> {
        let conn = self.shared.conn.clone();
        let (key, channel, owner) = (self.key.clone(), self.channel.clone(), self.owner.clone());
        let fair = self.fair.clone();
        let lease_ms = millis(lease.unwrap_or(self.shared.lease));
        let attempt = move || {
            let mut script = scripts::WATCHDOG_LOCK.key(&key);
            script.key(&channel);
            match &fair {
                Some((queue, waiting)) => script.key(queue).key(waiting),
                None => script.key(&key).key(&key),
            };
            script
                .arg(lease_ms)
                .arg(&owner)
                .arg(if fair.is_some() { "fair" } else { "unfair" })
                .arg(millis(FAIR_PATIENCE));
            let mut conn = conn.clone();
            async move {
                let wait: Option<i64> = script.invoke_async(&mut conn).await?;
                Ok(match wait {
                    None => Attempt::Acquired(Value::Nil),
                    Some(ms) => Attempt::Held(sleep_for(ms)),
                })
            }
        };
        let got = self.try_lock_with(wait, lease, attempt).await?;
        Ok(got.is_some())
    }

    /// Takes the lock as [`try_lock`](Self::try_lock) does, but each try is `attempt`: a
    /// script of the caller's that takes the lock (as `lib/lock.lua` does) and may do more
    /// on the same slot once it has it. Returns what the script returned with the lock —
    /// or, when a holder of this instance handed the lock over, what that holder's release
    /// script returned for this owner — or `None` when `wait` ran out.
    pub async fn try_lock_with<F, Fut>(
        &mut self,
        wait: Option<Duration>,
        lease: Option<Duration>,
        mut attempt: F,
    ) -> Result<Option<Value>, LockError>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<Attempt, LockError>>,
    {
        let deadline = wait.map(|wait| Instant::now() + wait);
        let own_lease = lease.unwrap_or(self.shared.lease);
        // Queued before the first try, so an unlock between a try and the sleep still
        // reaches this waiter; it keeps its place in the queue from try to try. Queueing
        // is local: it costs Redis nothing.
        let waiter = self
            .shared
            .register(&self.channel, &self.owner, own_lease, self.hold);
        loop {
            let nap = match attempt().await {
                Ok(Attempt::Acquired(value)) => {
                    waiter.leave(true);
                    self.acquired(lease);
                    return Ok(Some(value));
                }
                Ok(Attempt::Held(nap)) => nap,
                Err(err) => {
                    waiter.leave(false);
                    return Err(err);
                }
            };
            let left = deadline.map(|d| d.saturating_duration_since(Instant::now()));
            if left == Some(Duration::ZERO) {
                waiter.leave(false);
                self.leave_queue().await?;
                return Ok(None);
            }
            if !waiter.waiter().settle() {
                // Woken while trying: try again at once.
                continue;
            }
            // Sleep until an unlock message or a hand-off, or until the lease runs out
            // (in case the message was lost), or until the wait does; a fair waiter also
            // wakes in time to keep its place in the queue.
            let mut nap = nap;
            if let Some(left) = left {
                nap = nap.min(left);
            }
            if self.fair.is_some() {
                nap = nap.min(FAIR_PATIENCE / 2);
            }
            if let Woke::Granted(value) = waiter.waiter().sleep(nap).await {
                waiter.leave(true);
                self.acquired(lease);
                return Ok(Some(value));
            }
        }
    }

    /// A fair waiter giving up takes itself out of the queue in Redis, so that nobody
    /// waits for its turn.
    async fn leave_queue(&self) -> Result<(), LockError> {
        let Some((queue, waiting)) = &self.fair else {
            return Ok(());
        };
        let _: i64 = scripts::FAIR_LEAVE
            .key(&self.key)
            .key(&self.channel)
            .key(queue)
            .key(waiting)
            .arg(&self.owner)
            .invoke_async(&mut self.shared.conn.clone())
            .await?;
        Ok(())
    }

    fn acquired(&mut self, lease: Option<Duration>) {
        self.holds += 1;
        if self.holds == 1 && lease.is_none() {
            self.lost.store(false, Ordering::Release);
            self.watchdog = Some(tokio::spawn(watchdog(
                self.shared.clone(),
                self.key.clone(),
                self.owner.clone(),
                self.lost.clone(),
            )));
        }
    }

    /// Gives back one hold. On the last one the watchdog stops first, then the lock goes to
    /// a waiter of this instance, or is deleted and the waiters told. Returns false when
    /// this owner no longer held the lock (it expired or was taken away).
    pub async fn unlock(&mut self) -> Result<bool, LockError> {
        let (key, channel) = (self.key.clone(), self.channel.clone());
        let fair = self.fair.clone();
        let mut conn = self.shared.conn.clone();
        self.unlock_with(move |release| async move {
            let mut script = scripts::WATCHDOG_UNLOCK.key(&key);
            script.key(&channel);
            match &fair {
                Some((queue, waiting)) => script.key(queue).key(waiting),
                None => script.key(&key).key(&key),
            };
            let successor = release.successor.as_ref();
            script
                .arg(millis(release.lease))
                .arg(&release.owner)
                .arg(if release.fair { "fair" } else { "unfair" })
                .arg(successor.map_or("", |s| s.owner.as_str()))
                .arg(successor.map_or(0, |s| millis(s.lease)));
            let code: Option<i64> = script.invoke_async(&mut conn).await?;
            let released = Released::from_code(code, Value::Nil);
            let held = !matches!(released, Released::NotHeld);
            Ok((held, released))
        })
        .await
    }

    /// Gives back one hold as [`unlock`](Self::unlock) does, but through `release`: a
    /// script of the caller's that gives the lock back (as `lib/lock.lua` does) and may do
    /// more on the same slot, and hands the lock to the [`Release::successor`] when one is
    /// named. Returns what `release` made of its answer. Nothing happens (and `release` is
    /// not called) when this handle holds nothing.
    pub async fn unlock_with<T, F, Fut>(&mut self, release: F) -> Result<T, LockError>
    where
        T: Default,
        F: FnOnce(Release) -> Fut,
        Fut: Future<Output = Result<(T, Released), LockError>>,
    {
        if self.holds == 0 {
            return Ok(T::default());
        }
        self.holds -= 1;
        let last = self.holds == 0;
        if last {
            self.stop_watchdog();
        }
        // The fair lock's next holder is the queue's head, not whoever waits here.
        let reservation = if last && self.hands_off && self.fair.is_none() {
            self.shared.reserve_successor(&self.channel)
        } else {
            None
        };
        let asked = Release {
            owner: self.owner.clone(),
            lease: self.shared.lease,
            fair: self.fair.is_some(),
            successor: reservation.as_ref().map(|r| Successor {
                owner: r.owner().to_owned(),
                lease: r.lease(),
                hold: r.hold(),
            }),
        };
        let answer = release(asked).await;
        let (outcome, released) = match answer {
            Ok(answer) => answer,
            Err(err) => {
                if let Some(reservation) = reservation {
                    reservation.pass();
                }
                return Err(err);
            }
        };
        match released {
            Released::HandedOn(value) => match reservation {
                Some(reservation) => reservation.grant(value),
                None => tracing::warn!(key = %self.key, "a release handed the lock to nobody"),
            },
            other => {
                if let Some(reservation) = reservation {
                    reservation.pass();
                }
                if matches!(other, Released::NotHeld) {
                    self.holds = 0;
                    self.stop_watchdog();
                }
            }
        }
        Ok(outcome)
    }

    /// Stops as if the process died: no unlock, no more renewals. The lock expires one
    /// lease later.
    pub fn abandon(&mut self) {
        self.stop_watchdog();
        self.holds = 0;
    }

    /// Deletes the lock whoever holds it, and wakes its waiters.
    pub async fn force_unlock(&mut self) -> Result<bool, LockError> {
        self.stop_watchdog();
        self.holds = 0;
        let (queue, waiting) = self
            .fair
            .clone()
            .unwrap_or_else(|| (self.key.clone(), self.key.clone()));
        let deleted: i64 = scripts::FORCE_UNLOCK
            .key(&self.key)
            .key(&self.channel)
            .key(&queue)
            .key(&waiting)
            .invoke_async(&mut self.shared.conn.clone())
            .await?;
        Ok(deleted == 1)
    }

    /// Held by anyone.
    pub async fn is_locked(&self) -> Result<bool, LockError> {
        Ok(self.shared.conn.clone().exists(&self.key).await?)
    }

    /// Held by this owner.
    pub async fn is_held(&self) -> Result<bool, LockError> {
        Ok(self
            .shared
            .conn
            .clone()
            .hexists(&self.key, &self.owner)
            .await?)
    }

    /// This owner's holds, as Redis counts them.
    pub async fn hold_count(&self) -> Result<u32, LockError> {
        let holds: Option<u32> = self
            .shared
            .conn
            .clone()
            .hget(&self.key, &self.owner)
            .await?;
        Ok(holds.unwrap_or(0))
    }

    /// Time left before the lock expires; `None` when nobody holds it.
    pub async fn remaining_ttl(&self) -> Result<Option<Duration>, LockError> {
        let ttl: i64 = self.shared.conn.clone().pttl(&self.key).await?;
        Ok(u64::try_from(ttl).ok().map(Duration::from_millis))
    }

    /// True once a watchdog tick found the lock no longer ours: whatever the holder was
    /// doing is no longer protected, and it should not commit.
    pub fn is_lost(&self) -> bool {
        self.lost.load(Ordering::Acquire)
    }

    /// Whether a watchdog is renewing this handle's lock right now.
    pub fn is_renewing(&self) -> bool {
        self.watchdog.as_ref().is_some_and(|w| !w.is_finished())
    }

    pub fn owner(&self) -> &str {
        &self.owner
    }

    fn stop_watchdog(&mut self) {
        if let Some(watchdog) = self.watchdog.take() {
            watchdog.abort();
        }
    }
}

/// How long to sleep after a try that found the lock held, from what the script said: the
/// holder's TTL, or -1 for a setnx or token holder, whose release publishes nothing (look
/// again every so often).
pub fn sleep_for(ms: i64) -> Duration {
    match ms {
        -1 => UNKNOWN_TTL_POLL,
        ms => Duration::from_millis(u64::try_from(ms).unwrap_or(0).max(1)),
    }
}

impl Drop for WatchdogLock {
    fn drop(&mut self) {
        if self.holds > 0 {
            tracing::warn!(
                key = %self.key,
                owner = %self.owner,
                "watchdog lock dropped while held: it expires one lease from now"
            );
        }
        self.stop_watchdog();
    }
}

/// Renews the lease every lease/3 until aborted, or until the lock is found gone.
async fn watchdog(shared: Arc<Shared>, key: String, owner: String, lost: Arc<AtomicBool>) {
    let lease = shared.lease;
    let mut conn = shared.conn.clone();
    loop {
        tokio::time::sleep(lease / 3).await;
        let renewed: Result<i64, _> = scripts::WATCHDOG_RENEW
            .key(&key)
            .arg(millis(lease))
            .arg(&owner)
            .invoke_async(&mut conn)
            .await;
        match renewed {
            Ok(1) => {
                shared.counters.renewals.inc();
            }
            Ok(_) => {
                lost.store(true, Ordering::Release);
                shared.counters.lost.inc();
                tracing::warn!(%key, %owner, "watchdog found the lock gone: the holder lost it");
                return;
            }
            // Redis away for a moment: try again next tick. If it stays away past the
            // lease, the next tick that reaches Redis finds the lock gone and says so.
            Err(err) => tracing::warn!(%key, error = %err, "lease renewal failed"),
        }
    }
}

fn millis(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis())
        .unwrap_or(u64::MAX)
        .max(1)
}
