//! Giving a watchdog lock back: one hold at a time; on the last, to a waiter of this
//! instance (a hand-off), or to everybody.

use redis::Value;

use super::WatchdogLock;
use crate::{Connection, LockError, millis, scripts};

/// What a release script is asked to do, for `WatchdogLock::release_with`.
#[derive(Debug, Clone)]
pub struct ReleaseArgs {
    /// The holder giving a hold back.
    pub holder: String,
    /// The handle's own lease (its explicit one, or the instance's), re-applied while
    /// holds remain.
    pub lease: std::time::Duration,
    /// A fair lock: the release names the queue's head.
    pub fair: bool,
    /// A waiter of this instance to hand the lock to, if the lock is given up.
    pub successor: Option<Successor>,
}

/// The waiter a release may hand the lock to.
#[derive(Debug, Clone)]
pub struct Successor {
    /// The waiter's holder id.
    pub holder: String,
    /// The lease it asked for.
    pub lease: std::time::Duration,
    /// How long it expects to hold the lock (a script that lets it into its critical
    /// section counts it as inside for that long).
    #[cfg_attr(not(feature = "scripting"), allow(dead_code))]
    pub hold: std::time::Duration,
}

/// What a release script did with the lock.
#[derive(Debug)]
pub enum Released {
    /// The holder did not hold it (it expired, or was taken away).
    NotHeld,
    /// Holds remain.
    StillHeld,
    /// Deleted, and the waiters told.
    Freed,
    /// Handed to the successor; what the script returned for it.
    HandedOver(Value),
}

impl Released {
    /// From the code `lib/lock.lua`'s `release` returns (nil, 0, 1, 2).
    pub fn from_code(code: Option<i64>, for_successor: Value) -> Self {
        match code {
            None => Self::NotHeld,
            Some(0) => Self::StillHeld,
            Some(2) => Self::HandedOver(for_successor),
            Some(_) => Self::Freed,
        }
    }
}

impl<C: Connection> WatchdogLock<C> {
    /// `watchdog_unlock.lua`: one hold given back, the lock handed over or freed.
    pub(super) async fn release_plainly(&mut self) -> Result<bool, LockError> {
        let keys = self.keys.for_scripts(self.fair).map(str::to_owned);
        let mut conn = self.shared.conn.clone();
        self.give_back_with(move |release| async move {
            let mut script = scripts::WATCHDOG_UNLOCK.prepare_invoke();
            for key in &keys {
                script.key(key);
            }
            let successor = release.successor.as_ref();
            script
                .arg(millis(release.lease).max(1))
                .arg(&release.holder)
                .arg(if release.fair { "fair" } else { "unfair" })
                .arg(successor.map_or("", |s| s.holder.as_str()))
                .arg(successor.map_or(0, |s| millis(s.lease).max(1)));
            let code: Option<i64> = script.invoke_async(&mut conn).await?;
            let released = Released::from_code(code, Value::Nil);
            let held = !matches!(released, Released::NotHeld);
            Ok((held, released))
        })
        .await
    }

    /// The release under [`Lock::give_back`](crate::Lock::give_back), through `release`
    /// (see `release_with`, with the `scripting` feature).
    pub(crate) async fn give_back_with<T, F, Fut>(&mut self, release: F) -> Result<T, LockError>
    where
        T: Default,
        F: FnOnce(ReleaseArgs) -> Fut,
        Fut: Future<Output = Result<(T, Released), LockError>>,
    {
        if self.holds == 0 {
            return Ok(T::default());
        }
        self.holds -= 1;
        let last = self.holds == 0;
        if last {
            self.stop_watchdog();
        }
        // The fair lock's next holder is the queue's head, not whoever waits here.
        let reservation = if last && self.handoff && !self.fair {
            self.shared.reserve_successor(&self.keys.channel)
        } else {
            None
        };
        let asked = ReleaseArgs {
            holder: self.holder.clone(),
            lease: WatchdogLock::lease(self),
            fair: self.fair,
            successor: reservation.as_ref().map(|r| Successor {
                holder: r.holder().to_owned(),
                lease: r.lease(),
                hold: r.hold(),
            }),
        };
        let (outcome, released) = match release(asked).await {
            Ok(answer) => answer,
            Err(err) => {
                if let Some(reservation) = reservation {
                    reservation.pass();
                }
                return Err(err);
            }
        };
        match released {
            Released::HandedOver(value) => match reservation {
                Some(reservation) => {
                    let (holder, hold) = (reservation.holder().to_owned(), reservation.hold());
                    if !reservation.grant(value) {
                        self.release_for_gone(holder, hold);
                    }
                }
                None => {
                    tracing::warn!(key = %self.keys.lock, "a release handed the lock to nobody")
                }
            },
            other => {
                if let Some(reservation) = reservation {
                    reservation.pass();
                }
                if matches!(other, Released::NotHeld) {
                    self.holds = 0;
                    self.stop_watchdog();
                }
            }
        }
        Ok(outcome)
    }

    /// Gives back, once the `hold` it expected has passed, a lock this release handed to a
    /// waiter whose acquire was dropped meanwhile: nobody else will (what the hand-off let
    /// it into, on the caller's side, ends by then).
    fn release_for_gone(&self, holder: String, hold: std::time::Duration) {
        let [lock, channel, queue, waiting] = self.keys.for_scripts(self.fair).map(str::to_owned);
        let mut conn = self.shared.conn.clone();
        let lease = millis(self.shared.lease).max(1);
        tokio::spawn(async move {
            tokio::time::sleep(hold).await;
            let released: Result<Option<i64>, _> = scripts::WATCHDOG_UNLOCK
                .key(&lock)
                .key(&channel)
                .key(&queue)
                .key(&waiting)
                .arg(lease)
                .arg(&holder)
                .arg("unfair")
                .arg("")
                .arg(0)
                .invoke_async(&mut conn)
                .await;
            if let Err(err) = released {
                tracing::warn!(%lock, %holder, %err, "a lock handed to a waiter that had gone could not be given back: it expires one lease from now");
            }
        });
    }

    /// Deletes the lock whoever holds it, and wakes its waiters.
    pub async fn force_release(&mut self) -> Result<bool, LockError> {
        self.stop_watchdog();
        self.holds = 0;
        let mut conn = self.shared.conn.clone();
        crate::inspect::force_release(&mut conn, &self.keys).await
    }
}
