//! `setnx` — SETNX a lock with no TTL, fail fast when held, check and DECR, DEL in a finally.
//!
//! Correct while nothing fails. A holder that dies before its DEL leaves the lock held
//! forever (every later request is 429), and the DEL removes whoever holds the lock.

use seckill_lock::teaching::SetnxLock;

use super::fault;
use super::section::{self, FourTrips, LockStore};
use super::{Deduction, Outcome, Spec};
use crate::error::AppError;
use crate::knobs::{FAULT, FENCE, PAUSE_MS, WORK_MS};

pub static SPEC: Spec = Spec {
    name: "setnx",
    summary: "SETNX with no TTL, DEL in a finally: a dead holder deadlocks the product",
    color: "#6a1b9a",
    knobs: &[WORK_MS, FAULT, PAUSE_MS, FENCE],
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
    // The seed's `finally { DEL }`: whoever holds the lock by then.
    let lock = SetnxLock::new(d.lock_redis(), &shard.lock, &d.holder).releasing_blindly();
    // No wait: the seed fails fast when the lock is held.
    section::under_lock(
        d,
        &shard,
        FourTrips::new(fault::pausing(d, lock), LockStore::Instance),
        d.knobs.wait(),
    )
    .await
}
