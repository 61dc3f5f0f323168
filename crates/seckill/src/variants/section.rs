//! The one lock sequence every lock variant runs, [`under_lock`]: take the lock and
//! enter, the seed's business logic inside (read the stock, check it, work, take one unit)
//! with the audit around it, give the lock back — and its trips for any lock,
//! [`FourTrips`]. The watchdog lock beside the stock has trips of its own
//! (`watchdog::TwoTrips`); everything a sale's answer comes to is `sale.rs`'s.

use std::sync::atomic::Ordering;
use std::time::Duration;

use redis::AsyncCommands;
use seckill_lock::{Lock, LockError};
use tokio::time::Instant;
use uuid::Uuid;

use super::fault;
use super::holding::Holding;
use super::{Deduction, Outcome, lost};
use crate::error::AppError;
use crate::keys::ShardKeys;
use crate::scripts::{self, Credentials, Leaving, Reply, StockWrite};
use crate::store::Confirmed;
use crate::timer;

pub use crate::knobs::INSIDE_MARGIN;

/// How a lock variant's critical section reaches Redis: the one thing the lock variants'
/// sequences differ in ([`under_lock`] is the sequence). [`FourTrips`] takes the
/// lock, enters, commits and gives the lock back in four round trips, for every lock and
/// lock store; the watchdog lock beside the stock does it in two (`watchdog::TwoTrips`:
/// the lock's try enters, the commit gives the lock back or hands it on).
pub(super) trait Trips: Send {
    /// The lock held, for what the section asks of it: its lease, its renewals, whether it
    /// knows itself lost.
    type Lock: Lock;

    fn lock(&self) -> &Self::Lock;

    /// Takes the lock, waiting up to `wait`, and enters `shard`'s critical section.
    fn enter(
        &mut self,
        d: &Deduction,
        shard: &ShardKeys,
        wait: Duration,
    ) -> impl Future<Output = Result<Entry, AppError>> + Send;

    /// Leaves without selling, for `why`.
    fn leave(
        &mut self,
        d: &Deduction,
        shard: &ShardKeys,
        why: Leaving,
    ) -> impl Future<Output = Result<(), AppError>> + Send;

    /// Takes one unit as sale `order`, records it and leaves: what the script said.
    fn commit(
        &mut self,
        d: &Deduction,
        shard: &ShardKeys,
        order: &str,
    ) -> impl Future<Output = Result<Reply, AppError>> + Send;

    /// Gives the lock back, if the leave or the commit did not, once what the section
    /// came to is known (`held`, its lost answer looked up).
    fn release(
        self,
        d: &Deduction,
        held: &Result<Outcome, AppError>,
    ) -> impl Future<Output = ()> + Send;
}

/// What taking the lock and entering came to.
pub(super) enum Entry {
    /// Inside, holding the lock, with the stock read there (`None`: no stock key).
    Inside { stock: Option<i64> },
    /// Not inside, and holding nothing: the lock busy, not confirmed, or abandoned.
    Out(Outcome),
}

/// The one lock sequence, whatever the lock and however it reaches Redis (`trips`): take
/// the lock and enter `shard`'s critical section (waiting up to `wait`), read the stock,
/// check it, work, take one unit and leave — then give the lock back, whatever the section
/// came to (an error included), as the seed's `finally` does; a commit whose answer was
/// lost is looked up first ([`lost::learn`]), since it may still run and must find the
/// lock held when it does.
pub(super) async fn under_lock(
    d: &Deduction,
    shard: &ShardKeys,
    mut trips: impl Trips,
    wait: Duration,
) -> Result<Outcome, AppError> {
    d.timeline.waiting();
    let stock = match trips.enter(d, shard, wait).await? {
        Entry::Inside { stock } => stock,
        Entry::Out(outcome) => return Ok(outcome),
    };
    let held = critical_section(d, shard, &mut trips, stock).await;
    let held = lost::learn(d, held).await;
    trips.release(d, &held).await;
    held
}

/// The seed's business logic, inside the lock: check the stock read on entering, work,
/// take one unit and leave.
async fn critical_section(
    d: &Deduction,
    shard: &ShardKeys,
    trips: &mut impl Trips,
    stock: Option<i64>,
) -> Result<Outcome, AppError> {
    let Some(stock) = stock else {
        return Err(d.not_for_sale().await);
    };
    if stock <= 0 {
        trips.leave(d, shard, Leaving::SoldOut).await?;
        return Ok(Outcome::SoldOut { remaining: stock });
    }
    work(d).await;
    d.timeline.renewed(trips.lock().renewals());
    if trips.lock().is_lost() {
        // The holder knows its lock is gone: it must not commit.
        trips.leave(d, shard, Leaving::LockLost).await?;
        return Ok(Outcome::LockLost);
    }
    if let Some(stop) = d.knobs.stop_before_commit() {
        fault::stop_the_world(d, stop).await;
    }
    let order = Uuid::now_v7().to_string();
    match trips.commit(d, shard, &order).await? {
        Reply::Units(remaining) => Ok(d.sold(shard, order, remaining).await),
        Reply::Refused(why) => d.refused(why).await,
    }
}

/// The business time the seeds spend inside the critical section: `work_ms`, to the
/// tens of microseconds ([`timer`]), and measured.
pub(super) async fn work(d: &Deduction) {
    let work = d.knobs.work();
    if work.is_zero() {
        return;
    }
    let started = tokio::time::Instant::now();
    timer::sleep(work).await;
    let took = u64::try_from(started.elapsed().as_micros()).unwrap_or(u64::MAX);
    d.worked_us.store(took, Ordering::Relaxed);
}

