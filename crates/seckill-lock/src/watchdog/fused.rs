//! The watchdog lock's take and release fused with a script of the caller's on the lock's
//! slot (the `scripting` feature): the caller's try takes the lock as `lib/lock.lua`'s
//! `take` does and may do more in the same step; its release gives it back as `release`
//! does. No stability promise: the scripts' arguments follow the lock's Lua.

use std::time::Duration;

use redis::Value;

use super::WatchdogLock;
use super::release::{ReleaseArgs, Released};
use super::take::Attempt;
use crate::{Connection, LockError};

impl<C: Connection> WatchdogLock<C> {
    /// Takes the lock as [`Lock::take`](crate::Lock::take) does, but each try is `attempt`: a script of the
    /// caller's that takes the lock (as `lib/lock.lua`'s `take` does) and may do more on the
    /// same slot once it has it. Returns what the script returned with the lock — or, when
    /// a holder of this instance handed the lock over, what that holder's release script
    /// returned for this holder — or `None` when `wait` ran out.
    ///
    /// # Cancel safety
    ///
    /// Not cancel safe: dropped between a try that took the lock and its answer, the lock
    /// stays held until its lease runs out (what the caller's script did is the caller's
    /// to undo). Use [`Lock::acquire`](crate::Lock::acquire) where cancellation can happen.
    pub async fn acquire_with<F, Fut>(
        &mut self,
        wait: Duration,
        attempt: F,
    ) -> Result<Option<Value>, LockError>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<Attempt, LockError>>,
    {
        self.take_with(wait, attempt).await
    }

    /// Gives back one hold as [`Lock::give_back`](crate::Lock::give_back) does, but through
    /// `release`: a script of the caller's that gives the lock back (as `lib/lock.lua`'s
    /// `release` does) and may do more on the same slot, and hands the lock to the
    /// [`ReleaseArgs::successor`] when one is named. Returns what `release` made of its
    /// answer. Nothing happens (and `release` is not called) when this handle holds nothing.
    ///
    /// # Cancel safety
    ///
    /// Dropped once polled, the hold is given up all the same (the watchdog has stopped):
    /// the lock is released, or handed over, if the script reached Redis, and otherwise
    /// expires one lease later. A waiter reserved for the hand-off is told to try again,
    /// and finds the lock its own if the script handed it over.
    pub async fn release_with<T, F, Fut>(&mut self, release: F) -> Result<T, LockError>
    where
        T: Default,
        F: FnOnce(ReleaseArgs) -> Fut,
        Fut: Future<Output = Result<(T, Released), LockError>>,
    {
        self.give_back_with(release).await
    }
}
