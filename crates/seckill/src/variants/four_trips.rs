//! Four trips for any lock ([`FourTrips`]): the lock taken on its own, then the
//! critical section's scripts, then the lock's release — and the locks a request holds
//! through them.

use std::time::Duration;

use seckill_lock::{Guard, Lock, LockError};
use tokio::time::Instant;

use super::section::{Entry, Trips, log_release};
use super::{Deduction, Outcome};
use crate::error::AppError;
use crate::keys::ShardKeys;
use crate::scripts::{self, Credentials, Leaving, Reply, StockWrite};

use crate::knobs::INSIDE_MARGIN;

/// Where a lock lives, which says what may be asked of it besides the lock itself.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LockStore {
    /// The instance's lock store (the stock store itself unless `--lock-redis-url`):
    /// `--lock-wait-replicas` confirms its locks, and a commit can check a watchdog lock
    /// in the same script when it lives beside the stock.
    Instance,
    /// Servers of its own (Redlock).
    OwnServers,
}

/// A lock whose holder sleeps before giving it back (`fault=pause_before_release`): the
/// window in which a blind release deletes somebody else's lock.
pub(super) struct Paused<L> {
    lock: L,
    pause: Option<Duration>,
}

impl<L: Lock> Lock for Paused<L> {
    async fn take(&mut self, wait: Duration) -> Result<bool, LockError> {
        self.lock.take(wait).await
    }

    async fn give_back(&mut self) -> Result<bool, LockError> {
        if let Some(pause) = self.pause {
            tokio::time::sleep(pause).await;
        }
        self.lock.give_back().await
    }

    async fn clean_up(&mut self) -> Result<(), LockError> {
        self.lock.clean_up().await
    }

    fn abandon(&mut self) {
        self.lock.abandon();
    }

    fn is_lost(&self) -> bool {
        self.lock.is_lost()
    }

    fn holder(&self) -> &str {
        self.lock.holder()
    }

    fn key(&self) -> &str {
        self.lock.key()
    }

    fn holder_is_a_hash_field(&self) -> bool {
        self.lock.holder_is_a_hash_field()
    }

    fn fencing_token(&self) -> Option<i64> {
        self.lock.fencing_token()
    }

    fn lease(&self) -> Option<Duration> {
        self.lock.lease()
    }

    fn renewals(&self) -> Vec<std::time::Instant> {
        self.lock.renewals()
    }
}

/// A lock a request holds, given back only when the request says so: dropped with the
/// request (its client gone, its future cancelled) while a command sent under the lock may
/// still run, it is abandoned — left to its lease — not released, so that the next holder
/// cannot read the stock before a late commit lands (a lost answer is not an undone
/// command). A [`Guard`] alone would give the lock back at once.
pub(super) struct Holding<L: Lock>(Option<Guard<L>>);

impl<L: Lock> Holding<L> {
    pub(super) fn new(guard: Guard<L>) -> Self {
        Self(Some(guard))
    }

    /// Gives the lock back: whether it was still held.
    pub(super) async fn release(mut self) -> Result<bool, LockError> {
        match self.0.take() {
            Some(guard) => guard.release().await,
            None => Ok(false),
        }
    }

    /// Leaves the lock held, as a holder that died does.
    pub(super) fn abandon(mut self) {
        if let Some(guard) = self.0.take() {
            guard.abandon();
        }
    }
}

impl<L: Lock> Drop for Holding<L> {
    fn drop(&mut self) {
        if let Some(guard) = self.0.take() {
            guard.abandon();
        }
    }
}

/// The shared lock sequence's trips: the lock (any [`Lock`]) on its own, then `enter.lua`,
/// then `commit.lua` (or `leave.lua`), then the lock's release.
pub(super) struct FourTrips<L: Lock> {
    /// The handle, until it is taken.
    lock: Option<L>,
    /// The lock held, once taken: given back by [`Trips::release`], or abandoned should
    /// the request be dropped halfway ([`Holding`]).
    guard: Option<Holding<L>>,
    store: LockStore,
    /// Whether the commit presents the holder, checked against the lock hash.
    checkable: bool,
    token: Option<i64>,
}

impl<L: Lock> FourTrips<L> {
    pub(super) fn new(lock: L, store: LockStore) -> Self {
        Self {
            lock: Some(lock),
            guard: None,
            store,
            checkable: false,
            token: None,
        }
    }
}

impl<L: Lock> FourTrips<L> {
    /// The lock held.
    fn held_lock(&self) -> &L {
        self.guard
            .as_ref()
            .and_then(|holding| holding.0.as_deref())
            .expect("the lock is held inside")
    }

