//! The guard a taken lock is held through, and the acquire that gives it.

use std::ops::Deref;
use std::time::Duration;

use crate::{Lock, LockError};

/// A lock held: given back by [`release`](Guard::release), or when dropped.
///
/// The guard derefs to its lock handle, for what the holder asks while it works:
/// [`is_lost`](Lock::is_lost), [`fencing_token`](Lock::fencing_token),
/// [`lease`](Lock::lease).
///
/// # Drop
///
/// A guard dropped without [`release`](Guard::release) gives the lock back in the
/// background, on the Tokio runtime it is dropped in ([`Lock::give_back`]: a token lock
/// deletes its key if the token is still there, a watchdog lock stops its watchdog and
/// releases or hands the lock on, Redlock releases on every server, a ZooKeeper lock
/// deletes its node). Dropped outside a runtime, or with the store away, the lock is left
/// to its lease — and a `SetnxLock`, which has none, to whoever
/// deletes it. [`abandon`](Guard::abandon) leaves it held on purpose, as a process that
/// dies does.
///
/// Giving the lock back on drop is right when nothing the holder started can still land:
/// a guard dropped while a write made under it is on its way (sent, its answer not read)
/// lets the next holder in before that write lands. A holder that may be dropped in that
/// state abandons the guard instead (the lease then covers the write), or presents a
/// fencing token with the write.
#[must_use = "a guard dropped at once gives the lock back at once"]
pub struct Guard<L: Lock> {
    /// `None` once released or abandoned.
    lock: Option<L>,
}

impl<L: Lock> Guard<L> {
    /// Gives the lock back and says whether it was still this holder's: false when it had
    /// expired or been taken away, so whatever the holder did since was not protected.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: the release runs as a task of its own, so a caller that stops waiting
    /// for it (a `select!`, a timeout) does not stop the release, which finishes in the
    /// background.
    pub async fn release(mut self) -> Result<bool, LockError> {
        let Some(mut lock) = self.lock.take() else {
            return Ok(false);
        };
        match tokio::spawn(async move { lock.give_back().await }).await {
            Ok(released) => released,
            Err(err) if err.is_panic() => std::panic::resume_unwind(err.into_panic()),
            Err(_) => Err(LockError::RuntimeGone),
        }
    }

    /// Makes the lease `lease` long from now, if the lock is still this holder's: true, or
    /// false when it expired or was taken meanwhile ([`is_lost`](Lock::is_lost) is true
    /// from then on). For a holder of a lock with a fixed lease (a [`TokenLock`](crate::TokenLock),
    /// `Redlock`, a [`WatchdogLock`](crate::WatchdogLock) taken with
    /// [`Lease::Fixed`](crate::watchdog::Lease::Fixed)) whose work turns out longer than it
    /// planned. Locks with no lease of their own (a ZooKeeper lock's is its session; a
    /// `SetnxLock` has none) answer [`LockError::Unsupported`].
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: an extension dropped before it answers may still land, which only
    /// lengthens a lease this holder holds; [`release`](Guard::release) ends it as ever.
    pub async fn extend(&mut self, lease: Duration) -> Result<bool, LockError> {
        match self.lock.as_mut() {
            Some(lock) => lock.extend(lease).await,
            None => Ok(false),
        }
    }

    /// Stops as if the holder's process had died: nothing given back, nothing renewed. The
    /// lock stays held until its lease runs out (a setnx lock's never does).
    pub fn abandon(mut self) {
        if let Some(mut lock) = self.lock.take() {
            lock.abandon();
        }
    }

    fn new(lock: L) -> Self {
        Self { lock: Some(lock) }
    }

    fn handle(&self) -> &L {
        self.lock
            .as_ref()
            .expect("a guard has its lock until it is released or abandoned")
    }
}

impl<L: Lock> Deref for Guard<L> {
    type Target = L;

    fn deref(&self) -> &L {
        self.handle()
    }
}

impl<L: Lock> Drop for Guard<L> {
    fn drop(&mut self) {
        if let Some(mut lock) = self.lock.take() {
            in_background(lock.holder().to_owned(), "released", async move {
                lock.give_back().await.map(drop)
            });
        }
    }
}

impl<L: Lock + std::fmt::Debug> std::fmt::Debug for Guard<L> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Guard").field("lock", &self.lock).finish()
    }
}

/// [`Lock::acquire`]: the handle's take, with a drop guard of its own until the take has
/// answered, so that a cancelled acquire — or one whose take failed, which may have taken
/// the lock all the same (a lost answer) — cleans up after itself.
pub(crate) async fn acquire<L: Lock>(
    lock: L,
    wait: Duration,
) -> Result<Option<Guard<L>>, LockError> {
    let mut taking = Taking { lock: Some(lock) };
    match taking.handle().take(wait).await {
        Ok(true) => Ok(taking.lock.take().map(Guard::new)),
        Ok(false) => {
            taking.lock = None;
            Ok(None)
        }
        // A lost answer may have taken the lock: `taking` cleans up as it drops.
        Err(err) if err.may_have_run() => Err(err),
        Err(err) => {
            taking.lock = None;
            Err(err)
        }
    }
}

/// [`Lock::acquire`]: a take with no deadline. A take answers "not taken" only when its
/// wait ran out, which this one's never does; should one all the same, it is asked again.
pub(crate) async fn acquire_whenever<L: Lock>(mut lock: L) -> Result<Guard<L>, LockError> {
    loop {
        let mut taking = Taking { lock: Some(lock) };
        match taking.handle().take(Duration::MAX).await {
            Ok(true) => {
                let held = taking.lock.take().expect("a take in flight has its lock");
                return Ok(Guard::new(held));
            }
            Ok(false) => lock = taking.lock.take().expect("a take in flight has its lock"),
            // A lost answer may have taken the lock: `taking` cleans up as it drops.
            Err(err) if err.may_have_run() => return Err(err),
            Err(err) => {
                taking.lock = None;
                return Err(err);
            }
        }
    }
}

/// A handle whose take is in flight: dropped before the take said yes or no (the acquire
/// was cancelled, or the take failed), it cleans up in the background.
struct Taking<L: Lock> {
    lock: Option<L>,
}

impl<L: Lock> Taking<L> {
    fn handle(&mut self) -> &mut L {
        self.lock.as_mut().expect("a take in flight has its lock")
    }
}

impl<L: Lock> Drop for Taking<L> {
    fn drop(&mut self) {
        if let Some(mut lock) = self.lock.take() {
            in_background(
                lock.holder().to_owned(),
                "cleaned up after a cancelled acquire",
                async move { lock.clean_up().await },
            );
        }
    }
}

/// Runs `work` on the current Tokio runtime, logging its failure; outside a runtime, logs
/// that the lock is left to its lease.
fn in_background(
    holder: String,
    what: &'static str,
    work: impl Future<Output = Result<(), LockError>> + Send + 'static,
) {
    match tokio::runtime::Handle::try_current() {
        Ok(runtime) => {
            runtime.spawn(async move {
                if let Err(err) = work.await {
                    tracing::warn!(%holder, %err, "a lock dropped could not be {what}: it is left to its lease");
                }
            });
        }
        Err(_) => {
            tracing::warn!(%holder, "a lock dropped outside a Tokio runtime is left to its lease");
        }
    }
}
