//! `watchdog` — deduction under a Redisson-style reentrant lock whose lease a watchdog
//! renews until release; waiters sleep until a release message, or are handed the lock by
//! a holder of their own instance.
//!
//! Correct even when the work outlasts the lease: the watchdog keeps the lock, and the
//! commit is fenced on still holding it. A holder that dies stops renewing, and its lock
//! expires one lease later. With `lease_ms` no watchdog runs (as in Redisson); with
//! `fair=on` the lock goes in arrival order across instances (Redisson's fair lock).
//!
//! It runs the one lock sequence every lock variant runs (`section::under_lock`). When
//! the lock lives beside the stock, its trips (`TwoTrips`) cost a unit two round trips,
//! or one when the lock is handed over: the lock's try also enters the critical section
//! and reads the stock, and the commit also gives the lock back — or hands it to a waiter
//! of this instance and lets that waiter in, so that it starts its work the moment the
//! answer comes back. Otherwise (a lock store of its own, `fence=on`,
//! `--lock-wait-replicas`, a fault) its trips are the shared ones, each step a round trip
//! of its own.

use std::time::Duration;

use redis::{RedisError, Value};
use seckill_lock::watchdog::{Attempt, Released, sleep_for};
use seckill_lock::{Lease, Lock, LockError, WatchdogLock};
use tokio::time::Instant;
use uuid::Uuid;

use super::fault;
use super::section::{self, Entry, FourTrips, INSIDE_MARGIN, LockStore, Trips};
use super::{Deduction, Outcome, Spec};
use crate::error::AppError;
use crate::keys::ShardKeys;
use crate::knobs::{
    DEFAULT_LOCK_WAIT_MS, FAULT, FENCE, Kind, Knob, LEASE_MS, PAUSE_MS, WAIT_MS, WORK_MS,
};
use crate::scripts;
use crate::scripts::Leaving;
use crate::scripts::{Refusal, Reply};
use crate::store::RedisConn;
use crate::trace::Timeline;

/// `fair=on`: the lock in arrival order across instances, as Redisson's fair lock.
pub const FAIR: Knob = Knob {
    name: "fair",
    doc: "watchdog and segmented: on takes the lock in arrival order across instances (a \
          queue in Redis, as Redisson's fair lock); off (the default) is the unfair lock.",
    kind: Kind::Switch { default: false },
};

/// `handoff=off`: always release for everybody, never to a waiter of this instance.
pub const HANDOFF: Knob = Knob {
    name: "handoff",
    doc: "watchdog and segmented: on (the default) lets the holder hand the lock straight \
          to a waiter of its own instance; off always releases it for everybody, to compare.",
    kind: Kind::Switch { default: true },
};

/// `renew=on`: a watchdog renews an explicit `lease_ms` too.
pub const RENEW: Knob = Knob {
    name: "renew",
    doc: "watchdog and segmented, with lease_ms: on has the watchdog renew that lease every           third of it while the holder works (a short lease whose renewals the page's           timeline shows); off (the default) is Redisson's lock(leaseTime): no watchdog.",
    kind: Kind::Switch { default: false },
};

/// The knobs of a deduction under a watchdog lock (`watchdog` and `segmented`).
pub const KNOBS: &[Knob] = &[
    WORK_MS,
    LEASE_MS,
    WAIT_MS.defaulting_to(DEFAULT_LOCK_WAIT_MS),
    FAULT,
    PAUSE_MS,
    FENCE,
    FAIR,
    HANDOFF,
    RENEW,
    super::close_guard::GUARD,
];

pub static SPEC: Spec = Spec {
    name: "watchdog",
    summary: "Redisson's reentrant lock, its lease renewed by a watchdog: correct when the work outlasts the lease",
    color: "#1565c0",
    knobs: KNOBS,
    in_progression: true,
    splits_stock: false,
    whole_stock: true,
    stock_in_database: false,
    must_finish: true,
    counts_its_refusals: false,
    deduct: |d| Box::pin(deduct(d)),
};

