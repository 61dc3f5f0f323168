//! Distributed locks on Redis that hold under load and faults: Redisson's reentrant lock,
//! whose lease a watchdog renews while the holder works — fair or not, fenced or not, handed
//! straight to a waiter of the same process — held through a [`Guard`] that gives it back
//! when dropped and cleans up after an acquire that was cancelled; and beside it Redlock, a
//! read-write lock, a [`MultiLock`] and the same lock on ZooKeeper.
//!
//! # Quick start
//!
//! One [`WatchdogLocks`] per process: it holds the connection, the one subscription that
//! wakes every waiter when a lock is released, and the lease its watchdogs renew. Each
//! [`lock`](WatchdogLocks::lock) is a handle for one holder; [`Lock::acquire`] waits for
//! the lock, [`Lock::try_acquire`] tries once, [`Lock::try_acquire_for`] waits up to a
//! limit, and each gives a [`Guard`].
//!
//! ```no_run
//! use std::time::Duration;
//!
//! use seckill_lock::{Lock, Namespace, WatchdogLocks};
//!
//! # async fn run() -> Result<(), Box<dyn std::error::Error>> {
//! let client = redis::Client::open("redis://127.0.0.1/")?;
//! let conn = client.get_multiplexed_async_connection().await?;
//! let locks = WatchdogLocks::builder(client, conn)
//!     .namespace(Namespace::new("myapp"))
//!     .start();
//!
//! let Some(guard) = locks.lock("{order:42}").try_acquire_for(Duration::from_secs(1)).await? else {
//!     return Ok(()); // held by someone else for the whole second
//! };
//! // ... the work the lock protects. The watchdog renews the lease meanwhile; if the
//! // lock is lost anyway (Redis lost it, or this process stalled past the lease),
//! // `guard.is_lost()` says so and `guard.lost()` wakes: do not commit.
//! if !guard.is_lost() {
//!     // commit
//! }
//! guard.release().await?; // or drop it: it is given back in the background
//! # Ok(()) }
//! ```
//!
//! # On a Redis Cluster (feature `cluster`)
//!
//! A lock's keys must share a slot: put a hash tag in its name (`{order:42}`; everything in
//! the name outside the braces may differ). On redis-rs's Cluster connection a name without
//! one is refused at [`lock`](WatchdogLocks::lock) (a panic: a programming error), not by
//! Redis at the first take. The subscription listens on any node, trying the next when one
//! goes away: every node of a Cluster hears every `PUBLISH`.
//!
//! ```no_run
//! # #[cfg(feature = "cluster")]
//! # async fn run() -> Result<(), Box<dyn std::error::Error>> {
//! # use seckill_lock::{Namespace, WatchdogLocks};
//! let nodes = ["redis://10.0.0.1:7000", "redis://10.0.0.2:7000", "redis://10.0.0.3:7000"];
//! let conn = redis::cluster::ClusterClient::new(nodes.to_vec())?
//!     .get_async_connection()
//!     .await?;
//! let subscribe_on = nodes
//!     .iter()
//!     .map(|node| redis::Client::open(*node))
//!     .collect::<Result<Vec<_>, _>>()?;
//! let locks = WatchdogLocks::builder(subscribe_on, conn)
//!     .namespace(Namespace::new("myapp"))
//!     .start();
//! let lock = locks.lock("{order:42}"); // the hash tag: one slot
//! # Ok(()) }
//! ```
//!
//! # Behind Sentinel (feature `sentinel`)
//!
//! `sentinel::SentinelConnection` is a connection to whichever node the sentinels call
//! the master now: after a failover its next command goes to the new master, and as the
//! subscription's [`Subscriber`](watchdog::Subscriber) it listens there too. A command
//! that met the failover fails with its own error (never sent twice). Redis replicates
//! asynchronously, so a grant the old master had not passed on can be lost with it; a lock
//! that must survive a failover asks for
//! [`confirmed_by_replicas`](WatchdogLock::confirmed_by_replicas).
//!
//! ```no_run
//! # #[cfg(feature = "sentinel")]
//! # async fn run() -> Result<(), Box<dyn std::error::Error>> {
//! # use std::time::Duration;
//! # use seckill_lock::{Namespace, WatchdogLocks};
//! use seckill_lock::sentinel::SentinelConnection;
//!
//! let sentinels = ["redis://10.0.0.1:26379", "redis://10.0.0.2:26379", "redis://10.0.0.3:26379"];
//! let conn = SentinelConnection::new(&sentinels, "mymaster", Duration::from_secs(2))?;
//! let locks = WatchdogLocks::builder(conn.clone(), conn)
//!     .namespace(Namespace::new("myapp"))
//!     .start();
//! # Ok(()) }
//! ```
//!
//! # The locks
//!
//! | Lock | Feature | Lease | Waiters | Fencing token |
//! |---|---|---|---|---|
//! | [`WatchdogLock`] | default | renewed by a watchdog until release (or a fixed one) | woken by a release message; fair queue optional; handed the lock by a holder of the same process | with [`fenced`](WatchdogLock::fenced) |
//! | [`TokenLock`] | default | fixed TTL, never renewed | spin every few ms | none |
//! | `Redlock` | `redlock` | fixed, extended on a quorum | spin with random back-off, one contender per process | none |
//! | `RwLock` | `rw` | renewed by a watchdog | spin; a waiting writer goes before new readers | none |
//! | `ZooKeeperLock` | `zookeeper` | the ZooKeeper session | watch the node before their own | the node's zxid |
//! | [`MultiLock`] | default | its locks' | takes its locks in key order, all or none | none |
//! //!
//! All of them implement [`Lock`]: [`acquire`](Lock::acquire),
//! [`try_acquire`](Lock::try_acquire) and [`try_acquire_for`](Lock::try_acquire_for) give
//! a [`Guard`], whose [`extend`](Guard::extend) lengthens a fixed lease and
//! [`release`](Guard::release) gives it back; [`take`](Lock::take) and
//! [`give_back`](Lock::give_back) are the raw steps under them.
//!
//! # Holders
//!
//! A holder is a [`HolderId`], made by the crate: [`WatchdogLocks::lock`] (and Redlock's and
//! ZooKeeper's `lock`) makes a fresh one for each handle; [`HolderId::new`] and
//! [`HolderIds`] make them for the other locks, and for a caller that records who held
//! what (`lock_as`). Re-enter a reentrant lock through the handle that holds it.
//!
//! # Cancellation, drop, and lost answers
//!
//! - [`Lock::acquire`] (and `try_acquire`, `try_acquire_for`) is cancel safe: dropped before it answers, whatever it may have
//!   taken or queued is given back in the background ([`Lock::clean_up`]): a token deleted
//!   if still there, a fair waiter out of the queue, a hand-off to it given back, a
//!   ZooKeeper node deleted. An acquire that fails with its answer lost
//!   ([`LockError::may_have_run`]) cleans up the same way: a timeout is not a no.
//! - [`Guard::release`] is cancel safe: it runs as a task of its own and finishes.
//! - A [`Guard`] dropped gives the lock back in the background;
//!   [`abandon`](Guard::abandon) leaves it held, as a process that dies does.
//! - [`Lock::lost`] is cancel safe.
//! - The raw [`take`](Lock::take) and [`give_back`](Lock::give_back), and the
//!   `scripting` feature's `acquire_with`, are not: a raw take dropped after Redis granted
//!   it leaves the lock to its lease.
//!
//! # What no lock here promises
//!
//! A holder that stalls past its lease (a GC pause, a stopped process, a slow network)
//! still believes it holds the lock until it looks ([`Lock::is_lost`] is a local
//! deadline: last confirmed renewal plus lease). Where that matters, take a fencing token
//! with the lock and have the resource refuse one lower than it has seen.
//!
//! # What is stable
//!
//! The crate is 0.x: a minor version may change any of it, and `CHANGELOG.md` says what
//! did. Within a minor version these stay as they are: the [`Lock`] trait's acquires,
//! [`Guard`], [`HolderId`], [`WatchdogLocks::builder`] and its options, [`Lease`], the
//! lock types' constructors and options, and [`LockError`] (new variants may be added:
//! it is `#[non_exhaustive]`). Not covered: the `scripting` feature (the Lua and the hooks
//! follow the service that uses them), the `teaching` feature (the steps a class is
//! shown), and [`WatchdogCounters`]' set of counters. The keys a lock writes in Redis
//! ([`LockKeys`]) change only with a minor version, and the changelog says how to move.
//!
//! # Features
//!
//! | Feature | Adds |
//! |---|---|
//! | (default) | [`WatchdogLock`], [`TokenLock`], [`MultiLock`] on one Redis, on Tokio |
//! | `cluster` | Redis Cluster connections |
//! | `sentinel` | `sentinel::SentinelConnection`: the master the sentinels name, followed across failovers |
//! | `tls` | TLS to Redis (rustls) |
//! | `redlock` | `Redlock`: one lock over 3 or 5 independent masters |
//! | `rw` | `RwLock`: Redisson's read-write lock |
//! | `zookeeper` | `ZooKeeperLock`, Curator's lock recipe |
//! | `teaching` | the `teaching` module: the seeds' broken steps, for a class |
//! | `scripting` | the watchdog lock's Lua and the hooks that fuse its take and release with your own script on the lock's slot; no stability promise |
//!
//! The minimum supported Rust version is 1.88.

