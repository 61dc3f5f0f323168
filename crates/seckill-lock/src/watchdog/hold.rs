//! A handle's hold on its watchdog lock, from take to give-back: the lock as a [`Lock`], and
//! the steps under it — a take's tries, the waiter asleep between them, and the grant
//! completed; the watchdog started with the first hold and stopped before the last is given
//! back; a hold given back, the last one to a waiter of this instance (a hand-off) or to
//! everybody.

use std::time::Duration;

use redis::Value;
use tokio::time::Instant;

use super::release::{ReleaseArgs, Released, Successor, release_for_gone, unlock};
use super::take::{self, Attempt, FAIR_PATIENCE, TakeScript};
use super::waiters::{self, Woke};
use super::{WatchdogLock, grant, renewal};
use crate::{Connection, Lock, LockError, millis, scripts};

impl<C: Connection> WatchdogLock<C> {
    /// The take under [`Lock::take`], each try `attempt` (see `acquire_with`, with the
    /// `scripting` feature).
    pub(crate) async fn take_with<F, Fut>(
        &mut self,
        wait: Duration,
        mut attempt: F,
    ) -> Result<Option<Value>, LockError>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<Attempt, LockError>>,
    {
        let deadline = Instant::now().checked_add(wait);
        // Queued before the first try, so a release between a try and the sleep still
        // reaches this waiter; it keeps its place in the queue from try to try. Queueing
        // is local: it costs Redis nothing.
        let waiter =
            self.shared
                .register(&self.keys.channel, &self.holder, self.lease(), self.hold);
        // This acquire's account: tries sent, and naps that ran out (with the first try
        // and the wake-ups it received, the reasons it had to try).
        let (mut tries, mut naps) = (0_u64, 0_u64);
        let account = |tries: u64, naps: u64, waiter: &waiters::Waiter| {
            let reasons = 1 + naps + u64::from(waiter.wakes());
            self.shared.counters.acquire_tried(tries, reasons);
        };
        loop {
            let sent = std::time::Instant::now();
            self.shared.counters.try_sent();
            tries += 1;
            let nap = match attempt().await {
                Ok(Attempt::Acquired(value)) => {
                    account(tries, naps, waiter.waiter());
                    waiter.leave(true);
                    self.acquired(sent);
                    return Ok(Some(value));
                }
                Ok(Attempt::Held(nap)) => nap,
                Err(err) => {
                    account(tries, naps, waiter.waiter());
                    waiter.leave(false);
                    return Err(err);
                }
            };
            let left = deadline.map(|d| d.saturating_duration_since(Instant::now()));
            if left == Some(Duration::ZERO) {
                account(tries, naps, waiter.waiter());
                waiter.leave(false);
                if self.fair {
                    let mut conn = self.shared.conn.clone();
                    take::leave_fair_queue(&mut conn, &self.keys, &self.holder).await?;
                }
                return Ok(None);
            }
            if !waiter.waiter().settle() {
                // Woken while trying: try again at once (the wake-up is spent on it).
                continue;
            }
            // Sleep until a release message or a hand-off, or until the lease runs out
            // (in case the message was lost), or until the wait does; a fair waiter also
            // wakes in time to keep its place in the queue.
            let mut nap = nap;
            if let Some(left) = left {
                nap = nap.min(left);
            }
            if self.fair {
                nap = nap.min(FAIR_PATIENCE / 2);
            }
            match waiter.waiter().sleep(nap).await {
                // A hand-off's lease began when the holder's release script ran: counted
                // from when the holder sent it, before that. (Not from when this waiter
                // went to sleep: a hand-off late in a long nap would count most of the
                // lease as gone, and the hold be reported lost before its first renewal.)
                Woke::Granted(value, sent) => {
                    account(tries, naps, waiter.waiter());
                    waiter.leave(true);
                    self.acquired(sent);
                    return Ok(Some(value));
                }
                Woke::Retry { napped } => naps += u64::from(napped),
            }
        }
    }

    /// One more hold, taken by a command sent at `sent`.
    fn acquired(&mut self, sent: std::time::Instant) {
        self.holds += 1;
        if self.holds == 1 {
            self.watch.start(sent, WatchdogLock::lease(self));
        }
        if self.holds == 1 && (self.lease.is_none() || self.renew) {
            self.watchdog = Some(tokio::spawn(renewal::renew(
                self.shared.clone(),
                WatchdogLock::lease(self),
                self.keys.lock.clone(),
                self.holder.clone(),
                self.watch.clone(),
            )));
        }
    }

    /// What a grant needs before the take returns it ([`grant`]): a fenced lock's token, for
    /// a take that answered `taken`, and the replicas' confirmation when asked for. A hold
    /// without them is no use to the caller: given back at once, not left held for a lease
    /// with nobody in it (its watchdog stops either way), and the take fails.
    async fn complete_grant(&mut self, taken: Value) -> Result<(), LockError> {
        let mut conn = self.shared.conn.clone();
        if self.fenced {
            match grant::token(&mut conn, &self.keys, &self.holder, taken).await {
                Ok(token) => self.token = Some(token),
                Err(err) => {
                    if let Err(release) = self.release_plainly().await {
                        tracing::warn!(error = %release, key = %self.keys.lock, "a hand-off without a token not given back: it expires one lease from now");
                    }
                    return Err(err);
                }
            }
        }
        if let Some((replicas, timeout)) = self.confirm
            && let Err(err) = grant::confirm(&mut conn, replicas, timeout).await
        {
            if let Err(release) = self.release_plainly().await {
                tracing::warn!(error = %release, key = %self.keys.lock, "a lock the replicas did not confirm was not given back: it expires one lease from now");
            }
            return Err(err);
        }
        Ok(())
    }