async fn deduct(d: &Deduction) -> Result<Outcome, AppError> {
    deduct_from(d, &d.whole_stock(), d.knobs.wait()).await
}

/// One deduction from `shard` under its watchdog lock, waiting up to `wait` for it.
/// `segmented` calls it shard by shard.
pub(super) async fn deduct_from(
    d: &Deduction,
    shard: &ShardKeys,
    wait: Duration,
) -> Result<Outcome, AppError> {
    let lock = d
        .app
        .locks
        .lock_as(&shard.lock_name, &d.holder)
        .fair(d.knobs.switch(&FAIR))
        .with_lease(match (d.knobs.millis(&LEASE_MS), d.knobs.switch(&RENEW)) {
            (None, _) => Lease::Watched,
            (Some(lease), false) => Lease::Fixed(lease),
            (Some(lease), true) => Lease::Renewed(lease),
        })
        .expecting_to_hold(d.knobs.work() + INSIDE_MARGIN)
        .handing_off(d.knobs.switch(&HANDOFF))
        // Beside the stock, the lock issues the fencing token itself, in its take (where
        // the lock lives apart, the stock store issues it, from a counter of the same name).
        .fenced(d.knobs.fence() && d.app.locks_beside_stock);
    if fits_in_two_trips(d) {
        let lock = TwoTrips {
            lock,
            given_back: false,
        };
        section::under_lock(d, shard, lock, wait).await
    } else {
        let lock = FourTrips::new(fault::pausing(d, lock), LockStore::Instance);
        section::under_lock(d, shard, lock, wait).await
    }
}

/// Whether the lock can be taken and given back in the same scripts that enter and commit
/// the critical section: the lock must live beside the stock (one slot), and nothing may
/// need a step of its own between them — a fencing token issued after the lock, the lock
/// store's replicas asked, a fault injected.
fn fits_in_two_trips(d: &Deduction) -> bool {
    d.app.locks_beside_stock
        && !d.knobs.fence()
        && d.app.lock_confirmations.is_none()
        && d.knobs.fault().is_none()
}

/// The watchdog lock beside the stock, in two round trips: the lock's try also enters the
/// critical section and reads the stock (`lock_enter.lua`), and the commit — or the leave
/// — also gives the lock back, or hands it to a waiter of this instance and lets that
/// waiter in (`commit_release.lua`), so that it starts its work the moment the answer
/// comes back.
pub(super) struct TwoTrips {
    lock: WatchdogLock<RedisConn>,
    /// The commit or the leave asked for the lock back (its hold is given up whatever the
    /// answer: a lost one is the script's or the lease's to settle).
    given_back: bool,
}

impl TwoTrips {
    /// Sells (`order`, with `sells`) or only leaves, and gives the lock back or hands it
    /// on, in one script. `None` when this handle no longer held the lock: nothing sent.
    async fn commit_release(
        &mut self,
        d: &Deduction,
        shard: &ShardKeys,
        order: &str,
        sells: bool,
    ) -> Result<Option<Reply>, AppError> {
        self.given_back = true;
        let successor =
            Timeline::handed_over(&d.app.settings.instance, d.variant.name(), &d.holder);
        let left = self
            .lock
            .release_with(|release| {
                let sale = d.sale(shard, order);
                let script = scripts::commit_release(&sale, sells, &release, &successor);
                let mut conn = d.redis();
                async move {
                    let mut answer: Vec<Value> = script.invoke_async(&mut conn).await?;
                    d.lost.answered();
                    let for_successor = Value::Array(answer.split_off(2.min(answer.len())));
                    let (left, code): (Reply, Option<i64>) =
                        redis::from_redis_value(Value::Array(answer)).map_err(RedisError::from)?;
                    Ok::<_, LockError>((Some(left), Released::from_code(code, for_successor)))
                }
            })
            .await?;
        Ok(left)
    }
}

impl Trips for TwoTrips {
    type Lock = WatchdogLock<RedisConn>;

    fn lock(&self) -> &Self::Lock {
        &self.lock
    }