/// Leaves `shard`'s critical section without selling, for `why`.
pub(super) async fn leave(d: &Deduction, shard: &ShardKeys, why: Leaving) -> Result<(), AppError> {
    let note = d.timeline.leaving();
    let _: i64 = scripts::leave(shard, &d.holder, why, &note)
        .invoke_async(&mut d.redis())
        .await?;
    Ok(())
}

/// A release by `d`'s holder that did not go as it should, in the log.
pub(super) fn log_release(d: &Deduction, released: Result<bool, LockError>) {
    log_holders_release(d.variant, &d.holder, released);
}

/// A release by `holder` of `variant` that did not go as it should, in the log.
fn log_holders_release(variant: super::Variant, holder: &str, released: Result<bool, LockError>) {
    match released {
        Ok(true) => {}
        Ok(false) => tracing::warn!(
            %variant,
            holder,
            "lock was no longer ours at release: the work outlasted it"
        ),
        Err(err) => tracing::warn!(
            %variant,
            holder,
            error = %err,
            "lock release failed; it stays until it expires (setnx: until deleted by hand)"
        ),
    }
}

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
    /// The sale's epoch its entry read: the commit sells only in that sale.
    epoch: Option<String>,
}

impl<L: Lock> FourTrips<L> {
    pub(super) fn new(lock: L, store: LockStore) -> Self {
        Self {
            lock: Some(lock),
            guard: None,
            store,
            checkable: false,
            token: None,
            epoch: None,
        }
    }
}

impl<L: Lock> FourTrips<L> {
    /// The lock held.
    fn held_lock(&self) -> &L {
        self.guard
            .as_ref()
            .and_then(Holding::lock)
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
        if self.store == LockStore::Instance && !lock_confirmed(d, shard).await? {
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
            None => fencing_token(d, shard).await?,
        };
        // The lock hash can be checked in the commit only where it lives beside the stock.
        self.checkable = self.store == LockStore::Instance
            && d.app.locks_beside_stock
            && self.held_lock().holder_is_a_hash_field();
        let stop = d.knobs.stop_before_commit().unwrap_or_default();
        let stay = d.knobs.work() + stop + INSIDE_MARGIN;
        let note = d.entering(self.held_lock().lease());
        let (stock, _overlap, traced, epoch): (Option<i64>, i64, bool, Option<String>) =
            scripts::enter(shard, &d.holder, stay, self.token, &note)
                .invoke_async(&mut d.redis())
                .await?;
        self.epoch = epoch;
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
        self.guard = match lock.try_acquire_for(wait).await {
            Ok(guard) => guard.map(Holding::new),
            // Handed the lock, and lost it before its fencing token was issued: not held,
            // nothing entered, as when the wait runs out.
            Err(LockError::Lost) => None,
            Err(err) => return Err(err.into()),
        };
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
            _ => log_release(d, self.give_back().await),
        }
        entry
    }

    async fn leave(
        &mut self,
        d: &Deduction,
        shard: &ShardKeys,
        why: Leaving,
    ) -> Result<(), AppError> {
        leave(d, shard, why).await
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
            epoch: self.epoch.as_deref(),
        };
        let sale = d.sale(shard, order);
        let reply = scripts::commit(&sale, StockWrite::Decrement, credentials)
            .invoke_async(&mut d.redis())
            .await?;
        d.lost.answered();
        Ok(reply)
    }

    /// Released now — or, when the commit's answer is still unknown, once the sale is
    /// looked up (the next holder would read the stock before a late commit).
    async fn release(mut self, d: &Deduction, held: &Result<Outcome, AppError>) {
        if matches!(held, Ok(Outcome::Unknown { .. })) {
            let (variant, holder) = (d.variant, d.holder.clone());
            d.lost.after_settled(Box::new(move || {
                Box::pin(async move {
                    let released = self.give_back().await;
                    log_holders_release(variant, &holder, released);
                })
            }));
        } else {
            log_release(d, self.give_back().await);
        }
    }
}

/// With `fence=on`, a fencing token for a holder that has just taken `shard`'s lock,
/// from a lock that issues none itself: the next number of the lock's token counter
/// (`<lock>:token`, the one a fenced watchdog lock's take increments), kept in the stock
/// store. The stock store issues it because the stock store is what checks it: the
/// counter and the highest token seen sit on the shard's slot, so whatever happens to
/// the lock store (a failover that forgets a lock), the same token is never handed out
/// twice while the stock remembers tokens; and a reset, which forgets the tokens seen,
/// leaves the counter to go on growing.
async fn fencing_token(d: &Deduction, shard: &ShardKeys) -> Result<Option<i64>, AppError> {
    if !d.knobs.fence() {
        return Ok(None);
    }
    // The lock's own token counter, which a fenced watchdog lock's take increments too:
    // one sequence per lock, whichever variant draws from it.
    let token: i64 = d.redis().incr(shard.lock_keys().token(), 1).await?;
    Ok(Some(token))
}

/// With `--lock-wait-replicas`, whether enough replicas of the lock store have the
/// lock just taken on `shard` (Redisson's `checkLockSyncedSlaves`). A confirmation that
/// cannot be asked now (every connection for it in use) is no confirmation.
async fn lock_confirmed(d: &Deduction, shard: &ShardKeys) -> Result<bool, AppError> {
    let Some(confirmations) = &d.app.lock_confirmations else {
        return Ok(true);
    };
    Ok(confirmations.confirm(&shard.confirm).await? == Confirmed::Yes)
}