    /// One hold given back with the crate's own release script ([`unlock`]).
    async fn release_plainly(&mut self) -> Result<bool, LockError> {
        let conn = self.shared.conn.clone();
        let keys = self.keys.for_scripts(self.fair).map(str::to_owned);
        self.give_back_with(|asked| unlock(conn, keys, asked)).await
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
        // Before the script is sent: a successor's lease begins when it runs, no earlier.
        let sent = std::time::Instant::now();
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
                    if !reservation.grant(value, sent) {
                        let keys = self.keys.for_scripts(self.fair).map(str::to_owned);
                        let conn = self.shared.conn.clone();
                        release_for_gone(conn, keys, self.shared.lease, holder, hold);
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

    /// Stops this handle's watchdog, if one runs: no renewal after this.
    pub(super) fn stop_watchdog(&mut self) {
        if let Some(watchdog) = self.watchdog.take() {
            watchdog.abort();
        }
    }
}

impl<C: Connection> Lock for WatchdogLock<C> {
    /// Takes (or re-enters) the lock, waiting up to `wait` (`Duration::MAX`: as long as it
    /// takes). The watchdog keeps it until release, unless the handle has an explicit lease.
    async fn take(&mut self, wait: Duration) -> Result<bool, LockError> {
        let script = TakeScript {
            conn: self.shared.conn.clone(),
            keys: self.keys.clone(),
            holder: self.holder.clone(),
            fair: self.fair,
            fenced: self.fenced,
            lease: WatchdogLock::lease(self),
            first: self.holds == 0,
        };
        let Some(taken) = self.take_with(wait, || script.attempt()).await? else {
            return Ok(false);
        };
        self.complete_grant(taken).await?;
        Ok(true)
    }

    /// Gives back one hold. On the last one the watchdog stops first, then the lock goes to
    /// a waiter of this instance, or is deleted and the waiters told. False when this
    /// holder no longer held the lock (it expired or was taken away).
    async fn give_back(&mut self) -> Result<bool, LockError> {
        self.release_plainly().await
    }

    /// After a cancelled take: out of the fair queue, and the lock given back if the take
    /// reached Redis, or a holder of this instance handed it over, before the take was
    /// dropped.
    async fn clean_up(&mut self) -> Result<(), LockError> {
        if self.fair {
            let mut conn = self.shared.conn.clone();
            take::leave_fair_queue(&mut conn, &self.keys, &self.holder).await?;
        }
        // What the take may have won, this handle does not know: one hold, given back if
        // Redis has this holder in the lock (the release script checks), else nothing.
        self.holds += 1;
        self.release_plainly().await?;
        Ok(())
    }

    /// Stops as if the process died: no release, no more renewals. The lock expires one
    /// lease later.
    fn abandon(&mut self) {
        self.stop_watchdog();
        self.holds = 0;
    }

    /// The lease made `lease` long from now, if this holder still holds the lock (the
    /// watchdog's tick, run once with `lease`). A watchdog that renews the lock goes on
    /// renewing it with the handle's own lease: extending is for a
    /// [`Lease::Fixed`](super::Lease::Fixed) one.
    async fn extend(&mut self, lease: Duration) -> Result<bool, LockError> {
        if self.holds == 0 {
            return Ok(false);
        }
        let sent = std::time::Instant::now();
        let extended: i64 = scripts::WATCHDOG_RENEW
            .key(&self.keys.lock)
            .arg(millis(lease).max(1))
            .arg(&self.holder)
            .invoke_async(&mut self.shared.conn.clone())
            .await?;
        if extended == 1 {
            self.watch.renewed_at(sent, lease);
            Ok(true)
        } else {
            self.watch.found_lost();
            Ok(false)
        }
    }

    /// True once a watchdog tick found the lock no longer this holder's, or once the lease
    /// ran out since the last take or renewal this holder heard of (Redis away, or a lease
    /// with no watchdog): whatever the holder was doing is no longer protected, and it
    /// should not commit.
    fn is_lost(&self) -> bool {
        self.watch.is_lost()
    }

    /// Woken by the watchdog's tick that finds the lock gone, or by the lease's end.
    async fn lost(&self) {
        self.watch.lost().await;
    }

    fn key(&self) -> &str {
        &self.keys.lock
    }

    fn holder(&self) -> &str {
        &self.holder
    }

    /// A fenced lock's token, issued with its last take ([`fenced`](WatchdogLock::fenced)).
    fn fencing_token(&self) -> Option<i64> {
        self.token
    }

    #[cfg(feature = "scripting")]
    fn holder_is_a_hash_field(&self) -> bool {
        true
    }

    fn lease(&self) -> Option<Duration> {
        Some(WatchdogLock::lease(self))
    }

    #[cfg(feature = "teaching")]
    fn renewals(&self) -> Vec<std::time::Instant> {
        self.watch.renewals().clone()
    }
}