    async fn enter(
        &mut self,
        d: &Deduction,
        shard: &ShardKeys,
        wait: Duration,
    ) -> Result<Entry, AppError> {
        let stay = d.knobs.work() + INSIDE_MARGIN;
        let (lease, fair) = (self.lock.lease(), self.lock.is_fair());
        let attempt = || {
            let note = d.entering(Some(lease));
            let script = scripts::lock_enter(shard, &d.holder, lease, fair, stay, &note);
            let mut conn = d.redis();
            async move {
                let (taken, stock, overlap, traced): (i64, Value, Value, Value) =
                    script.invoke_async(&mut conn).await?;
                if taken == 1 {
                    d.timeline.entered_now();
                }
                Ok::<_, LockError>(if taken == 1 {
                    Attempt::Acquired(Value::Array(vec![stock, overlap, traced]))
                } else {
                    Attempt::Held(sleep_for(
                        redis::from_redis_value(stock).map_err(RedisError::from)?,
                    ))
                })
            }
        };
        let started = Instant::now();
        let entered = self.lock.acquire_with(wait, attempt).await?;
        d.app
            .metrics
            .lock_acquired(d.variant.name(), entered.is_some(), started.elapsed());
        let Some(entered) = entered else {
            return Ok(Entry::Out(Outcome::LockBusy));
        };
        match inside(d, shard, entered, stay, lease).await {
            Ok(stock) => Ok(Entry::Inside { stock }),
            // Held, and not inside: given back.
            Err(err) => {
                section::log_release(d, self.lock.give_back().await);
                Err(err)
            }
        }
    }

    /// Sold out: leaves and gives the lock back (or hands it on) in one script. A lock the
    /// watchdog found lost leaves as every lock does (counted), and is given back after.
    async fn leave(
        &mut self,
        d: &Deduction,
        shard: &ShardKeys,
        why: Leaving,
    ) -> Result<(), AppError> {
        match why {
            Leaving::SoldOut => {
                let order = Uuid::now_v7().to_string();
                self.commit_release(d, shard, &order, false).await?;
                Ok(())
            }
            Leaving::LockLost => section::leave(d, shard, why).await,
        }
    }

    async fn commit(
        &mut self,
        d: &Deduction,
        shard: &ShardKeys,
        order: &str,
    ) -> Result<Reply, AppError> {
        let left = self.commit_release(d, shard, order, true).await?;
        // Not held any more as the release was asked for: nothing was sent.
        Ok(left.unwrap_or(Reply::Refused(Refusal::LockLost)))
    }

    /// Given back already by the commit or the leave (whose answer, if it was lost, the
    /// script itself or the lease settles); otherwise — no stock key, an error before the
    /// commit — given back here.
    async fn release(mut self, d: &Deduction, _held: &Result<Outcome, AppError>) {
        if !self.given_back {
            section::log_release(d, self.lock.give_back().await);
        }
    }
}

/// The stock read on entering, once the lock is held: from the try's own script, or from
/// the release that handed the lock over and let this holder in (it entered just now) —
/// or, handed over by a release that did not let it in (a holder of the same lock on the
/// shared trips, `Value::Nil`), read by entering now.
async fn inside(
    d: &Deduction,
    shard: &ShardKeys,
    entered: Value,
    stay: Duration,
    lease: Duration,
) -> Result<Option<i64>, AppError> {
    let (stock, traced) = if entered == Value::Nil {
        let note = d.entering(Some(lease));
        // The sale's epoch is not needed: the commit checks the lock, beside the stock.
        let (stock, _overlap, traced, _epoch): (Option<i64>, i64, bool, Option<String>) =
            scripts::enter(shard, &d.holder, stay, None, &note)
                .invoke_async(&mut d.redis())
                .await?;
        d.timeline.entered_now();
        (stock, traced)
    } else {
        let (stock, _overlap, traced): (Option<i64>, i64, bool) =
            redis::from_redis_value(entered).map_err(RedisError::from)?;
        d.timeline.entered_by_now();
        (stock, traced)
    };
    d.timeline.set_traced(traced);
    Ok(stock)
}
