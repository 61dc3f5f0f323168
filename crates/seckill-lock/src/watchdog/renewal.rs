//! The watchdog itself: the task that keeps a held lock's lease alive.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::waiters::Shared;
use crate::{Connection, RENEWALS_KEPT, millis, scripts};

/// What a holder's watchdog tells it: that the lock is gone, and when it renewed it.
#[derive(Debug, Default)]
pub(super) struct Watch {
    lost: AtomicBool,
    renewed: Mutex<Vec<Instant>>,
    /// The lease as far as this holder knows it is still its own: from the moment the
    /// command that took (or last renewed) the lock was sent, one lease on.
    valid_until: Mutex<Option<Instant>>,
    /// Told when the lock is found lost or its lease moves on.
    changed: tokio::sync::Notify,
}

impl Watch {
    /// Lost: a tick found the lock gone, or the lease ran out since the last take or
    /// renewal this holder heard of — Redis away or not, the lock is no longer known to
    /// be its own.
    pub(super) fn is_lost(&self) -> bool {
        self.lost.load(Ordering::Acquire)
            || self.valid().is_some_and(|until| Instant::now() >= until)
    }

    /// Returns once [`is_lost`](Self::is_lost): at once if it is, when a tick finds the
    /// lock gone, or when the lease runs out unrenewed.
    pub(super) async fn lost(&self) {
        loop {
            let changed = self.changed.notified();
            tokio::pin!(changed);
            changed.as_mut().enable();
            if self.is_lost() {
                return;
            }
            let until = *self.valid();
            match until {
                Some(until) => {
                    tokio::select! {
                        () = changed => {}
                        () = tokio::time::sleep_until(until.into()) => {}
                    }
                }
                None => changed.await,
            }
        }
    }

    /// A new hold, taken by a command sent at `sent`, for `lease`: not lost, nothing
    /// renewed yet.
    pub(super) fn start(&self, sent: Instant, lease: Duration) {
        self.lost.store(false, Ordering::Release);
        self.renewals().clear();
        *self.valid() = sent.checked_add(lease);
        self.changed.notify_waiters();
    }

    /// The lease renewed by a command sent at `sent`.
    fn renewed_at(&self, sent: Instant, lease: Duration) {
        *self.valid() = sent.checked_add(lease);
        self.changed.notify_waiters();
    }

    fn valid(&self) -> std::sync::MutexGuard<'_, Option<Instant>> {
        // Held for a read or a write, never across an await.
        self.valid_until.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub(super) fn renewals(&self) -> std::sync::MutexGuard<'_, Vec<Instant>> {
        // Held for a push or a copy, never across an await.
        self.renewed.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// The watchdog: renews the lease every lease/3 until aborted, or until the lock is found
/// gone.
pub(super) async fn renew<C: Connection>(
    shared: Arc<Shared<C>>,
    lease: Duration,
    key: String,
    holder: String,
    watch: Arc<Watch>,
) {
    let mut conn = shared.conn.clone();
    loop {
        tokio::time::sleep(lease / 3).await;
        let sent = Instant::now();
        let renewed: Result<i64, _> = scripts::WATCHDOG_RENEW
            .key(&key)
            .arg(millis(lease).max(1))
            .arg(&holder)
            .invoke_async(&mut conn)
            .await;
        match renewed {
            Ok(1) => {
                watch.renewed_at(sent, lease);
                shared.counters.renewal();
                let mut renewed = watch.renewals();
                if renewed.len() < RENEWALS_KEPT {
                    renewed.push(Instant::now());
                }
            }
            Ok(_) => {
                watch.lost.store(true, Ordering::Release);
                watch.changed.notify_waiters();
                shared.counters.lost_lock();
                tracing::warn!(%key, %holder, "watchdog found the lock gone: the holder lost it");
                return;
            }
            // Redis away for a moment: try again next tick. If it stays away past the
            // lease, the next tick that reaches Redis finds the lock gone and says so.
            Err(err) => tracing::warn!(%key, error = %err, "lease renewal failed"),
        }
    }
}
