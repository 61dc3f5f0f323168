//! How a watchdog lock is taken: the options of a handle, set before its first take.

use std::time::Duration;

use super::WatchdogLock;
use crate::Connection;

/// How a watchdog lock's lease is kept ([`WatchdogLock::with_lease`]).
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

impl<C: Connection> WatchdogLock<C> {
    /// Takes the lock fairly (`fair`): in the order waiters first tried, across instances,
    /// through the queue in Redis.
    pub fn fair(mut self, fair: bool) -> Self {
        self.fair = fair;
        self
    }

    /// How the lease is kept ([`Lease`]; default [`Lease::Watched`]: the instance's lease,
    /// renewed by a watchdog until release).
    pub fn with_lease(mut self, lease: Lease) -> Self {
        (self.lease, self.renew) = match lease {
            Lease::Watched => (None, false),
            Lease::Fixed(lease) => (Some(lease), false),
            Lease::Renewed(lease) => (Some(lease), true),
        };
        self
    }

    /// How long this holder expects to hold the lock once it has it: a holder that hands
    /// it the lock counts it as inside its critical section for that long.
    pub fn expecting_to_hold(mut self, hold: Duration) -> Self {
        self.hold = hold;
        self
    }

    /// A fenced lock (`fenced`), as Redisson's `RFencedLock`: every take also issues a
    /// fencing token, from a counter of the lock's own that the take script increments in
    /// the same step and that never expires — so tokens grow for as long as the lock's name
    /// is used, across expiries and holders ([`Lock::fencing_token`](crate::Lock::fencing_token)). Present it where the
    /// work lands, and have that side refuse a token lower than the highest it has seen: a
    /// holder paused past its lease then cannot write after the next holder did.
    pub fn fenced(mut self, fenced: bool) -> Self {
        self.fenced = fenced;
        self
    }

    /// Whether giving the lock back may hand it to a waiter of this instance (the
    /// default), rather than always releasing it for everybody.
    pub fn handing_off(mut self, handoff: bool) -> Self {
        self.handoff = handoff;
        self
    }

    /// Off by default. With it, an acquire returns the lock only once `replicas` replicas
    /// have its grant (and a fenced lock's token), as Redis's `WAIT` reports within
    /// `timeout`; fewer, and the lock is given back and the acquire fails
    /// ([`LockError::NotConfirmed`](crate::LockError::NotConfirmed)). Redis replicates
    /// asynchronously: without it, a master that fails over right after a grant can leave
    /// a replica that never saw it to grant the lock again — and hand out a fencing token
    /// already issued. (Redisson's `checkLockSyncedSlaves`.) `WAIT` holds up the commands
    /// behind it on the connection it is sent on: give locks that use it a connection of
    /// their own, whose response timeout is longer than `timeout` (or the connection gives
    /// up first: the acquire then fails as unavailable, and the lock is given back all the
    /// same).
    pub fn confirmed_by_replicas(mut self, replicas: u32, timeout: Duration) -> Self {
        self.confirm = (replicas > 0).then_some((replicas, timeout));
        self
    }
}
