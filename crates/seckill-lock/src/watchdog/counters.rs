//! What an instance's watchdogs and waiters did.

use std::sync::atomic::{AtomicU64, Ordering};

/// What the watchdogs and waiters of one instance did, counted since it started. The
/// library counts; the caller exports (the service as Prometheus counters).
#[derive(Debug, Default)]
pub struct WatchdogCounters {
    renewals: AtomicU64,
    lost: AtomicU64,
    wakeups: AtomicU64,
    handoffs: AtomicU64,
    tries: AtomicU64,
    most_tries: AtomicU64,
    tries_without_reason: AtomicU64,
    subscription_losses: AtomicU64,
}

impl WatchdogCounters {
    /// Leases extended by a watchdog.
    pub fn renewals(&self) -> u64 {
        self.renewals.load(Ordering::Relaxed)
    }

    /// Watchdog ticks that found their lock gone: the holder lost it.
    pub fn lost(&self) -> u64 {
        self.lost.load(Ordering::Relaxed)
    }

    /// Waiters woken by a release message.
    pub fn wakeups(&self) -> u64 {
        self.wakeups.load(Ordering::Relaxed)
    }

    /// Locks handed by a holder straight to a waiter of the same instance.
    pub fn handoffs(&self) -> u64 {
        self.handoffs.load(Ordering::Relaxed)
    }

    /// Lock scripts sent by acquires: every try, the first included. Beside
    /// [`wakeups`](Self::wakeups) and [`handoffs`](Self::handoffs) it says whether waiters
    /// try only when there is reason to (a few tries per acquire, under any contention).
    pub fn tries(&self) -> u64 {
        self.tries.load(Ordering::Relaxed)
    }

    /// The most lock scripts one acquire sent, since the instance started.
    pub fn most_tries(&self) -> u64 {
        self.most_tries.load(Ordering::Relaxed)
    }

    /// Tries that had no reason: an acquire may try once, then once more per wake-up it
    /// received (a release message, a hand-off that fell through) and per nap that ran
    /// out; what it sent beyond that is counted here. Zero, unless a waiter spins.
    pub fn tries_without_reason(&self) -> u64 {
        self.tries_without_reason.load(Ordering::Relaxed)
    }

    /// Times the release subscription was lost — its connection dropped, or its server
    /// stopped answering the heartbeat's ping — and started again.
    pub fn subscription_losses(&self) -> u64 {
        self.subscription_losses.load(Ordering::Relaxed)
    }

    pub(super) fn subscription_lost(&self) {
        self.subscription_losses.fetch_add(1, Ordering::Relaxed);
    }

    pub(super) fn try_sent(&self) {
        self.tries.fetch_add(1, Ordering::Relaxed);
    }

    /// One acquire's account: `tries` sent, for `reasons` to try (the first, wake-ups and
    /// naps that ran out).
    pub(super) fn acquire_tried(&self, tries: u64, reasons: u64) {
        self.most_tries.fetch_max(tries, Ordering::Relaxed);
        let without = tries.saturating_sub(reasons);
        if without > 0 {
            self.tries_without_reason
                .fetch_add(without, Ordering::Relaxed);
        }
    }

    pub(super) fn renewal(&self) {
        self.renewals.fetch_add(1, Ordering::Relaxed);
    }

    pub(super) fn handoff(&self) {
        self.handoffs.fetch_add(1, Ordering::Relaxed);
    }

    pub(super) fn wakeup(&self) {
        self.wakeups.fetch_add(1, Ordering::Relaxed);
    }

    pub(super) fn lost_lock(&self) {
        self.lost.fetch_add(1, Ordering::Relaxed);
    }
}
