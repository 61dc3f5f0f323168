//! `setnx` — SETNX a lock with no TTL, fail fast when held, check and DECR, DEL in a finally.
//!
//! Correct while nothing fails. A holder that dies before its DEL leaves the lock held
//! forever (every later request is 429), and the DEL removes whoever holds the lock.

use super::{Deduction, Guard, Outcome};
use crate::error::AppError;
use crate::lock::SetnxLock;

pub async fn deduct(d: &Deduction) -> Result<Outcome, AppError> {
    let shard = d.whole_stock();
    let mut lock = SetnxLock::new(d.lock_redis.clone(), &shard.lock, &d.holder);
    if !d.acquire(lock.try_lock()).await? {
        return Ok(Outcome::LockBusy);
    }
    if !d.lock_confirmed(&shard.lock).await? {
        d.log_release(lock.unlock().await.map(|()| true).map_err(Into::into));
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
    // The seed's `finally`: released whatever the critical section came to.
    if let Some(pause) = d.knobs.pause_before_release() {
        tokio::time::sleep(pause).await;
    }
    d.log_release(lock.unlock().await.map(|()| true).map_err(Into::into));
    result
}