#![warn(missing_docs)]
#![cfg_attr(docsrs, feature(doc_cfg))]

mod error;
mod guard;
mod holder;
pub mod inspect;
mod keys;
mod multi;
#[cfg(feature = "redlock")]
pub mod redlock;
#[cfg(feature = "rw")]
pub mod rw;
mod scripts;
#[cfg(feature = "sentinel")]
pub mod sentinel;
#[cfg(feature = "teaching")]
mod setnx;
#[cfg(feature = "teaching")]
pub mod teaching;
pub mod token;
mod watch;
pub mod watchdog;
#[cfg(feature = "zookeeper")]
pub mod zookeeper;

pub use error::{BoxError, LockError};
pub use guard::Guard;
pub use holder::{HolderId, HolderIds};
pub use inspect::LockState;
pub use multi::MultiLock;
#[cfg(feature = "redlock")]
pub use redlock::{Redlock, RedlockLock};
#[cfg(feature = "rw")]
pub use rw::{RwKeys, RwLock, Side};
#[cfg(feature = "scripting")]
pub use scripts::LOCK_LUA;
pub use token::TokenLock;
pub use watchdog::{
    Lease, LockKeys, Namespace, WatchdogCounters, WatchdogLock, WatchdogLocks, WatchdogLocksBuilder,
};
#[cfg(feature = "zookeeper")]
pub use zookeeper::{ZooKeeper, ZooKeeperLock};

