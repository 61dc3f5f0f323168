//! Distributed locks on Redis, usable without HTTP.
//!
//! Each lock is one step of the progression and keeps that step's flaws on purpose:
//!
//! - [`SetnxLock`] — `SETNX` with no TTL, released by a plain `DEL`. A holder that dies
//!   leaves it held forever, and `DEL` removes whoever holds it.
//! - [`TokenLock`] — `SET key <uuid> NX PX ttl`, released by compare-and-delete. Correct
//!   while the work fits in the TTL; when it does not, a second holder gets in.
//! - [`WatchdogLock`] — Redisson's reentrant lock: a hash `owner -> hold count` with a
//!   lease a watchdog renews, and waiters woken through one shared subscription
//!   ([`WatchdogLocks`]). Correct even when the work outlasts the lease.
//! - [`Redlock`] — one lock over 3 or 5 independent masters, held by a majority, as the
//!   Redis docs describe it; survives the loss of a minority of them.
//!
//! All of them take a lock with `try_lock` and give it back with `unlock`. Release is async,
//! so it cannot run in `Drop`: a caller that forgets it leaves the lock to its TTL (or, for
//! `SetnxLock`, forever), which is exactly what the setnx lesson shows.

pub mod redlock;
mod setnx;
mod token;
mod waiters;
pub mod watchdog;

pub use redlock::{Redlock, RedlockLock};
pub use setnx::SetnxLock;
pub use token::TokenLock;
pub use watchdog::{WatchdogLock, WatchdogLocks};

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use redis::RedisError;
use uuid::Uuid;

#[derive(Debug, thiserror::Error)]
pub enum LockError {
    #[error("redis: {0}")]
    Redis(#[from] RedisError),
}

/// Who holds a lock: one UUID per process plus a sequence number per acquisition, so two
/// tasks on the same thread never share an identity (as Redisson's thread ids would).
#[derive(Debug)]
pub struct OwnerIds {
    /// The process UUID, formatted once.
    process: String,
    next: AtomicU64,
}

impl OwnerIds {
    pub fn new() -> Self {
        Self {
            process: Uuid::new_v4().to_string(),
            next: AtomicU64::new(1),
        }
    }

    /// Owner ids that start with the instance's id, `"<instance>/<process uuid>:<n>"`, so
    /// that whoever looks at a lock (`/stats`, the page) sees which instance holds it.
    pub fn for_instance(instance: &str) -> Self {
        Self {
            process: format!("{instance}/{}", Uuid::new_v4()),
            next: AtomicU64::new(1),
        }
    }

    /// A fresh owner id, `"<process uuid>:<n>"` (after the instance, when there is one).
    pub fn next(&self) -> String {
        let n = self.next.fetch_add(1, Ordering::Relaxed);
        let mut id = String::with_capacity(self.process.len() + 21);
        id.push_str(&self.process);
        id.push(':');
        id.push_str(itoa::Buffer::new().format(n));
        id
    }
}

impl Default for OwnerIds {
    fn default() -> Self {
        Self::new()
    }
}

/// Sleep between two tries of a spinning lock: a few milliseconds with jitter, so that
/// waiters on two instances do not retry in lock-step, and never past the deadline.
pub(crate) fn retry_delay(left: Duration) -> Duration {
    Duration::from_millis(fastrand::u64(2..=10)).min(left)
}
