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

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use futures_util::StreamExt;
use prometheus_client::metrics::counter::Counter;
use redis::AsyncCommands;
use tokio::sync::Notify;
use tokio::task::JoinHandle;
use tokio::time::Instant;

use super::LockError;
use crate::scripts;
use crate::store::{Nodes, RedisConn};

/// Redisson's `lockWatchdogTimeout`: the lease used, and renewed, when none is asked for.
pub const DEFAULT_LEASE: Duration = Duration::from_secs(30);

/// How often a waiter looks again at a lock whose holder's release sends no message (a
/// setnx or token holder on the same key).
const UNKNOWN_TTL_POLL: Duration = Duration::from_millis(100);

/// What unlock publishes. Waiters only need to know that something happened.
const RELEASED: &str = "released";

/// Counters of what the watchdogs and waiters of one instance did.
#[derive(Debug, Default, Clone)]
pub struct WatchdogCounters {
    /// Leases extended by a watchdog.
    pub renewals: Counter,
    /// Watchdog ticks that found their lock gone: the holder lost it.
    pub lost: Counter,
    /// Waiters woken by an unlock message.
    pub wakeups: Counter,
}

/// The per-instance side of the watchdog lock: the one shared subscription and the
/// queues of waiters. Cheap to clone.
#[derive(Clone)]
pub struct WatchdogLocks {
    shared: Arc<Shared>,
}

struct Shared {
    conn: RedisConn,
    lease: Duration,
    /// Waiters by release channel, oldest first.
    waiters: Mutex<HashMap<String, VecDeque<Arc<Waiter>>>>,
    counters: WatchdogCounters,
}

struct Waiter {
    wake: Notify,
    woken: AtomicBool,
}

impl WatchdogLocks {
    /// Starts the instance's subscription to every lock's release channel, matched by
    /// `channel_pattern` (e.g. `seckill:*:lock:released`), on the first of `nodes` that
    /// answers. It reconnects by itself, to the next node when one goes away (on a Cluster
    /// every node hears every `PUBLISH`).
    pub fn start(nodes: Nodes, conn: RedisConn, lease: Duration, channel_pattern: &str) -> Self {
        let shared = Arc::new(Shared {
            conn,
            lease,
            waiters: Mutex::new(HashMap::new()),
            counters: WatchdogCounters::default(),
        });
        tokio::spawn(subscribe(
            nodes,
            channel_pattern.to_owned(),
            Arc::downgrade(&shared),
        ));
        Self { shared }
    }

    /// A handle on the lock at `key` for `owner`. Handles with the same owner re-enter
    /// each other's holds; give each task its own owner id.
    pub fn lock(&self, key: &str, channel: &str, owner: &str) -> WatchdogLock {
        WatchdogLock {
            shared: self.shared.clone(),
            key: key.to_owned(),
            channel: channel.to_owned(),
            owner: owner.to_owned(),
            holds: 0,
            watchdog: None,
            lost: Arc::new(AtomicBool::new(false)),
        }
    }

    pub fn counters(&self) -> &WatchdogCounters {
        &self.shared.counters
    }

    /// The lease used when a caller asks for none.
    pub fn default_lease(&self) -> Duration {
        self.shared.lease
    }
}

impl Shared {
    fn register(&self, channel: &str) -> Arc<Waiter> {
        let waiter = Arc::new(Waiter {
            wake: Notify::new(),
            woken: AtomicBool::new(false),
        });
        self.waiters()
            .entry(channel.to_owned())
            .or_default()
            .push_back(waiter.clone());
        waiter
    }

    /// Takes `waiter` off the queue. A waiter that was woken but is leaving without the
    /// lock passes the wake-up on, so an unlock is never spent on nobody.
    fn deregister(&self, channel: &str, waiter: &Arc<Waiter>, acquired: bool) {
        let mut queues = self.waiters();
        if let Some(queue) = queues.get_mut(channel) {
            queue.retain(|w| !Arc::ptr_eq(w, waiter));
            if queue.is_empty() {
                queues.remove(channel);
            }
        }
        drop(queues);
        if waiter.woken.load(Ordering::Acquire) && !acquired {
            self.wake_one(channel);
        }
    }

    /// An unlock on `channel`: wake the oldest waiter of this instance.
    fn wake_one(&self, channel: &str) {
        let mut queues = self.waiters();
        let Some(queue) = queues.get_mut(channel) else {
            return;
        };
        if let Some(waiter) = queue.pop_front() {
            waiter.woken.store(true, Ordering::Release);
            waiter.wake.notify_one();
            self.counters.wakeups.inc();
        }
        if queue.is_empty() {
            queues.remove(channel);
        }
    }

    /// After the subscription was down, messages may have been missed: wake one waiter
    /// per lock to look again.
    fn wake_every_lock(&self) {
        let channels: Vec<String> = self.waiters().keys().cloned().collect();
        for channel in channels {
            self.wake_one(&channel);
        }
    }

    /// Wakes every waiter of this instance, to look at the lock again.
    fn wake_everyone(&self) {
        for (_, queue) in self.waiters().drain() {
            for waiter in queue {
                waiter.woken.store(true, Ordering::Release);
                waiter.wake.notify_one();
            }
        }
    }

