//! `token` — `SET lock <token> NX PX ttl`, check and DECR, release by compare-and-delete.
//!
//! Correct while the work fits in the TTL. With `work_ms` longer than `ttl_ms` the lock
//! expires under its holder, a second holder gets in, and the audit counts the overlap.
//! With `fault=pause_before_release` it releases as the seed does — `GET`, compare, pause,
//! `DEL` — and deletes the lock of whoever took it during the pause.

use std::time::Duration;

use seckill_lock::TokenLock;

use super::section::{self, FourTrips, LockStore};
use super::{Deduction, Outcome, Spec};
use crate::error::AppError;
use crate::knobs::{FAULT, FENCE, PAUSE_MS, TTL_MS, WAIT_MS, WORK_MS};

/// The lock's TTL when a request names none (the seed's 30 s).
pub const DEFAULT_TTL: Duration = Duration::from_secs(30);

pub static SPEC: Spec = Spec {
    name: "token",
    summary: "SET NX PX with a token, compare-and-delete: a second holder once the work outlasts the TTL",
    color: "#ef6c00",
    knobs: &[WORK_MS, TTL_MS, WAIT_MS, FAULT, PAUSE_MS, FENCE],
    in_progression: true,
    splits_stock: false,
    whole_stock: true,
    stock_in_database: false,
    must_finish: true,
    counts_its_refusals: false,
    deduct: |d| Box::pin(deduct(d)),
};

async fn deduct(d: &Deduction) -> Result<Outcome, AppError> {
    let shard = d.whole_stock();
    let ttl = d.knobs.millis(&TTL_MS).unwrap_or(DEFAULT_TTL);
    // The seed's holder never asks whether its TTL ran out: it commits past it, and the
    // lesson counts the overlap (fencing, `fence=on`, is what refuses that commit).
    let mut lock = TokenLock::new(d.lock_redis(), &shard.lock, ttl, &d.holder).blind_to_its_ttl();
    if let Some(pause) = d.knobs.pause_before_release() {
        lock = lock.checking_then_deleting(pause);
    }
    section::under_lock(
        d,
        &shard,
        FourTrips::new(lock, LockStore::Instance),
        d.knobs.wait(),
    )
    .await
}
