//! What a holder knows of its lease: a local deadline — from when the command that took or
//! last renewed the lock was sent, one lease on — past which the lock is lost, Redis away or
//! not; and the lock found gone. The watchdog lock's renewal and the read-write lock's keep
//! one each.

use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// What a holder's watchdog tells it: that the lock is gone, and when it renewed it.
#[derive(Debug, Default)]
pub(crate) struct Watch {
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
    ///
    /// Lost means lost: once it says so, it says so until the next take, whatever a late
    /// renewal answers after (the holder may have stopped trusting the lock already).
    pub(crate) fn is_lost(&self) -> bool {
        if self.lost.load(Ordering::Acquire) {
            return true;
        }
        let ran_out = self.valid().is_some_and(|until| Instant::now() >= until);
        if ran_out {
            self.lost.store(true, Ordering::Release);
        }
        ran_out
    }

    /// Returns once [`is_lost`](Self::is_lost): at once if it is, when a tick finds the
    /// lock gone, or when the lease runs out unrenewed.
    pub(crate) async fn lost(&self) {
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
    pub(crate) fn start(&self, sent: Instant, lease: Duration) {
        self.lost.store(false, Ordering::Release);
        self.renewals().clear();
        *self.valid() = sent.checked_add(lease);
        self.changed.notify_waiters();
    }

    /// The lock found gone: lost until the next take.
    pub(crate) fn found_lost(&self) {
        self.lost.store(true, Ordering::Release);
        self.changed.notify_waiters();
    }

    /// The lease renewed by a command sent at `sent`.
    pub(crate) fn renewed_at(&self, sent: Instant, lease: Duration) {
        *self.valid() = sent.checked_add(lease);
        self.changed.notify_waiters();
    }

    fn valid(&self) -> std::sync::MutexGuard<'_, Option<Instant>> {
        // Held for a read or a write, never across an await.
        self.valid_until.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub(crate) fn renewals(&self) -> std::sync::MutexGuard<'_, Vec<Instant>> {
        // Held for a push or a copy, never across an await.
        self.renewed.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// How soon a renewal that failed (Redis away for a moment) is tried again: a tenth of the
/// lease, at most a second, so that a long lease gets many tries before it runs out, not
/// two.
pub(crate) fn retry_pause(lease: Duration) -> Duration {
    (lease / 10).clamp(Duration::from_millis(10), Duration::from_secs(1))
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, Instant};

    use super::Watch;

    /// A hold whose lease ran out (as far as its holder knows) is lost, and stays lost when
    /// a late renewal comes back after: until the next take.
    #[test]
    fn lost_stays_lost_after_a_late_renewal() {
        let watch = Watch::default();
        let lease = Duration::from_millis(100);
        let taken = Instant::now() - Duration::from_secs(1);
        watch.start(taken, lease);
        assert!(watch.is_lost(), "the lease ran out a long time ago");
        watch.renewed_at(Instant::now(), lease);
        assert!(
            watch.is_lost(),
            "a late renewal does not make it held again"
        );
        watch.start(Instant::now(), Duration::from_secs(60));
        assert!(!watch.is_lost(), "a new take is a new hold");
    }
}
