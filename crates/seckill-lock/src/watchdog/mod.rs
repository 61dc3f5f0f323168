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
#[cfg(feature = "scripting")]
mod fused;
mod grant;
mod hold;
mod options;
mod release;
mod renewal;
mod state;
mod subscription;
mod take;
mod waiters;

pub use crate::keys::{LockKeys, Namespace};
pub use builder::WatchdogLocksBuilder;
pub use counters::WatchdogCounters;
pub use options::Lease;
#[cfg(feature = "scripting")]
pub use release::{ReleaseArgs, Released, Successor};
pub use subscription::Subscriber;
#[cfg(feature = "scripting")]
pub use take::{Attempt, sleep_for};
pub use waiters::{DEFAULT_HANDOFFS, WatchdogLocks};

use std::sync::Arc;
use std::time::Duration;

use tokio::task::JoinHandle;

use self::waiters::Shared;
use crate::{Connection, LockError};

#[cfg(doc)]
use crate::HolderId;

/// Redisson's `lockWatchdogTimeout`: the lease used, and renewed, when none is asked for.
pub const DEFAULT_LEASE: Duration = Duration::from_secs(30);

/// How long a fair lock's waiter stays in the queue after each try (Redisson's
/// `threadWaitTime`, 5 s): a waiter that died drops out of the queue this long after its
/// last try. Waiters try again at half of it, so a live one never does.
pub const FAIR_PATIENCE: Duration = Duration::from_secs(5);

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
    watch: Arc<renewal::Watch>,
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
}

impl<C: Connection> WatchdogLock<C> {
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
