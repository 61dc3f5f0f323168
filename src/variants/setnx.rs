//! `setnx` — SETNX a lock with no TTL, fail fast when held, check and DECR, DEL in a finally.
//!
//! Correct while nothing fails. A holder that dies before its DEL leaves the lock held
//! forever (every later request is 429), and the DEL removes whoever holds the lock.

use super::{Deduction, Outcome};
use crate::error::AppError;
use crate::lock::SetnxLock;

pub async fn deduct(d: &Deduction) -> Result<Outcome, AppError> {
    let shard = d.whole_stock();
    let mut lock = SetnxLock::new(d.redis.clone(), &shard.lock, &d.holder);
    if !d.acquire(lock.try_lock()).await? {
        return Ok(Outcome::LockBusy);
    }
    if d.knobs.abandons() {
        return Ok(Outcome::Abandoned);
    }
    let result = d.critical_section(&shard, None).await;
    // The seed's `finally`: released whatever the critical section came to.
    if let Some(pause) = d.knobs.pause_before_release() {
        tokio::time::sleep(pause).await;
    }
    d.log_release(lock.unlock().await.map(|()| true).map_err(Into::into));
    result
}
