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
}

impl Watch {
    pub(super) fn is_lost(&self) -> bool {
        self.lost.load(Ordering::Acquire)
    }

    /// A new hold: not lost, nothing renewed yet.
    pub(super) fn start(&self) {
        self.lost.store(false, Ordering::Release);
        self.renewals().clear();
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
        let renewed: Result<i64, _> = scripts::WATCHDOG_RENEW
            .key(&key)
            .arg(millis(lease).max(1))
            .arg(&holder)
            .invoke_async(&mut conn)
            .await;
        match renewed {
            Ok(1) => {
                shared.counters.renewal();
                let mut renewed = watch.renewals();
                if renewed.len() < RENEWALS_KEPT {
                    renewed.push(Instant::now());
                }
            }
            Ok(_) => {
                watch.lost.store(true, Ordering::Release);
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
