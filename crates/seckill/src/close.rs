//! Closing a sale cleanly with a read-write lock (seed 002's Redisson `RReadWriteLock`).
//!
//! `POST /admin/close` marks a product closed (`closed` in its meta); after that, a
//! deduction that checks (`guard=check` or `guard=rw`) is answered 410 `closed`. The catch
//! is the gap between checking and selling: a deduction that checked "open" just before the
//! close can still sell after the close answered — the audit counts such sales
//! (`close.sold_after_close`, in the same script that sells, which finds `closed_at` among
//! the sale's terms it reads anyway).
//!
//! With `guard=rw`, a deduction holds the product's read lock from before its check to
//! after its sale — many deductions at once, as readers — and the close takes the write
//! lock: it waits for the readers in flight, marks the product closed, and gives the lock
//! back. When the close answers, every deduction that saw "open" has finished, and every
//! later one sees "closed": no sale completes after it. New readers wait while the close
//! is in line (see [`seckill_lock::rw`]), so a stream of buyers cannot hold a close off.
//!
//! This module is the admin's side, the close and the reopen; the deduction's side — the
//! `guard` knob, the check and the read lock — is `variants/close_guard.rs`.

use std::time::{Duration, Instant};

use redis::AsyncCommands;
use seckill_lock::{Lock, RwLock, Side};
use serde::Serialize;

use crate::error::AppError;
use crate::keys::{ProductId, ProductKeys};
use crate::outcome::Outcome;
use crate::state::AppState;

/// What a close came to.
#[derive(Debug, Serialize)]
pub struct Closed {
    pub outcome: &'static str,
    pub product: String,
    /// How long the close waited for the write lock: for the readers in flight.
    pub waited_ms: u64,
}

/// Takes the product's write lock (waiting up to `wait` for the readers in flight), marks
/// it closed, gives the lock back.
pub async fn close(
    state: &AppState,
    product: &ProductId,
    wait: Duration,
) -> Result<Closed, AppError> {
    let keys = ProductKeys::new(product);
    let exists: bool = state.store.conn().exists(&keys.meta).await?;
    if !exists {
        return Err(AppError::UnknownProduct(product.to_string()));
    }
    let holder = state.holders.next();
    let lease = Duration::from_millis(state.settings.limits.lock_lease_ms);
    let write = RwLock::new(
        state.store.conn(),
        keys.rw_keys(),
        &holder,
        Side::Write,
        lease,
    );
    let started = Instant::now();
    let Some(write) = write.try_acquire_for(wait).await? else {
        return Err(AppError::Conflict(format!(
            "product {product}: sales still held the read lock after {} ms; nothing closed",
            wait.as_millis()
        )));
    };
    let waited_ms = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX);
    // In the meta for `/stats` and the deductions' check; in the audit hash too, where the
    // selling scripts read their sale's terms, so that they count a sale after the close
    // without a command more.
    let at = seckill_lock::millis(wall_clock());
    let marked: Result<(), _> = redis::pipe()
        .hset(&keys.meta, crate::outcome::META_CLOSED, at)
        .ignore()
        .hset(&keys.audit, "closed_at", at)
        .ignore()
        .exec_async(&mut state.store.conn())
        .await;
    let released = write.release().await;
    marked?;
    released?;
    tracing::info!(%product, waited_ms, "sale closed");
    Ok(Closed {
        outcome: Outcome::CLOSED,
        product: product.to_string(),
        waited_ms,
    })
}

/// Opens a closed product's sale again.
pub async fn reopen(state: &AppState, product: &ProductId) -> Result<(), AppError> {
    let keys = ProductKeys::new(product);
    let exists: bool = state.store.conn().exists(&keys.meta).await?;
    if !exists {
        return Err(AppError::UnknownProduct(product.to_string()));
    }
    redis::pipe()
        .hdel(&keys.meta, crate::outcome::META_CLOSED)
        .ignore()
        .hdel(&keys.audit, "closed_at")
        .ignore()
        .exec_async(&mut state.store.conn())
        .await?;
    // Instances that flagged it sold out while it was closed ask the stock again.
    crate::admission::notify(&state.store, product).await;
    tracing::info!(%product, "sale reopened");
    Ok(())
}

fn wall_clock() -> Duration {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default()
}
