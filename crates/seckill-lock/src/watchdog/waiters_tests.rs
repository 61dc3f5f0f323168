//! The waiters' state machine, without Redis: what a wake-up buys a waiter.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use super::{DEFAULT_HANDOFFS, Shared, Woke};
use crate::keys::Namespace;

const CHANNEL: &str = "test:{lock}:channel";

fn shared() -> Arc<Shared<()>> {
    Arc::new(Shared {
        conn: (),
        lease: Duration::from_secs(30),
        namespace: Namespace::new("test"),
        counters: Arc::default(),
        holders: crate::HolderIds::new(),
        handoffs: DEFAULT_HANDOFFS,
        queues: Mutex::new(HashMap::new()),
        _stops_subscription: tokio::sync::oneshot::channel().0,
    })
}

/// A release message that lands while a waiter's try is in flight buys it one more try,
/// not a loop: the try after it settles to sleep as any other, and the waiter can be woken
/// again (before, it stayed "woken" and tried again and again until it won).
#[test]
fn a_wake_during_a_try_buys_one_more_try() {
    let shared = shared();
    let queued = shared.register(CHANNEL, "waiter", Duration::from_secs(30), Duration::ZERO);
    // Its first try is in flight when a release message arrives.
    shared.wake_one(CHANNEL);
    assert!(
        !queued.waiter().settle(),
        "woken during its try: it tries again at once"
    );
    // That try found the lock held too.
    assert!(
        queued.waiter().settle(),
        "the wake-up was spent on one try: the waiter sleeps now"
    );
    // Asleep, it is woken by the next message.
    shared.wake_one(CHANNEL);
    assert_eq!(
        shared.counters.wakeups(),
        2,
        "a woken waiter can be woken again"
    );
    queued.leave(false);
}

/// The wake-up spent on a try leaves nothing behind to cut the next sleep short: asleep
/// after it, the waiter sleeps its whole nap (Tokio's paused clock: no real time passes).
#[tokio::test(start_paused = true)]
async fn a_spent_wake_does_not_cut_the_next_sleep_short() {
    let shared = shared();
    let queued = shared.register(CHANNEL, "waiter", Duration::from_secs(30), Duration::ZERO);
    shared.wake_one(CHANNEL);
    assert!(!queued.waiter().settle());
    assert!(queued.waiter().settle());
    let nap = Duration::from_secs(10);
    let asleep = tokio::time::Instant::now();
    assert!(matches!(
        queued.waiter().sleep(nap).await,
        Woke::Retry { .. }
    ));
    assert_eq!(asleep.elapsed(), nap, "it slept the whole nap");
    queued.leave(false);
}

/// A waiter woken by a release message whose acquire is then dropped before it looks (the
/// other branch of a `select!` won) passes the wake-up on: the lock is free, and the next
/// waiter would otherwise sleep out its nap, up to a lease. (It used to be marked gone
/// first, which overwrote the wake-up it was to pass on.)
#[test]
fn a_dropped_waiter_passes_its_wake_up_on() {
    let shared = shared();
    let lease = Duration::from_secs(30);
    let first = shared.register(CHANNEL, "first", lease, Duration::ZERO);
    assert!(first.waiter().settle(), "the first waiter sleeps");
    let second = shared.register(CHANNEL, "second", lease, Duration::ZERO);
    assert!(second.waiter().settle(), "the second waiter sleeps");
    // A release message wakes the oldest, whose acquire is dropped before it tries.
    shared.wake_one(CHANNEL);
    assert!(first.waiter().was_woken());
    drop(first);
    assert!(
        second.waiter().was_woken(),
        "the wake-up went on to the second waiter"
    );
    assert_eq!(shared.counters.wakeups(), 2);
    second.leave(false);
}
