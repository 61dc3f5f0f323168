//! Several locks taken as one, as Redisson's `RedissonMultiLock`: all of them within one
//! wait, or none.

use std::time::Duration;

use tokio::time::Instant;

use crate::{Lock, LockError, time_left};

/// Several locks of one kind held as one: taken in the order of their keys, all within
/// one wait or none, given back the last first.
///
/// Sorted, two holders that want overlapping sets (a cart with products 1 and 2, another
/// with 2 and 1) take them in the same order, so neither holds one the other waits for: no
/// deadlock. A take that finds one lock busy for the rest of the wait gives back the ones
/// it took and answers no.
///
/// ```no_run
/// # use std::time::Duration;
/// # use seckill_lock::{Lock, MultiLock, WatchdogLocks, HolderId};
/// # async fn run(locks: WatchdogLocks<redis::aio::MultiplexedConnection>) -> Result<(), seckill_lock::LockError> {
/// let holder = HolderId::new(); // one holder, several locks
/// let cart = MultiLock::new(["{sku:7}", "{sku:3}"].map(|sku| locks.lock_as(sku, &holder)));
/// if let Some(guard) = cart.try_acquire_for(Duration::from_millis(500)).await? {
///     // both products are ours
///     guard.release().await?;
/// }
/// # Ok(()) }
/// ```
pub struct MultiLock<L> {
    locks: Vec<L>,
    /// How many of `locks`, from the first, this handle holds.
    held: usize,
}

impl<L: Lock> MultiLock<L> {
    /// The locks, to be taken in the order of their [`key`](Lock::key)s. A key given
    /// twice is taken once (the first handle for it is kept): two handles on one lock
    /// with one holder id would be one hold in the store, and the release of the one
    /// would free the other's.
    pub fn new(locks: impl IntoIterator<Item = L>) -> Self {
        let mut locks: Vec<L> = locks.into_iter().collect();
        locks.sort_by(|a, b| a.key().cmp(b.key()));
        locks.dedup_by(|later, first| later.key() == first.key());
        Self { locks, held: 0 }
    }

    /// The locks, taken in the order given: two holders that give overlapping sets in
    /// opposite orders each hold one lock the other waits for, until their waits run out
    /// (the deadlock sorting prevents).
    /// A key given twice is taken once, at its first place.
    #[cfg(feature = "teaching")]
    pub fn in_order_given(locks: impl IntoIterator<Item = L>) -> Self {
        let mut seen = std::collections::HashSet::new();
        let locks = locks
            .into_iter()
            .filter(|lock| seen.insert(lock.key().to_owned()))
            .collect();
        Self { locks, held: 0 }
    }

    /// The locks, in the order they are taken.
    pub fn locks(&self) -> &[L] {
        &self.locks
    }

    /// Gives back the locks held, the last first; true when every one was still held.
    async fn give_back_held(&mut self) -> Result<bool, LockError> {
        let mut all = true;
        let mut failed = None;
        while self.held > 0 {
            self.held -= 1;
            match self.locks[self.held].give_back().await {
                Ok(held) => all &= held,
                Err(err) => failed = Some(err),
            }
        }
        match failed {
            Some(err) => Err(err),
            None => Ok(all),
        }
    }
}

impl<L: Lock> Lock for MultiLock<L> {
    /// Takes each lock in turn, each with what is left of `wait`; false (and none held)
    /// when one stayed busy until the wait ran out.
    async fn take(&mut self, wait: Duration) -> Result<bool, LockError> {
        let deadline = Instant::now().checked_add(wait);
        while self.held < self.locks.len() {
            let left = time_left(deadline);
            match self.locks[self.held].take(left).await {
                Ok(true) => self.held += 1,
                Ok(false) => {
                    self.give_back_held().await?;
                    return Ok(false);
                }
                Err(err) => {
                    if err.may_have_run() {
                        let _ = self.locks[self.held].clean_up().await;
                    }
                    let _ = self.give_back_held().await;
                    return Err(err);
                }
            }
        }
        Ok(true)
    }

    /// Gives back every lock, the last first; false when any was no longer held.
    async fn give_back(&mut self) -> Result<bool, LockError> {
        self.give_back_held().await
    }

    /// The locks taken given back, and the one whose take was cut cleaned up.
    async fn clean_up(&mut self) -> Result<(), LockError> {
        if let Some(cut) = self.locks.get_mut(self.held) {
            cut.clean_up().await?;
        }
        self.give_back_held().await?;
        Ok(())
    }

    fn abandon(&mut self) {
        for lock in &mut self.locks[..self.held] {
            lock.abandon();
        }
        self.held = 0;
    }

    /// Every lock held made `lease` from now, in key order; false when any of them was
    /// no longer held.
    async fn extend(&mut self, lease: Duration) -> Result<bool, LockError> {
        let mut all = self.held > 0;
        for lock in &mut self.locks[..self.held] {
            all &= lock.extend(lease).await?;
        }
        Ok(all)
    }

    /// Lost when any of its locks is.
    fn is_lost(&self) -> bool {
        self.locks[..self.held].iter().any(Lock::is_lost)
    }

    /// The first lock's holder.
    fn holder(&self) -> &str {
        self.locks.first().map_or("", Lock::holder)
    }

    /// The first lock's key.
    fn key(&self) -> &str {
        self.locks.first().map_or("", Lock::key)
    }

    /// The shortest lease of its locks.
    fn lease(&self) -> Option<Duration> {
        self.locks.iter().filter_map(Lock::lease).min()
    }
}
