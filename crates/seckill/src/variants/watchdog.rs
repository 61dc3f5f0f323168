//! `watchdog` — deduction under a Redisson-style reentrant lock whose lease a watchdog
//! renews until unlock; waiters sleep until an unlock message, or are handed the lock by a
//! holder of their own instance.
//!
//! Correct even when the work outlasts the lease: the watchdog keeps the lock, and the
//! commit is fenced on still holding it. A holder that dies stops renewing, and its lock
//! expires one lease later. With `lease_ms` no watchdog runs (as in Redisson); with
//! `fair=on` the lock goes in arrival order across instances (Redisson's fair lock).
//!
//! When the lock lives beside the stock, a unit costs two round trips, or one when the
//! lock is handed over: the lock's try also enters the critical section and reads the
//! stock, and the commit also gives the lock back — or hands it to a waiter of this
//! instance and lets that waiter in, so that it starts its work the moment the answer
//! comes back. Otherwise (a lock store of its own, `fence=on`, `--lock-wait-replicas`, a
//! fault) each step is a round trip of its own.

use std::time::Duration;

use redis::{RedisError, ScriptInvocation, Value};
use tokio::time::Instant;
use uuid::Uuid;

use super::{Deduction, Guard, INSIDE_MARGIN, Outcome, commit_keys_and_args};
use crate::error::AppError;
use crate::keys::ShardKeys;
use crate::lock::watchdog::{Attempt, FAIR_PATIENCE, Release, Released, sleep_for};
use crate::lock::{LockError, WatchdogLock};
use crate::scripts;

pub async fn deduct(d: &Deduction) -> Result<Outcome, AppError> {
    deduct_from(d, &d.whole_stock(), d.knobs.wait).await
}

/// One deduction from `shard` under its watchdog lock, waiting up to `wait` for it.
/// `segmented` calls it shard by shard.
pub(super) async fn deduct_from(
    d: &Deduction,
    shard: &ShardKeys,
    wait: Duration,
) -> Result<Outcome, AppError> {
    let stay = d.knobs.work + INSIDE_MARGIN;
    let mut lock = d
        .locks
        .lock(&shard.lock, &shard.lock_channel, &d.holder)
        .expecting_to_hold(stay)
        .handing_off(d.knobs.handoff);
    if d.knobs.fair {
        lock = lock.fair(&shard.lock_queue, &shard.lock_waiting);
    }
    if d.in_one_trip() {
        in_two_trips(d, shard, wait, lock).await
    } else {
        step_by_step(d, shard, wait, lock).await
    }
}

/// Lock and enter in one script, commit and release (or hand over) in another.
async fn in_two_trips(
    d: &Deduction,
    shard: &ShardKeys,
    wait: Duration,
    mut lock: WatchdogLock,
) -> Result<Outcome, AppError> {
    let stay = d.knobs.work + INSIDE_MARGIN;
    let lease = d.knobs.lease.unwrap_or(d.locks.default_lease());
    let fair = lock.is_fair();
    let attempt = || {
        let script = lock_enter_script(shard, &d.holder, lease, fair, stay);
        let mut conn = d.redis.clone();
        async move {
            let (taken, stock, overlap): (i64, Value, Value) =
                script.invoke_async(&mut conn).await?;
            Ok::<_, LockError>(if taken == 1 {
                Attempt::Acquired(Value::Array(vec![stock, overlap]))
            } else {
                Attempt::Held(sleep_for(
                    redis::from_redis_value(stock).map_err(RedisError::from)?,
                ))
            })
        }
    };
    let started = Instant::now();
    let entered = lock
        .try_lock_with(Some(wait), d.knobs.lease, attempt)
        .await?;
    d.metrics
        .lock_acquired(d.variant, entered.is_some(), started.elapsed());
    let Some(entered) = entered else {
        return Ok(Outcome::LockBusy);
    };
    let (stock, _overlap): (Option<i64>, i64) =
        redis::from_redis_value(entered).map_err(RedisError::from)?;

    let sells = stock.is_some_and(|units| units > 0);
    if sells {
        d.work().await;
    }
    let order = Uuid::now_v7().to_string();
    let left = lock
        .unlock_with(|release| {
            let script = commit_release_script(
                shard,
                &d.holder,
                &order,
                &d.instance,
                d.variant.name(),
                sells,
                &release,
            );
            let mut conn = d.redis.clone();
            async move {
                let mut answer: Vec<Value> = script.invoke_async(&mut conn).await?;
                let for_successor = Value::Array(answer.split_off(2.min(answer.len())));
                let (left, code): (i64, Option<i64>) =
                    redis::from_redis_value(Value::Array(answer)).map_err(RedisError::from)?;
                Ok::<_, LockError>((Some(left), Released::from_code(code, for_successor)))
            }
        })
        .await?;
    match (left, stock) {
        (None, _) => Ok(Outcome::LockLost),
        (Some(-2), _) | (_, None) => Err(d.not_for_sale().await),
        (Some(-3), _) => Ok(Outcome::LockLost),
        (Some(remaining), Some(_)) if !sells => Ok(Outcome::SoldOut { remaining }),
        (Some(remaining), Some(_)) => Ok(d.sold(shard, order, remaining).await),
    }
}