use std::time::Duration;

use redis::aio::ConnectionLike;

/// The README's quick start, compiled with the doctests.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeQuickStart;

/// What the locks talk to Redis through: any async connection that can be cloned and moved
/// between tasks (clones share one multiplexed connection).
pub trait Connection: ConnectionLike + Clone + Send + Sync + 'static {}

impl<C: ConnectionLike + Clone + Send + Sync + 'static> Connection for C {}

/// A distributed lock, as one holder sees it: a handle, for one holder (one request, one
/// task), used once.
///
/// [`acquire`](Lock::acquire) takes the lock and gives a [`Guard`]; the guard gives it back
/// when released or dropped. [`take`](Lock::take) and [`give_back`](Lock::give_back) are
/// the raw steps a guard is built on, for a holder that re-enters a reentrant lock through
/// the same handle or manages the hold itself.
pub trait Lock: Send + Sync + Sized + 'static {
    /// Takes the lock, waiting as long as it takes.
    ///
    /// # Cancel safety
    ///
    /// Dropped before it returns, it leaves nothing behind: whatever the lock may hold for
    /// this holder in the store — a take whose answer was not read yet, a hand-off to this
    /// waiter, a place in a fair queue or a ZooKeeper node — is given back in the
    /// background on the runtime ([`Lock::clean_up`]), and its local waiters' queue
    /// forgets it at once. So `tokio::time::timeout(d, lock.acquire())` is a bounded wait
    /// too; [`try_acquire_for`](Lock::try_acquire_for) is the same wait with nothing to
    /// clean up when it runs out.
    fn acquire(self) -> impl Future<Output = Result<Guard<Self>, LockError>> + Send {
        guard::acquire_whenever(self)
    }

    /// Takes the lock if it is free, with one try: a guard, or `None` when another holds
    /// it.
    ///
    /// # Cancel safety
    ///
    /// As [`acquire`](Lock::acquire)'s.
    fn try_acquire(self) -> impl Future<Output = Result<Option<Guard<Self>>, LockError>> + Send {
        guard::acquire(self, Duration::ZERO)
    }

    /// Takes the lock, trying for up to `wait`: a guard, or `None` when the lock stayed
    /// held by another for the whole wait.
    ///
    /// # Cancel safety
    ///
    /// As [`acquire`](Lock::acquire)'s.
    fn try_acquire_for(
        self,
        wait: Duration,
    ) -> impl Future<Output = Result<Option<Guard<Self>>, LockError>> + Send {
        guard::acquire(self, wait)
    }

    /// The raw take under [`acquire`](Lock::acquire): true when this handle holds the lock
    /// (once more, for a reentrant lock), false when the wait ran out (`Duration::MAX`:
    /// no deadline). The caller must [`give_back`](Lock::give_back) what it takes.
    fn take(&mut self, wait: Duration) -> impl Future<Output = Result<bool, LockError>> + Send;

    /// The raw release under [`Guard::release`]: one hold given back. False when it was no
    /// longer this holder's (it expired, or was taken away): whatever the holder did
    /// meanwhile was not protected.
    fn give_back(&mut self) -> impl Future<Output = Result<bool, LockError>> + Send;

    /// What a [`take`](Lock::take) dropped before it returned may have left in the store
    /// for this holder, given back: run in the background when an
    /// [`acquire`](Lock::acquire) is cancelled. By default one
    /// [`give_back`](Lock::give_back), which for a lock held by a unique token deletes it
    /// only if the token is still there.
    fn clean_up(&mut self) -> impl Future<Output = Result<(), LockError>> + Send {
        async {
            self.give_back().await?;
            Ok(())
        }
    }

    /// Stops as if the holder's process had died: nothing given back, nothing renewed.
    fn abandon(&mut self) {}

    /// The raw step under [`Guard::extend`]: the lease made `lease` long from now, if the
    /// lock is still this holder's (true), or not (false: it expired or was taken, and
    /// [`is_lost`](Lock::is_lost) says so from then on). A lock with no lease of its own
    /// to extend answers [`LockError::Unsupported`].
    fn extend(&mut self, lease: Duration) -> impl Future<Output = Result<bool, LockError>> + Send {
        let _ = lease;
        async { Err(LockError::Unsupported("extend")) }
    }

    /// True once the holder knows it no longer holds the lock (a watchdog tick or a Redlock
    /// extension found it gone, or its lease ran out unrenewed): it must not act as if it
    /// did.
    fn is_lost(&self) -> bool {
        false
    }

    /// Returns once [`is_lost`](Lock::is_lost) is true — never, for a lock that cannot
    /// know (a setnx lock) — so that a holder can stop its work the moment the lock is
    /// gone:
    ///
    /// ```no_run
    /// # use seckill_lock::{Guard, Lock};
    /// # async fn work() {}
    /// # async fn run<L: Lock>(guard: Guard<L>) -> Result<(), seckill_lock::LockError> {
    /// tokio::select! {
    ///     () = guard.lost() => { /* the lock is gone: do not commit */ }
    ///     () = work() => { guard.release().await?; }
    /// }
    /// # Ok(()) }
    /// ```
    ///
    /// By default it looks at `is_lost` every 10 ms; the watchdog lock is woken instead.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: it only watches.
    fn lost(&self) -> impl Future<Output = ()> + Send {
        async {
            while !self.is_lost() {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        }
    }

    /// Where the lock lives: its key (a ZooKeeper lock's directory). A [`MultiLock`] takes
    /// its locks in this order.
    fn key(&self) -> &str;

    /// Who holds the lock through this handle: the value (or, for [`WatchdogLock`], the
    /// hash field) it writes into the store ([`HolderId`]).
    fn holder(&self) -> &str;

    /// True when the lock is a hash with [`holder`](Lock::holder) as a field while held, so
    /// that a script on the lock's slot can check, in the same step as a write, that the
    /// holder still holds it ([`WatchdogLock`]).
    #[cfg(feature = "scripting")]
    fn holder_is_a_hash_field(&self) -> bool {
        false
    }

    /// A fencing token the lock store issued with the grant, for stores that issue one
    /// (ZooKeeper's node zxid). Redis's plain locks issue none.
    fn fencing_token(&self) -> Option<i64> {
        None
    }

    /// How long the lease granted with the lock lasts when nothing renews it, for locks
    /// whose lease runs out on its own (a setnx lock's never does; a ZooKeeper session's
    /// is the ensemble's to end). A holder still working past it is no longer protected.
    fn lease(&self) -> Option<Duration> {
        None
    }

    /// When this holder's lease was renewed since it was granted (a watchdog's ticks),
    /// oldest first; at most [`RENEWALS_KEPT`] of them.
    #[cfg(feature = "teaching")]
    fn renewals(&self) -> Vec<std::time::Instant> {
        Vec::new()
    }
}