    /// Gives the lock back, if it is held.
    async fn give_back(&mut self) -> Result<bool, LockError> {
        match self.guard.take() {
            Some(holding) => holding.release().await,
            None => Ok(false),
        }
    }

    /// What a holder does with the lock before it enters: confirm it with the lock store's
    /// replicas, abandon it if the request asked to, take a fencing token; then enter.
    async fn held(&mut self, d: &Deduction, shard: &ShardKeys) -> Result<Entry, AppError> {
        if self.store == LockStore::Instance && !d.lock_confirmed(shard).await? {
            return Ok(Entry::Out(Outcome::LockUnconfirmed));
        }
        if d.knobs.abandons() {
            if let Some(holding) = self.guard.take() {
                holding.abandon();
            }
            return Ok(Entry::Out(Outcome::Abandoned));
        }
        // A lock store that issues tokens (ZooKeeper's zxid) issues them; otherwise the
        // stock store does.
        self.token = match self.held_lock().fencing_token() {
            Some(token) if d.knobs.fence() => Some(token),
            Some(_) => None,
            None => d.fencing_token(shard).await?,
        };
        // The lock hash can be checked in the commit only where it lives beside the stock.
        self.checkable = self.store == LockStore::Instance
            && d.app.locks_beside_stock
            && self.held_lock().holder_is_a_hash_field();
        let stop = d.knobs.stop_before_commit().unwrap_or_default();
        let stay = d.knobs.work() + stop + INSIDE_MARGIN;
        let note = d.entering(self.held_lock().lease());
        let (stock, _overlap, traced): (Option<i64>, i64, bool) =
            scripts::enter(shard, &d.holder, stay, self.token, &note)
                .invoke_async(&mut d.redis())
                .await?;
        d.timeline.set_traced(traced);
        d.timeline.entered_now();
        Ok(Entry::Inside { stock })
    }
}

impl<L: Lock> Trips for FourTrips<L> {
    type Lock = L;

    fn lock(&self) -> &L {
        self.held_lock()
    }

    /// Acquire; then, holding the lock, the steps before entering ([`FourTrips::held`]) and
    /// the entry. Whatever keeps it from getting inside gives the lock back (but an
    /// abandoned lock, which the request asked to leave held).
    async fn enter(
        &mut self,
        d: &Deduction,
        shard: &ShardKeys,
        wait: Duration,
    ) -> Result<Entry, AppError> {
        let started = Instant::now();
        let lock = self.lock.take().expect("a lock is taken once");
        self.guard = lock.try_acquire_for(wait).await?.map(Holding::new);
        let acquired = self.guard.is_some();
        let metrics = &d.app.metrics;
        metrics.lock_acquired(d.variant.name(), acquired, started.elapsed());
        if !acquired {
            return Ok(Entry::Out(Outcome::LockBusy));
        }
        d.timeline.granted();
        let entry = self.held(d, shard).await;
        match &entry {
            Ok(Entry::Inside { .. } | Entry::Out(Outcome::Abandoned)) => {}
            _ => d.log_release(self.give_back().await),
        }
        entry
    }

    async fn leave(
        &mut self,
        d: &Deduction,
        shard: &ShardKeys,
        why: Leaving,
    ) -> Result<(), AppError> {
        d.leave(shard, why).await
    }

    async fn commit(
        &mut self,
        d: &Deduction,
        shard: &ShardKeys,
        order: &str,
    ) -> Result<Reply, AppError> {
        let credentials = Credentials {
            lock_holder: self.checkable.then(|| self.held_lock().holder()),
            token: self.token,
        };
        let sale = d.sale(shard, order);
        let reply = scripts::commit(&sale, StockWrite::Decrement, credentials)
            .invoke_async(&mut d.redis())
            .await?;
        d.answered();
        Ok(reply)
    }

    /// Released now — or, when the commit's answer is still unknown, once the sale is
    /// looked up (the next holder would read the stock before a late commit).
    async fn release(mut self, d: &Deduction, held: &Result<Outcome, AppError>) {
        if matches!(held, Ok(Outcome::Unknown { .. })) {
            let (variant, holder) = (d.variant, d.holder.clone());
            d.after_settled(Box::new(move || {
                Box::pin(async move {
                    let released = self.give_back().await;
                    log_release(variant, &holder, released);
                })
            }));
        } else {
            d.log_release(self.give_back().await);
        }
    }
}

impl Deduction {
    /// The lock with the request's `fault=pause_before_release`, when it asked for one.
    pub(super) fn pausing<L: Lock>(&self, lock: L) -> Paused<L> {
        Paused {
            lock,
            pause: self.knobs.pause_before_release(),
        }
    }
}
