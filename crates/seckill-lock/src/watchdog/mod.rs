//! Redisson's reentrant lock (`RLock`), async-native.
//!
//! The lock is a hash `holder -> hold count` with a lease. While it is held with no explicit
//! lease, a watchdog task renews the lease every lease/3. Waiters sleep until a release
//! message or the lock's remaining TTL, whichever comes first.
//!
//! Where this departs from Redisson, and why:
//! - The holder is a process UUID plus a number per handle, made by the crate, never a
//!   thread id: async tasks hop threads, and two tasks share one (redisson#6878).
//! - The watchdog belongs to the handle that took the lock and is stopped *before* the
//!   release script runs, and by `abandon` and `Drop`: no renewal outlives its lock
//!   (redisson#7272). A renewal that finds the lock gone raises a flag the holder can
//!   read ([`Lock::is_lost`](crate::Lock::is_lost)) and is counted, instead of stopping
//!   silently (redisson#5697, #5698, #3194).
//! - One pattern subscription per instance serves every lock, so waiters cost no
//!   connections and no subscribe/unsubscribe round trips (redisson#1763, #3349). A
//!   release message wakes one waiter of this instance, not all of them; a waiter also
//!   tries again at the lock's remaining TTL, so a lost message cannot strand it.
//! - A holder hands the lock straight to a waiter of its own instance when one is asleep
//!   (a few times in a row, then it releases for everybody): one script instead of a
//!   release, a message and a try (`waiters`).
//! - The fair lock (`RedissonFairLock`) keeps Redisson's queue in Redis — a list in arrival
//!   order and a timeout per waiter, so a dead waiter drops out — but its release names the
//!   queue's head in the message, so only that waiter wakes, wherever it is.
//! - Taking and giving back can carry more work on the same slot:
//!   `WatchdogLock::acquire_with` and `WatchdogLock::release_with` (the `scripting` feature) run the caller's
//!   script in their place (the service enters and commits its critical section in the
//!   same round trips).

mod builder;
mod counters;
mod grant;
mod hold;
mod lease;
mod release;
mod renewal;
mod subscription;
mod take;
mod waiters;

pub use crate::keys::{LockKeys, Namespace};
pub use builder::WatchdogLocksBuilder;
pub use counters::WatchdogCounters;
pub use lease::Lease;
#[cfg(feature = "scripting")]
pub use release::{ReleaseArgs, Released, Successor};
pub use subscription::Subscriber;
pub use take::FAIR_PATIENCE;
#[cfg(feature = "scripting")]
pub use take::{Attempt, sleep_for};
pub use waiters::{DEFAULT_HANDOFFS, WatchdogLocks};

use std::sync::Arc;
use std::time::Duration;

use redis::AsyncCommands;
#[cfg(feature = "scripting")]
use redis::Value;
use tokio::task::JoinHandle;

use self::waiters::Shared;
use crate::{Connection, LockError};

#[cfg(doc)]
use crate::HolderId;

/// Redisson's `lockWatchdogTimeout`: the lease used, and renewed, when none is asked for.
pub const DEFAULT_LEASE: Duration = Duration::from_secs(30);

/// One holder's handle on one reentrant lock.
///
/// Release is async and cannot run in `Drop`: a handle dropped while holding stops its
/// watchdog and logs a warning, and the lock expires one lease later.
pub struct WatchdogLock<C> {
    shared: Arc<Shared<C>>,
    keys: LockKeys,
    fair: bool,
    holder: String,
    /// An explicit lease: the lock expires after it, and no watchdog renews it.
    lease: Option<Duration>,
    /// How long this holder expects to hold the lock, told to a holder that hands it over.
    hold: Duration,
    /// Whether its release may hand the lock to a waiter of this instance.
    handoff: bool,
    /// Whether each take issues a fencing token (`fenced_lock.lua`).
    fenced: bool,
    /// The token the last take issued.
    token: Option<i64>,
    /// Whether a watchdog renews an explicit lease too.
    renew: bool,
    /// Replicas that must have the grant before an acquire returns it, and how long to
    /// wait for them ([`confirmed_by_replicas`](WatchdogLock::confirmed_by_replicas)).
    confirm: Option<(u32, Duration)>,
    /// Holds taken through this handle and not yet given back.
    holds: u32,
    watchdog: Option<JoinHandle<()>>,
    watch: Arc<crate::watch::Watch>,
}

