//! `redlock` — the lock taken on a majority of 3 or 5 independent Redis masters
//! (`--redlock-urls`), as the Redis docs describe Redlock; the stock stays in the stock
//! store.
//!
//! Correct while a majority of the lock servers is up and keeps its data; losing a
//! minority changes nothing. With no `ttl_ms` the lock is extended by quorum while the
//! work runs, and a holder whose extension missed the quorum does not commit (`503
//! lock_lost`). With `ttl_ms` shorter than the work, the lock expires under its holder as
//! the token lock's does.

use super::{Deduction, Guard, Outcome};
use crate::error::AppError;

pub async fn deduct(d: &Deduction) -> Result<Outcome, AppError> {
    let Some(redlock) = &d.redlock else {
        return Err(AppError::NotConfigured(
            "redlock has no servers: start the instance with --redlock-urls (3 or 5)".into(),
        ));
    };
    let shard = d.whole_stock();
    let lease = d.locks.default_lease();
    let ttl = d.knobs.ttl.unwrap_or(lease);
    let mut lock = redlock.lock_with_token(&shard.lock, ttl, d.knobs.ttl.is_none(), &d.holder);
    if !d.acquire(lock.try_lock(d.knobs.wait)).await? {
        return Ok(Outcome::LockBusy);
    }
    if d.knobs.abandons() {
        lock.abandon();
        return Ok(Outcome::Abandoned);
    }
    let token = d.fencing_token(&shard).await?;
    let lost = || lock.is_lost();
    let guard = Guard {
        owner: None,
        token,
        lost: Some(&lost),
    };
    let result = d.critical_section(&shard, guard).await;
    d.log_release(lock.unlock().await.map_err(Into::into));
    result
}
