//! How a watchdog lock's lease is kept: one of a handle's options, set before its first take
//! ([`WatchdogLock::with_lease`](super::WatchdogLock::with_lease)).

use std::time::Duration;

/// How a watchdog lock's lease is kept
/// ([`WatchdogLock::with_lease`](super::WatchdogLock::with_lease)).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Lease {
    /// The instance's lease ([`WatchdogLocksBuilder::lease`](super::WatchdogLocksBuilder::lease)),
    /// renewed by a watchdog every third of it until release: Redisson's `lock()`.
    #[default]
    Watched,
    /// A lease of its own that nothing renews: the lock expires this long after it was
    /// taken, held or not (Redisson's `lock(leaseTime)`). A holder whose work runs longer
    /// [extends](crate::Guard::extend) it, or loses the lock.
    Fixed(Duration),
    /// A lease of its own, renewed by a watchdog every third of it until release: a short
    /// lease whose renewals a class can watch.
    Renewed(Duration),
}