impl<C: Connection> WatchdogLocks<C> {
    /// What this instance's watchdogs and waiters did, counted since it started.
    pub fn counters(&self) -> Arc<WatchdogCounters> {
        self.shared.counters.clone()
    }

    /// The lease used when a caller asks for none.
    pub fn default_lease(&self) -> Duration {
        self.shared.lease
    }
}

impl<C: Connection> WatchdogLock<C> {
    /// A handle on the lock named `name` for `holder` ([`WatchdogLocks::lock`]).
    fn new(shared: Arc<Shared<C>>, name: &str, holder: &crate::HolderId) -> Self {
        WatchdogLock {
            keys: shared.namespace.keys(name),
            shared,
            fair: false,
            holder: holder.to_string(),
            lease: None,
            hold: Duration::ZERO,
            handoff: true,
            fenced: false,
            token: None,
            renew: false,
            confirm: None,
            holds: 0,
            watchdog: None,
            watch: Arc::default(),
        }
    }

    /// Whether it is taken fairly ([`fair`](Self::fair)).
    pub fn is_fair(&self) -> bool {
        self.fair
    }

    /// Where the lock lives.
    pub fn keys(&self) -> &LockKeys {
        &self.keys
    }

    /// The lease the lock is taken with: the explicit one, or the instance's.
    pub fn lease(&self) -> Duration {
        self.lease.unwrap_or(self.shared.lease)
    }

    /// Deletes the lock whoever holds it, and wakes its waiters.
    pub async fn force_release(&mut self) -> Result<bool, LockError> {
        self.stop_watchdog();
        self.holds = 0;
        let mut conn = self.shared.conn.clone();
        crate::inspect::force_release(&mut conn, &self.keys).await
    }
}

// How the lock is taken: the options of a handle, set before its first take.
impl<C: Connection> WatchdogLock<C> {
    /// Takes the lock fairly (`fair`): in the order waiters first tried, across instances,
    /// through the queue in Redis.
    pub fn fair(mut self, fair: bool) -> Self {
        self.fair = fair;
        self
    }

    /// How the lease is kept ([`Lease`]; default [`Lease::Watched`]: the instance's lease,
    /// renewed by a watchdog until release).
    pub fn with_lease(mut self, lease: Lease) -> Self {
        (self.lease, self.renew) = match lease {
            Lease::Watched => (None, false),
            Lease::Fixed(lease) => (Some(lease), false),
            Lease::Renewed(lease) => (Some(lease), true),
        };
        self
    }

    /// How long this holder expects to hold the lock once it has it: a holder that hands
    /// it the lock counts it as inside its critical section for that long.
    pub fn expecting_to_hold(mut self, hold: Duration) -> Self {
        self.hold = hold;
        self
    }

    /// A fenced lock (`fenced`), as Redisson's `RFencedLock`: every take also issues a
    /// fencing token, from a counter of the lock's own that the take script increments in
    /// the same step and that never expires — so tokens grow for as long as the lock's name
    /// is used, across expiries and holders ([`Lock::fencing_token`](crate::Lock::fencing_token)). Present it where the
    /// work lands, and have that side refuse a token lower than the highest it has seen: a
    /// holder paused past its lease then cannot write after the next holder did.
    pub fn fenced(mut self, fenced: bool) -> Self {
        self.fenced = fenced;
        self
    }

