//! A lock a request holds through a sale whose answer may come late.

use seckill_lock::{Guard, Lock, LockError};

/// A lock a request holds, given back only when the request says so: dropped with the
/// request (its client gone, its future cancelled) while a command sent under the lock may
/// still run, it is abandoned — left to its lease — not released, so that the next holder
/// cannot read the stock before a late commit lands (a lost answer is not an undone
/// command). A [`Guard`] alone would give the lock back at once.
pub(super) struct Holding<L: Lock>(Option<Guard<L>>);

impl<L: Lock> Holding<L> {
    pub(super) fn new(guard: Guard<L>) -> Self {
        Self(Some(guard))
    }

    /// Gives the lock back: whether it was still held.
    pub(super) async fn release(mut self) -> Result<bool, LockError> {
        match self.0.take() {
            Some(guard) => guard.release().await,
            None => Ok(false),
        }
    }

    /// The lock, while it is held.
    pub(super) fn lock(&self) -> Option<&L> {
        self.0.as_deref()
    }

    /// Leaves the lock held, as a holder that died does.
    pub(super) fn abandon(mut self) {
        if let Some(guard) = self.0.take() {
            guard.abandon();
        }
    }
}

impl<L: Lock> Drop for Holding<L> {
    fn drop(&mut self) {
        if let Some(guard) = self.0.take() {
            guard.abandon();
        }
    }
}
