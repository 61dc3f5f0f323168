//! The per-instance side of the watchdog lock: this instance's waiters, queued per lock,
//! oldest first, woken through its one subscription to every lock's release channel
//! (`subscription.rs`).
//!
//! Through these queues an unlock reaches a waiter three ways:
//! - **woken** by a release message (`released`: any one waiter of this instance tries
//!   again; a fair lock's message names the one waiter whose turn it is);
//! - **handed the lock** by a holder of this same instance, whose release script gave the
//!   lock straight to that waiter (and may have let it into its critical section too): the
//!   waiter wakes up holding it, with no message and no try of its own. A holder hands on
//!   at most `handoffs` times in a row, then releases for everybody, so that waiters on
//!   other instances get their chance;
//! - **by its own timer** (the lock's TTL), so that a lost message never strands it.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use futures_util::FutureExt;
use redis::Value;
use tokio::sync::Notify;

use super::counters::WatchdogCounters;
use crate::keys::Namespace;

/// What an unlock publishes when it names no waiter: anyone may try.
pub(super) const RELEASED: &str = "released";

/// Local hand-offs in a row before a holder releases for every instance, by default.
/// Measured in PERFORMANCE.md: long runs of hand-offs help throughput little past this,
/// and leave the other instance's waiters sleeping for longer.
pub const DEFAULT_HANDOFFS: u32 = 8;

/// The instance's subscription and waiter queues. Cheap to clone.
pub struct WatchdogLocks<C> {
    pub(super) shared: Arc<Shared<C>>,
}

impl<C> Clone for WatchdogLocks<C> {
    fn clone(&self) -> Self {
        Self {
            shared: self.shared.clone(),
        }
    }
}

pub(super) struct Shared<C> {
    pub(super) conn: C,
    pub(super) lease: Duration,
    /// Where the locks live: their keys, and the channels the subscription hears.
    pub(super) namespace: Namespace,
    pub(super) counters: Arc<WatchdogCounters>,
    /// The ids [`WatchdogLocks::lock`] gives its handles.
    pub(super) holders: crate::HolderIds,
    /// Most local hand-offs in a row per lock; 0: never hand on.
    pub(super) handoffs: u32,
    pub(super) queues: Mutex<HashMap<String, Queue>>,
    /// Dropped with the last handle on the instance: the subscription's task ends then,
    /// however quiet its channels are.
    pub(super) _stops_subscription: tokio::sync::oneshot::Sender<()>,
}

/// One lock's waiters on this instance.
#[derive(Default)]
pub(super) struct Queue {
    waiters: VecDeque<Arc<Waiter>>,
    /// Hand-offs since the lock was last released for everybody.
    handed_in_a_row: u32,
}

/// A request waiting for a lock, between its tries.
pub(super) struct Waiter {
    pub(super) holder: String,
    /// The lease the waiter asked for: a hand-off gives it this one.
    pub(super) lease: Duration,
    /// How long it expects to hold the lock: a hand-off that lets it into its critical
    /// section counts it as inside for that long.
    pub(super) hold: Duration,
    state: Mutex<State>,
    wake: Notify,
    /// Times it was asked to try again (a release message, a hand-off that fell through,
    /// the subscription back after a loss): each is one reason for one more try.
    wakes: AtomicU32,
}

enum State {
    /// Its own try is in flight: it cannot be handed the lock now (Redis would see it
    /// take a lock it already holds).
    Trying,
    /// A message or a hand-off that fell through asked it to try again.
    Woken,
    /// Between tries, asleep: it may be woken, or reserved for a hand-off.
    Sleeping,
    /// A holder of this instance is handing it the lock: it waits for the outcome.
    Reserved,
    /// It holds the lock: what the hand-off's script returned for it, and when the holder
    /// sent that script (the new lease began after).
    Granted(Value, Instant),
    /// Its acquire was dropped: a hand-off to it is the holder's to give back.
    Gone,
}

/// What became of a waiter's sleep.
pub(super) enum Woke {
    /// Try again: woken, or (`napped`) the nap is over.
    Retry {
        /// The nap ran out before anything woke it.
        napped: bool,
    },
    /// A holder handed it the lock: what the hand-off's script returned for it, and when
    /// the holder sent that script — the lease it was handed began no earlier.
    Granted(Value, Instant),
}

impl Waiter {
    fn state(&self) -> MutexGuard<'_, State> {
        // Held for a few assignments, never across an await; poison is moot.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// After a try that found the lock held: asleep from now on, unless something woke it
    /// during the try (then false: try again at once). That wake-up is spent by the one
    /// try it asks for: the waiter is trying again, and can be woken again; so the try
    /// after it settles as any other, and a waiter never tries twice on one wake-up.
    pub(super) fn settle(&self) -> bool {
        let mut state = self.state();
        match *state {
            State::Trying => {
                *state = State::Sleeping;
                true
            }
            State::Woken => {
                *state = State::Trying;
                // The wake-up's permit too, or the next sleep would end at once on it.
                let _ = self.wake.notified().now_or_never();
                false
            }
            _ => false,
        }
    }

