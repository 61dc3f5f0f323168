//! `watchdog` — deduction under a Redisson-style reentrant lock whose lease a watchdog
//! renews until unlock; waiters sleep until an unlock message.
//!
//! Correct even when the work outlasts the lease: the watchdog keeps the lock, and the
//! commit is fenced on still holding it. A holder that dies stops renewing, and its lock
//! expires one lease later. With `lease_ms` no watchdog runs (as in Redisson).

use std::time::Duration;

use super::{Deduction, Guard, Outcome};
use crate::error::AppError;
use crate::keys::ShardKeys;

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
    let mut lock = d.locks.lock(&shard.lock, &shard.lock_channel, &d.holder);
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
