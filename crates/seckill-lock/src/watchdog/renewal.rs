//! The watchdog itself: the task that keeps a held lock's lease alive.

use std::sync::Arc;
use std::time::{Duration, Instant};

use super::waiters::Shared;
use crate::watch::{Watch, retry_pause};
use crate::{Connection, RENEWALS_KEPT, millis, scripts};

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
    let mut pause = lease / 3;
    loop {
        tokio::time::sleep(pause).await;
        pause = lease / 3;
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
                watch.found_lost();
                shared.counters.lost_lock();
                tracing::warn!(%key, %holder, "watchdog found the lock gone: the holder lost it");
                return;
            }
            // Redis away for a moment: tried again soon ([`retry_pause`]). If Redis stays
            // away past the lease, the lease's end says lost, and the next try that
            // reaches Redis finds the lock gone.
            Err(err) => {
                tracing::warn!(%key, error = %err, "lease renewal failed; trying again soon");
                pause = retry_pause(lease);
            }
        }
    }
}