    /// Sleeps until woken or `nap` is over; then, unless a holder is handing it the lock
    /// (it waits for that to finish: one Redis round trip), it is about to try again, and
    /// no longer available for a hand-off. It keeps its place in the queue either way.
    pub(super) async fn sleep(&self, nap: Duration) -> Woke {
        let napped = tokio::select! {
            () = self.wake.notified() => false,
            () = tokio::time::sleep(nap) => true,
        };
        loop {
            {
                let mut state = self.state();
                match std::mem::replace(&mut *state, State::Trying) {
                    State::Granted(value, sent) => return Woke::Granted(value, sent),
                    State::Reserved => *state = State::Reserved,
                    State::Trying | State::Woken | State::Sleeping | State::Gone => {
                        return Woke::Retry { napped };
                    }
                }
            }
            self.wake.notified().await;
        }
    }

    /// Times it was asked to try again since it queued.
    pub(super) fn wakes(&self) -> u32 {
        self.wakes.load(Ordering::Relaxed)
    }

    /// Moved to `Woken` (the caller holds its state): one more reason to try.
    fn woken(&self, state: &mut State) {
        *state = State::Woken;
        self.wakes.fetch_add(1, Ordering::Relaxed);
    }

    /// Whether a wake-up was spent on it (so a waiter leaving without the lock passes it on).
    fn was_woken(&self) -> bool {
        matches!(*self.state(), State::Woken)
    }

    /// Marked gone (its acquire was dropped), unless a hand-off already granted it the lock;
    /// says whether a wake-up was spent on it, which it then passes on.
    fn gone(&self) -> bool {
        let mut state = self.state();
        let woken = matches!(*state, State::Woken);
        if !matches!(*state, State::Granted(..)) {
            *state = State::Gone;
        }
        woken
    }

    /// Woken, if it is trying or asleep (not already woken, nor being handed the lock).
    fn wake_if_trying_or_asleep(&self) -> bool {
        let mut state = self.state();
        let wakes = matches!(*state, State::Trying | State::Sleeping);
        if wakes {
            self.woken(&mut state);
        }
        wakes
    }

    /// Moves it to `to` if its state is one `from` accepts; says whether it did.
    fn change(&self, from: impl Fn(&State) -> bool, to: State) -> bool {
        let mut state = self.state();
        let changes = from(&state);
        if changes {
            *state = to;
        }
        changes
    }
}

/// A waiter in its queue, for as long as its request waits.
pub(super) struct Queued<C> {
    shared: Arc<Shared<C>>,
    channel: String,
    waiter: Arc<Waiter>,
    left: bool,
}

impl<C> Queued<C> {
    pub(super) fn waiter(&self) -> &Waiter {
        &self.waiter
    }

    /// Leaves the queue, with the lock or without it.
    pub(super) fn leave(mut self, acquired: bool) {
        self.left = true;
        let pass_on = !acquired && self.waiter.was_woken();
        self.shared.deregister(&self.channel, &self.waiter, pass_on);
    }
}

impl<C> Drop for Queued<C> {
    /// Its acquire was dropped (cancelled): out of the queue, and marked gone, so that a
    /// hand-off to it still in flight is given back by the holder handing it over. A
    /// hand-off already granted is given back by the acquire's clean-up. A wake-up spent on
    /// it is passed on: read before it is marked gone, which overwrites it.
    fn drop(&mut self) {
        if !self.left {
            let pass_on = self.waiter.gone();
            self.shared.deregister(&self.channel, &self.waiter, pass_on);
        }
    }
}

/// A waiter reserved for a hand-off: the lock goes to it if the holder's release script
/// says so ([`Reservation::grant`]), and otherwise it tries again ([`Reservation::pass`]),
/// keeping its place in the queue. Dropped without either — the release's future was
/// cancelled between the reservation and the answer — it passes: the waiter tries again
/// (and finds the lock its own, if the script ran and handed it over), rather than sleep
/// on a grant that will never come.
pub(super) struct Reservation {
    waiter: Arc<Waiter>,
    settled: bool,
}

impl Reservation {
    pub(super) fn new(waiter: Arc<Waiter>) -> Self {
        Self {
            waiter,
            settled: false,
        }
    }

    pub(super) fn holder(&self) -> &str {
        &self.waiter.holder
    }

    pub(super) fn lease(&self) -> Duration {
        self.waiter.lease
    }

    pub(super) fn hold(&self) -> Duration {
        self.waiter.hold
    }

    /// The waiter holds the lock now, handed over by a release script sent at `sent`;
    /// false when it had gone (its acquire was dropped), and the lock handed to it is the
    /// caller's to give back.
    pub(super) fn grant(mut self, value: Value, sent: Instant) -> bool {
        self.settled = true;
        {
            let mut state = self.waiter.state();
            if matches!(*state, State::Gone) {
                return false;
            }
            *state = State::Granted(value, sent);
        }
        self.waiter.wake.notify_one();
        true
    }