    /// Whether giving the lock back may hand it to a waiter of this instance (the
    /// default), rather than always releasing it for everybody.
    pub fn handing_off(mut self, handoff: bool) -> Self {
        self.handoff = handoff;
        self
    }

    /// Off by default. With it, an acquire returns the lock only once `replicas` replicas
    /// have its grant (and a fenced lock's token), as Redis's `WAIT` reports within
    /// `timeout`; fewer, and the lock is given back and the acquire fails
    /// ([`LockError::NotConfirmed`]). Redis replicates
    /// asynchronously: without it, a master that fails over right after a grant can leave
    /// a replica that never saw it to grant the lock again — and hand out a fencing token
    /// already issued. (Redisson's `checkLockSyncedSlaves`.) `WAIT` holds up the commands
    /// behind it on the connection it is sent on: give locks that use it a connection of
    /// their own, whose response timeout is longer than `timeout` (or the connection gives
    /// up first: the acquire then fails as unavailable, and the lock is given back all the
    /// same).
    pub fn confirmed_by_replicas(mut self, replicas: u32, timeout: Duration) -> Self {
        self.confirm = (replicas > 0).then_some((replicas, timeout));
        self
    }
}

// What a holder can ask Redis, and itself, about its lock.
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

// The take and release fused with a script of the caller's on the lock's slot (the
// `scripting` feature): the caller's try takes the lock as `lib/lock.lua`'s `take` does and
// may do more in the same step; its release gives it back as `release` does. No stability
// promise: the scripts' arguments follow the lock's Lua.
#[cfg(feature = "scripting")]
impl<C: Connection> WatchdogLock<C> {
    /// Takes the lock as [`Lock::take`](crate::Lock::take) does, but each try is `attempt`: a script of the
    /// caller's that takes the lock (as `lib/lock.lua`'s `take` does) and may do more on the
    /// same slot once it has it. Returns what the script returned with the lock — or, when
    /// a holder of this instance handed the lock over, what that holder's release script
    /// returned for this holder — or `None` when `wait` ran out.
    ///
    /// # Cancel safety
    ///
    /// Not cancel safe: dropped between a try that took the lock and its answer, the lock
    /// stays held until its lease runs out (what the caller's script did is the caller's
    /// to undo). Use [`Lock::acquire`](crate::Lock::acquire) where cancellation can happen.
    pub async fn acquire_with<F, Fut>(
        &mut self,
        wait: Duration,
        attempt: F,
    ) -> Result<Option<Value>, LockError>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<Attempt, LockError>>,
    {
        self.take_with(wait, attempt).await
    }

    /// Gives back one hold as [`Lock::give_back`](crate::Lock::give_back) does, but through
    /// `release`: a script of the caller's that gives the lock back (as `lib/lock.lua`'s
    /// `release` does) and may do more on the same slot, and hands the lock to the
    /// [`ReleaseArgs::successor`] when one is named. Returns what `release` made of its
    /// answer. Nothing happens (and `release` is not called) when this handle holds nothing.
    ///
    /// # Cancel safety
    ///
    /// Dropped once polled, the hold is given up all the same (the watchdog has stopped):
    /// the lock is released, or handed over, if the script reached Redis, and otherwise
    /// expires one lease later. A waiter reserved for the hand-off is told to try again,
    /// and finds the lock its own if the script handed it over.
    pub async fn release_with<T, F, Fut>(&mut self, release: F) -> Result<T, LockError>
    where
        T: Default,
        F: FnOnce(ReleaseArgs) -> Fut,
        Fut: Future<Output = Result<(T, Released), LockError>>,
    {
        self.give_back_with(release).await
    }
}

impl<C> Drop for WatchdogLock<C> {
    fn drop(&mut self) {
        if self.holds > 0 {
            tracing::warn!(
                key = %self.keys.lock,
                holder = %self.holder,
                "watchdog lock dropped while held: it expires one lease from now"
            );
        }
        if let Some(watchdog) = self.watchdog.take() {
            watchdog.abort();
        }
    }
}
