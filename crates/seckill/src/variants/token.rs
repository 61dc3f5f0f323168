//! `token` — SET lock <uuid> NX PX ttl, check and DECR, release by compare-and-delete.
//!
//! Correct while the work fits in the TTL. With `work_ms` longer than `ttl_ms` the lock
//! expires under its holder, a second holder gets in, and the audit counts the overlap.

use super::{Deduction, Guard, Outcome};
use crate::error::AppError;
use crate::knobs::DEFAULT_TTL;
use crate::lock::TokenLock;

pub async fn deduct(d: &Deduction) -> Result<Outcome, AppError> {
    let shard = d.whole_stock();
    let ttl = d.knobs.ttl.unwrap_or(DEFAULT_TTL);
    let mut lock = TokenLock::with_token(d.lock_redis.clone(), &shard.lock, ttl, &d.holder);
    if !d.acquire(lock.try_lock(d.knobs.wait)).await? {
        return Ok(Outcome::LockBusy);
    }
    if !d.lock_confirmed(&shard.lock).await? {
        d.log_release(lock.unlock().await.map_err(Into::into));
        return Ok(Outcome::LockUnconfirmed);
    }
    if d.knobs.abandons() {
        return Ok(Outcome::Abandoned);
    }
    let token = d.fencing_token(&shard).await?;
    let guard = Guard {
        token,
        ..Guard::default()
    };
    let result = d.critical_section(&shard, guard).await;
    let released = match d.knobs.pause_before_release() {
        Some(pause) => lock.unlock_check_then_delete(pause).await,
        None => lock.unlock().await,
    };
    d.log_release(released.map_err(Into::into));
    result
}