    /// The hand-off did not happen: the waiter tries again.
    pub(super) fn pass(mut self) {
        self.settled = true;
        self.wake_to_try_again();
    }

    fn wake_to_try_again(&self) {
        {
            let mut state = self.waiter.state();
            if matches!(*state, State::Gone) {
                return;
            }
            self.waiter.woken(&mut state);
        }
        self.waiter.wake.notify_one();
    }
}

impl Drop for Reservation {
    fn drop(&mut self) {
        if !self.settled {
            self.wake_to_try_again();
        }
    }
}

impl<C> Shared<C> {
    /// Queues a waiter that is about to try. It leaves the queue through
    /// [`Queued::leave`], or when dropped (its request went away).
    pub(super) fn register(
        self: &Arc<Self>,
        channel: &str,
        holder: &str,
        lease: Duration,
        hold: Duration,
    ) -> Queued<C> {
        let waiter = Arc::new(Waiter {
            holder: holder.to_owned(),
            lease,
            hold,
            state: Mutex::new(State::Trying),
            wake: Notify::new(),
            wakes: AtomicU32::new(0),
        });
        self.queues()
            .entry(channel.to_owned())
            .or_default()
            .waiters
            .push_back(waiter.clone());
        Queued {
            shared: self.clone(),
            channel: channel.to_owned(),
            waiter,
            left: false,
        }
    }

    /// Takes `waiter` off the queue. One that was woken but leaves without the lock
    /// (`pass_on`) passes the wake-up on, so an unlock is never spent on nobody.
    fn deregister(&self, channel: &str, waiter: &Arc<Waiter>, pass_on: bool) {
        {
            let mut queues = self.queues();
            if let Some(queue) = queues.get_mut(channel) {
                queue.waiters.retain(|w| !Arc::ptr_eq(w, waiter));
                if queue.waiters.is_empty() {
                    queues.remove(channel);
                }
            }
        }
        if pass_on {
            self.wake_one(channel);
        }
    }

    /// For a holder about to give up the lock: the oldest sleeping waiter of this instance,
    /// reserved, if the lock may be handed on once more; `None` sends the release to
    /// everybody (and starts a new run of hand-offs).
    pub(super) fn reserve_successor(&self, channel: &str) -> Option<Reservation> {
        let most = self.handoffs;
        let mut queues = self.queues();
        let queue = queues.get_mut(channel)?;
        if queue.handed_in_a_row >= most {
            queue.handed_in_a_row = 0;
            return None;
        }
        let waiter = queue
            .waiters
            .iter()
            .find(|w| w.change(|s| matches!(s, State::Sleeping), State::Reserved))?
            .clone();
        queue.handed_in_a_row += 1;
        self.counters.handoff();
        Some(Reservation::new(waiter))
    }

    /// A release message for anyone on `channel`: wake this instance's oldest waiter.
    pub(super) fn wake_one(&self, channel: &str) {
        self.wake(channel, |_| true);
    }

    /// A fair lock's release message naming `holder`: wake it if it waits here.
    pub(super) fn wake_holder(&self, channel: &str, holder: &str) {
        self.wake(channel, |w| w.holder == holder);
    }

    /// Wakes the oldest waiter `which` accepts among those trying or asleep (not one
    /// already woken, nor one being handed the lock). It stays in the queue, in its place.
    fn wake(&self, channel: &str, which: impl Fn(&Waiter) -> bool) {
        let queues = self.queues();
        let woken = queues.get(channel).and_then(|queue| {
            queue
                .waiters
                .iter()
                .find(|w| which(w) && w.wake_if_trying_or_asleep())
        });
        if let Some(waiter) = woken {
            waiter.wake.notify_one();
            self.counters.wakeup();
        }
    }

    /// After the subscription was down, messages may have been missed: wake one waiter
    /// per lock to look again.
    pub(super) fn wake_every_lock(&self) {
        let channels: Vec<String> = self.queues().keys().cloned().collect();
        for channel in channels {
            self.wake_one(&channel);
        }
    }

    /// Wakes every waiter of this instance that is not being handed a lock.
    pub(super) fn wake_everyone(&self) {
        for queue in self.queues().values() {
            for waiter in &queue.waiters {
                if waiter.wake_if_trying_or_asleep() {
                    waiter.wake.notify_one();
                }
            }
        }
    }

    fn queues(&self) -> MutexGuard<'_, HashMap<String, Queue>> {
        // A std Mutex: it is held for a few queue operations and never across an await.
        // A panic while holding it cannot leave the queues half-changed, so poison is moot.
        self.queues.lock().unwrap_or_else(|e| e.into_inner())
    }
}

#[cfg(test)]
#[path = "waiters_tests.rs"]
mod tests;