/// Each step a round trip of its own: lock, (confirm, token), enter, commit, unlock.
async fn step_by_step(
    d: &Deduction,
    shard: &ShardKeys,
    wait: Duration,
    mut lock: WatchdogLock,
) -> Result<Outcome, AppError> {
    if !d.acquire(lock.try_lock(wait, d.knobs.lease)).await? {
        return Ok(Outcome::LockBusy);
    }
    if !d.lock_confirmed(&shard.lock).await? {
        d.log_release(lock.unlock().await.map_err(Into::into));
        return Ok(Outcome::LockUnconfirmed);
    }
    if d.knobs.abandons() {
        lock.abandon();
        return Ok(Outcome::Abandoned);
    }
    let token = d.fencing_token(shard).await?;
    let guard = Guard {
        owner: Some(lock.owner()),
        token,
        lost: None,
    };
    let result = d.critical_section(shard, guard).await;
    if let Some(pause) = d.knobs.pause_before_release() {
        tokio::time::sleep(pause).await;
    }
    d.log_release(lock.unlock().await.map_err(Into::into));
    result
}

/// `lock_enter.lua` for `owner` on `shard`'s lock: one try of [`in_two_trips`], which
/// enters the critical section once the lock is taken (`stay`: how long it may be inside).
pub fn lock_enter_script(
    shard: &ShardKeys,
    owner: &str,
    lease: Duration,
    fair: bool,
    stay: Duration,
) -> ScriptInvocation<'static> {
    let mut script = scripts::LOCK_ENTER.prepare_invoke();
    script
        .key(&shard.lock)
        .key(&shard.lock_channel)
        .key(&shard.lock_queue)
        .key(&shard.lock_waiting)
        .key(&shard.stock)
        .key(&shard.inside)
        .key(&shard.audit)
        .key(&shard.fence)
        .arg(millis(lease))
        .arg(owner)
        .arg(if fair { "fair" } else { "unfair" })
        .arg(millis(FAIR_PATIENCE))
        .arg(millis(stay));
    script
}

/// `commit_release.lua`: `holder` leaves `shard`'s critical section — selling a unit as
/// `order` when `sells`, otherwise just leaving — and gives the lock back as `release`
/// says (to its successor, when it names one).
pub fn commit_release_script(
    shard: &ShardKeys,
    holder: &str,
    order: &str,
    instance: &str,
    variant: &str,
    sells: bool,
    release: &Release,
) -> ScriptInvocation<'static> {
    let successor = release.successor.as_ref();
    let mut script = scripts::COMMIT_RELEASE.prepare_invoke();
    commit_keys_and_args(&mut script, shard, holder, order, instance, variant);
    script
        .key(&shard.lock_channel)
        .key(&shard.lock_queue)
        .key(&shard.lock_waiting)
        .arg(if sells { "decr" } else { "leave" })
        .arg(millis(release.lease))
        .arg(if release.fair { "fair" } else { "unfair" })
        .arg(successor.map_or("", |s| s.owner.as_str()))
        .arg(successor.map_or(0, |s| millis(s.lease)))
        .arg(successor.map_or(0, |s| millis(s.hold)));
    script
}

fn millis(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)
}
