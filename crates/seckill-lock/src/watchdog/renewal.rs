//! The watchdog itself: the task that keeps a held lock's lease alive.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use super::waiters::Shared;
use crate::{Connection, millis, scripts};

/// The watchdog: renews the lease every lease/3 until aborted, or until the lock is found
/// gone.
pub(super) async fn renew<C: Connection>(
    shared: Arc<Shared<C>>,
    key: String,
    holder: String,
    lost: Arc<AtomicBool>,
) {
    let lease = shared.lease;
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
            Ok(1) => shared.counters.renewal(),
            Ok(_) => {
                lost.store(true, Ordering::Release);
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