    fn waiters(&self) -> std::sync::MutexGuard<'_, HashMap<String, VecDeque<Arc<Waiter>>>> {
        // A std Mutex: it is held for a few queue operations and never across an await.
        // A panic while holding it cannot leave the queues half-changed, so poison is moot.
        self.waiters.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// The instance's one subscription: every release message wakes one local waiter.
async fn subscribe(nodes: Nodes, pattern: String, shared: Weak<Shared>) {
    let mut backoff = Duration::from_millis(50);
    for attempt in 0.. {
        let connected = match nodes.pick(attempt).await {
            Some(client) => {
                tokio::time::timeout(Duration::from_secs(2), client.get_async_pubsub()).await
            }
            None => Ok(Err(redis::RedisError::from((
                redis::ErrorKind::Io,
                "no node to subscribe on",
            )))),
        };
        if let Ok(Ok(mut pubsub)) = connected
            && pubsub.psubscribe(&pattern).await.is_ok()
        {
            backoff = Duration::from_millis(50);
            let Some(alive) = shared.upgrade() else {
                return;
            };
            alive.wake_every_lock();
            drop(alive);
            let mut messages = pubsub.into_on_message();
            while let Some(message) = messages.next().await {
                let Some(alive) = shared.upgrade() else {
                    return;
                };
                alive.wake_one(message.get_channel_name());
            }
            tracing::warn!("lock release subscription lost; reconnecting");
            // Redis may be gone: let every waiter try now, and fail fast if it is, rather
            // than sleep out its wait.
            if let Some(alive) = shared.upgrade() {
                alive.wake_everyone();
            }
        }
        if shared.strong_count() == 0 {
            return;
        }
        tokio::time::sleep(backoff).await;
        backoff = (backoff * 2).min(Duration::from_secs(1));
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
    owner: String,
    /// Holds taken through this handle and not yet given back.
    holds: u32,
    watchdog: Option<JoinHandle<()>>,
    lost: Arc<AtomicBool>,
}

impl WatchdogLock {
    /// Takes the lock, waiting as long as it takes. The watchdog keeps it until `unlock`.
    pub async fn lock(&mut self) -> Result<(), LockError> {
        self.acquire(None, None).await.map(|_| ())
    }

    /// Takes the lock, waiting up to `wait`. With a `lease`, the lock expires after it
    /// and no watchdog runs (as in Redisson); without one, the watchdog renews the
    /// default lease until `unlock`. Returns false when `wait` ran out.
    pub async fn try_lock(
        &mut self,
        wait: Duration,
        lease: Option<Duration>,
    ) -> Result<bool, LockError> {
        self.acquire(Some(wait), lease).await
    }

    async fn acquire(
        &mut self,
        wait: Option<Duration>,
        lease: Option<Duration>,
    ) -> Result<bool, LockError> {
        let deadline = wait.map(|wait| Instant::now() + wait);
        loop {
            // Queue up before trying, so an unlock between the try and the wait still
            // reaches this waiter. Queueing is local: it costs Redis nothing.
            let waiter = self.shared.register(&self.channel);
            let ttl = match self.try_once(lease).await {
                Ok(None) => {
                    self.shared.deregister(&self.channel, &waiter, true);
                    self.acquired(lease);
                    return Ok(true);
                }
                Ok(Some(ttl)) => ttl,
                Err(err) => {
                    self.shared.deregister(&self.channel, &waiter, false);
                    return Err(err);
                }
            };
            let left = deadline.map(|d| d.saturating_duration_since(Instant::now()));
            if left == Some(Duration::ZERO) {
                self.shared.deregister(&self.channel, &waiter, false);
                return Ok(false);
            }
            // Sleep until an unlock message, or until the lease runs out (in case the
            // message was lost), or until the wait does.
            let mut nap = ttl;
            if let Some(left) = left {
                nap = nap.min(left);
            }
            tokio::select! {
                () = waiter.wake.notified() => {}
                () = tokio::time::sleep(nap) => {}
            }
            // Back to the queue's end on the next round: this lock is not fair.
            self.shared.deregister(&self.channel, &waiter, true);
        }
    }

    /// One try. `None` when the lock is now held; otherwise its remaining TTL.
    async fn try_once(&mut self, lease: Option<Duration>) -> Result<Option<Duration>, LockError> {
        let lease = lease.unwrap_or(self.shared.lease);
        let ttl: Option<i64> = scripts::WATCHDOG_LOCK
            .key(&self.key)
            .arg(millis(lease))
            .arg(&self.owner)
            .invoke_async(&mut self.shared.conn.clone())
            .await?;
        // -1: held by a setnx or token holder, whose release publishes nothing: look again
        // every so often. -2: it expired in between: look again at once.
        Ok(ttl.map(|ms| match ms {
            -1 => UNKNOWN_TTL_POLL,
            ms => Duration::from_millis(u64::try_from(ms).unwrap_or(0).max(1)),
        }))
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

    /// Gives back one hold. On the last one the watchdog stops first, then the lock is
    /// deleted and one waiter per instance is woken. Returns false when this owner no
    /// longer held the lock (it expired or was taken away).
    pub async fn unlock(&mut self) -> Result<bool, LockError> {
        if self.holds == 0 {
            return Ok(false);
        }
        self.holds -= 1;
        if self.holds == 0 {
            self.stop_watchdog();
        }
        let released: Option<i64> = scripts::WATCHDOG_UNLOCK
            .key(&self.key)
            .key(&self.channel)
            .arg(RELEASED)
            .arg(millis(self.shared.lease))
            .arg(&self.owner)
            .invoke_async(&mut self.shared.conn.clone())
            .await?;
        if released.is_none() {
            self.holds = 0;
            self.stop_watchdog();
        }
        Ok(released.is_some())
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
        let deleted: i64 = scripts::FORCE_UNLOCK
            .key(&self.key)
            .key(&self.channel)
            .arg(RELEASED)
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