/// The renewals a holder remembers (`Lock::renewals`, with `teaching`): enough for any critical section a
/// class can watch, bounded for one that runs for hours.
#[cfg_attr(not(feature = "teaching"), allow(dead_code))]
pub const RENEWALS_KEPT: usize = 64;

/// A duration as Redis takes one: whole milliseconds, saturating. `PX` and `PEXPIRE`
/// refuse 0, so callers that set an expiry take `.max(1)` of it.
pub fn millis(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)
}

/// The spinning waiter of the setnx and token locks: between two tries, a pause of a few
/// jittered milliseconds ([`Spin::pause`]) while the wait lasts.
struct Spin {
    deadline: Option<tokio::time::Instant>,
}

impl Spin {
    /// Tries for up to `wait` from now.
    fn for_up_to(wait: Duration) -> Self {
        Self {
            deadline: tokio::time::Instant::now().checked_add(wait),
        }
    }

    /// Sleeps before the next try: false, without sleeping, once the wait has run out.
    async fn pause(&self) -> bool {
        let left = time_left(self.deadline);
        if left.is_zero() {
            return false;
        }
        tokio::time::sleep(retry_delay(left)).await;
        true
    }
}

/// Time left before `deadline`; a wait too long to have one (`Duration::MAX`) never ends.
fn time_left(deadline: Option<tokio::time::Instant>) -> Duration {
    deadline.map_or(Duration::MAX, |d| {
        d.saturating_duration_since(tokio::time::Instant::now())
    })
}

/// Sleep between two tries of a spinning lock: a few milliseconds with jitter, so that
/// waiters on two instances do not retry in lock-step, and never past the deadline.
fn retry_delay(left: Duration) -> Duration {
    Duration::from_millis(fastrand::u64(2..=10)).min(left)
}
