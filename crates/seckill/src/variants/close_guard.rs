//! The deduction's side of closing a sale (`crate::close` is the admin's): the `guard`
//! knob, and a deduction that minds a close — it checks that the product is open, and with
//! `guard=rw` holds the product's read lock from that check to its sale, so that a close
//! (the write lock) waits for it.

use std::time::Duration;

use redis::AsyncCommands;
use seckill_lock::{Lock, RwLock, Side};

use super::{Deduction, Outcome, lost};
use crate::error::AppError;
use crate::knobs::{DEFAULT_LOCK_WAIT_MS, Kind, Knob};

/// `guard`: whether, and how, a deduction minds a close.
pub const GUARD: Knob = Knob {
    name: "guard",
    doc: "watchdog and optimistic: check refuses the sale (410 closed) once /admin/close \
          closed the product, but a deduction that checked just before the close may still \
          sell after it; rw holds the product's read lock from the check to the sale, so \
          that the close waits for it and nothing sells after the close. Unset: no check.",
    kind: Kind::Choice {
        values: &["check", "rw"],
    },
};

/// A deduction that minds a close: with `guard=rw` under the product's read lock, it checks
/// that the product is open, then runs the variant.
pub(super) async fn guarded(d: &Deduction, rw: bool) -> Result<Outcome, AppError> {
    if !rw {
        return if_open(d).await;
    }
    let lease = Duration::from_millis(d.app.settings.limits.lock_lease_ms);
    let read = RwLock::new(d.redis(), d.product.rw_keys(), &d.holder, Side::Read, lease);
    // Readers wait only while a close is in line.
    let wait = if d.variant.takes("wait_ms") {
        d.knobs.wait()
    } else {
        Duration::from_millis(DEFAULT_LOCK_WAIT_MS)
    };
    let Some(read) = read.try_acquire_for(wait).await? else {
        return Ok(Outcome::LockBusy);
    };
    // A lost answer is looked up under the read lock: until it is known, the sale may
    // still run.
    let outcome = match if_open(d).await {
        Err(err) if err.answer_may_be_lost() => lost::learn(d, Err(err)).await,
        outcome => outcome,
    };
    if matches!(outcome, Ok(Outcome::Unknown { .. })) {
        // The sale's answer was lost and it may still run: a close must wait for it, so the
        // read lock (renewed meanwhile) is held until the sale is looked up.
        d.lost
            .after_settled(Box::new(move || Box::pin(release(read))));
    } else {
        release(read).await;
    }
    outcome
}

/// Gives a read lock back; one that fails expires with its lease.
async fn release<L: Lock>(read: seckill_lock::Guard<L>) {
    let holder = read.holder().to_owned();
    match read.release().await {
        Ok(true) => {}
        Ok(false) => tracing::warn!(holder, "read lock gone at release"),
        Err(err) => tracing::warn!(error = %err, "read lock release failed; it expires"),
    }
}

async fn if_open(d: &Deduction) -> Result<Outcome, AppError> {
    let closed: bool = d
        .redis()
        .hexists(&d.product.meta, crate::outcome::META_CLOSED)
        .await?;
    if closed {
        return Ok(Outcome::Closed);
    }
    (d.variant.spec().deduct)(d).await
}
