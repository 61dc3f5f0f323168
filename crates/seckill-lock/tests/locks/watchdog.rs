//! The watchdog lock as a library, against a real Redis: the cases of Redisson's lock test
//! suite (`RedissonDistributedLockerTest`, quoted in the seeds), and the watchdog's own
//! promises — renewal while held, none after, and a lost lock reported.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use redis::AsyncCommands;
use redis::aio::ConnectionManager;
use seckill_lock::watchdog::DEFAULT_LEASE;
use seckill_lock::{Lease, Lock, Namespace};
use seckill_testkit::RedisServer;

use crate::cancel::{Cut, cut};
use crate::{script_calls, subscribed, subscribers, tried};

/// As long as it takes.
const FOREVER: Duration = Duration::MAX;

type WatchdogLocks = seckill_lock::WatchdogLocks<ConnectionManager>;
type WatchdogLock = seckill_lock::WatchdogLock<ConnectionManager>;

/// One "instance": a connection and the shared subscription.
async fn instance(redis: &RedisServer, lease: Duration) -> WatchdogLocks {
    handing_off(redis, lease, seckill_lock::watchdog::DEFAULT_HANDOFFS).await
}

/// One "instance" whose holders hand a lock on at most `in_a_row` times in a row.
async fn handing_off(redis: &RedisServer, lease: Duration, in_a_row: u32) -> WatchdogLocks {
    let client = redis::Client::open(redis.url()).unwrap();
    let conn = ConnectionManager::new(client.clone()).await.unwrap();
    let before = subscribers(redis).await;
    let locks = WatchdogLocks::builder(client, conn)
        .lease(lease)
        .namespace(Namespace::new("test"))
        .handoffs(in_a_row)
        .start();
    // The subscription started (Redis names it), so the first unlock message is not missed
    // (a missed one would only be caught by the TTL retry, which these tests tell apart
    // from a wake-up).
    subscribed(redis, before).await;
    locks
}

fn handle(locks: &WatchdogLocks, name: &str) -> WatchdogLock {
    locks.lock(name)
}

async fn key_count(redis: &RedisServer) -> u64 {
    redis::cmd("DBSIZE")
        .query_async(&mut redis.conn().await)
        .await
        .unwrap()
}

/// 10,000 lock/unlock cycles on fresh keys, each leaving nothing behind.
#[tokio::test]
async fn ten_thousand_lock_unlock_cycles_on_fresh_keys() {
    let redis = RedisServer::start();
    let locks = instance(&redis, DEFAULT_LEASE).await;
    for n in 0..10_000 {
        let mut lock = handle(&locks, &format!("cycle{n}"));
        lock.take(FOREVER).await.unwrap();
        assert!(
            lock.give_back().await.unwrap(),
            "cycle {n} was not released"
        );
    }
    assert_eq!(
        key_count(&redis).await,
        0,
        "released locks left keys behind"
    );
    assert_eq!(locks.counters().lost(), 0);
}

/// The same owner takes the lock again; each hold must be given back.
#[tokio::test]
async fn reentrant_lock_counts_holds() {
    let redis = RedisServer::start();
    let locks = instance(&redis, DEFAULT_LEASE).await;
    let mut lock = handle(&locks, "reentrant");
    lock.take(FOREVER).await.unwrap();
    assert!(lock.take(Duration::ZERO).await.unwrap(), "re-entry refused");
    assert_eq!(lock.hold_count().await.unwrap(), 2);
    let mut other = handle(&locks, "reentrant");
    assert!(
        !other.take(Duration::ZERO).await.unwrap(),
        "another owner got in"
    );
    lock.give_back().await.unwrap();
    assert!(lock.is_held().await.unwrap(), "one hold remains");
    assert!(
        lock.is_renewing(),
        "the watchdog runs while any hold remains"
    );
    lock.give_back().await.unwrap();
    assert!(!lock.is_locked().await.unwrap());
    assert!(!lock.is_renewing());
    assert!(other.take(Duration::ZERO).await.unwrap());
    other.give_back().await.unwrap();
}

/// A hand-off whose answer was lost: Redis already names the waiter as the holder, and the
/// waiter, told it was not handed the lock, tries on its own with a handle that holds
/// nothing. It gets the lock as one hold, not a second one, so that its one release frees
/// the lock (two holds would leave it held, unrenewed, for a whole lease).
#[tokio::test]
async fn a_handle_that_finds_the_lock_already_its_own_takes_one_hold() {
    let redis = RedisServer::start();
    let locks = instance(&redis, DEFAULT_LEASE).await;
    let mut lock = handle(&locks, "handed");
    let mut conn = redis.conn().await;
    let _: () = redis::pipe()
        .hset("test:handed:lock", lock.holder(), 1)
        .pexpire("test:handed:lock", 30_000)
        .query_async(&mut conn)
        .await
        .unwrap();
    assert!(lock.take(Duration::ZERO).await.unwrap());
    assert_eq!(lock.hold_count().await.unwrap(), 1, "one hold, not two");
    assert!(lock.give_back().await.unwrap());
    assert!(
        !lock.is_locked().await.unwrap(),
        "its release frees the lock"
    );
}

/// A holds, B waits; A releases, and B is woken and acquires long before the lease
/// (30 s) could have expired: the unlock message did it (hand-offs off).
#[tokio::test]
async fn waiter_acquires_when_holder_releases() {
    let redis = RedisServer::start();
    let locks = handing_off(&redis, DEFAULT_LEASE, 0).await;
    let mut a = handle(&locks, "handoff");
    a.take(FOREVER).await.unwrap();
    let mut b = handle(&locks, "handoff");
    let since = script_calls(&redis).await;
    let waiting = tokio::spawn(async move {
        let got = b.take(Duration::from_secs(10)).await.unwrap();
        (got, b)
    });
    // B has tried, found the lock held, and waits.
    tried(&redis, since, 1).await;
    assert!(!waiting.is_finished(), "B got in while A held the lock");
    assert!(a.give_back().await.unwrap());
    let (got, mut b) = waiting.await.unwrap();
    assert!(got, "B did not acquire after A released");
    assert!(b.is_held().await.unwrap());
    assert!(
        locks.counters().wakeups() >= 1,
        "B was not woken by the unlock message"
    );
    b.give_back().await.unwrap();
}

/// A holds, B and C wait: the lock passes A -> one of them -> the other.
#[tokio::test]
async fn three_way_handoff() {
    let redis = RedisServer::start();
    let locks = instance(&redis, DEFAULT_LEASE).await;
    let mut a = handle(&locks, "three");
    a.take(FOREVER).await.unwrap();
    let order = Arc::new(std::sync::Mutex::new(Vec::new()));
    let since = script_calls(&redis).await;
    let waiters: Vec<_> = ["B", "C"]
        .into_iter()
        .map(|name| {
            let mut lock = handle(&locks, "three");
            let order = order.clone();
            tokio::spawn(async move {
                assert!(
                    lock.take(Duration::from_secs(10)).await.unwrap(),
                    "{name} starved"
                );
                order.lock().unwrap().push(name);
                tokio::time::sleep(Duration::from_millis(100)).await;
                assert!(lock.give_back().await.unwrap());
            })
        })
        .collect();
    // Both have tried and wait.
    tried(&redis, since, 2).await;
    assert!(
        order.lock().unwrap().is_empty(),
        "someone got in while A held the lock"
    );
    a.give_back().await.unwrap();
    for waiter in waiters {
        waiter.await.unwrap();
    }
    assert_eq!(order.lock().unwrap().len(), 2);
    assert_eq!(key_count(&redis).await, 0);
}

/// An acquire with a short wait gives up while the lock is held.
#[tokio::test]
async fn acquire_with_a_short_wait_fails_while_held() {
    let redis = RedisServer::start();
    let locks = instance(&redis, DEFAULT_LEASE).await;
    let mut a = handle(&locks, "short");
    a.take(FOREVER).await.unwrap();
    let mut b = handle(&locks, "short");
    assert!(!b.take(Duration::from_millis(100)).await.unwrap());
    assert!(a.is_held().await.unwrap());
    a.give_back().await.unwrap();
}

/// With an explicit lease no watchdog runs, and the lock expires by itself.
#[tokio::test]
async fn lease_expires_without_watchdog() {
    let redis = RedisServer::start();
    let locks = instance(&redis, DEFAULT_LEASE).await;
    let mut a = handle(&locks, "lease").with_lease(Lease::Fixed(Duration::from_millis(200)));
    assert!(a.take(Duration::ZERO).await.unwrap());
    assert!(
        !a.is_renewing(),
        "an explicit lease must not start a watchdog"
    );
    let ttl = a.remaining_ttl().await.unwrap().expect("held");
    assert!(ttl <= Duration::from_millis(200));
    tokio::time::sleep(Duration::from_millis(400)).await;
    assert!(!a.is_locked().await.unwrap(), "the lease did not expire");
    let mut b = handle(&locks, "lease");
    assert!(b.take(Duration::ZERO).await.unwrap());
    b.give_back().await.unwrap();
}

/// 1,000 concurrent acquires with a 10 ms wait on one key: exactly one succeeds.
#[tokio::test]
async fn thousand_concurrent_acquires_exactly_one_succeeds() {
    let redis = RedisServer::start();
    let locks = instance(&redis, DEFAULT_LEASE).await;
    let acquired = Arc::new(AtomicUsize::new(0));
    let tasks: Vec<_> = (0..1000)
        .map(|_| {
            let mut lock = handle(&locks, "thousand");
            let acquired = acquired.clone();
            tokio::spawn(async move {
                if lock.take(Duration::from_millis(10)).await.unwrap() {
                    acquired.fetch_add(1, Ordering::SeqCst);
                    Some(lock)
                } else {
                    None
                }
            })
        })
        .collect();
    let mut winners = Vec::new();
    for task in tasks {
        winners.extend(task.await.unwrap());
    }
    assert_eq!(acquired.load(Ordering::SeqCst), 1);
    for mut winner in winners {
        winner.give_back().await.unwrap();
    }
}

/// 100 concurrent with a long wait and a tiny lease, none unlocking: each acquires once
/// the previous lease runs out. No unlock message is ever sent, so every hand-off is the
/// waiters' retry at the lock's remaining TTL.
#[tokio::test]
async fn hundred_concurrent_with_long_wait_and_tiny_lease_all_acquire() {
    let redis = RedisServer::start();
    let locks = instance(&redis, DEFAULT_LEASE).await;
    let tasks: Vec<_> = (0..100)
        .map(|_| {
            let mut lock =
                handle(&locks, "hundred").with_lease(Lease::Fixed(Duration::from_millis(20)));
            tokio::spawn(async move { lock.take(Duration::from_secs(30)).await.unwrap() })
        })
        .collect();
    let mut acquired = 0;
    for task in tasks {
        acquired += usize::from(task.await.unwrap());
    }
    assert_eq!(acquired, 100);
    assert_eq!(
        locks.counters().wakeups(),
        0,
        "no unlock, so no wake-up message"
    );
}

/// The watchdog keeps the lock well past its lease while the holder works: once it has
/// renewed the lease four times (a third of a lease apart: longer than the lease), the lock
/// is still held, in Redis and as the holder knows it.
#[tokio::test]
async fn renewal_keeps_lock_alive_past_its_lease() {
    let redis = RedisServer::start();
    let locks = instance(&redis, Duration::from_millis(1_000)).await;
    let mut a = handle(&locks, "renew");
    a.take(FOREVER).await.unwrap();
    renewed(&locks, 0, 4).await;
    assert!(
        a.is_held().await.unwrap(),
        "the lock expired under a live holder"
    );
    assert!(!a.is_lost());
    let mut b = handle(&locks, "renew");
    assert!(!b.take(Duration::ZERO).await.unwrap());
    assert!(a.give_back().await.unwrap());
}

/// Nothing renews after unlock (or after abandon): no zombie watchdog.
#[tokio::test]
async fn nothing_renews_after_unlock() {
    let redis = RedisServer::start();
    let locks = instance(&redis, Duration::from_millis(300)).await;
    let mut a = handle(&locks, "zombie");
    a.take(FOREVER).await.unwrap();
    tokio::time::sleep(Duration::from_millis(250)).await;
    a.give_back().await.unwrap();
    assert!(!a.is_renewing());
    let (renewals, lost) = (locks.counters().renewals(), locks.counters().lost());
    tokio::time::sleep(Duration::from_millis(800)).await;
    assert_eq!(
        locks.counters().renewals(),
        renewals,
        "a watchdog renewed after unlock"
    );
    assert_eq!(
        locks.counters().lost(),
        lost,
        "a watchdog ticked after unlock"
    );

    // Abandoned (the holder "died"): the watchdog stops and the lock expires one lease later.
    let mut b = handle(&locks, "zombie");
    b.take(FOREVER).await.unwrap();
    b.abandon();
    assert!(!b.is_renewing());
    let renewals = locks.counters().renewals();
    assert!(b.is_locked().await.unwrap(), "abandon does not release");
    tokio::time::sleep(Duration::from_millis(600)).await;
    assert!(
        !b.is_locked().await.unwrap(),
        "an abandoned lock did not expire"
    );
    assert_eq!(locks.counters().renewals(), renewals);
}

/// A released lock leaves no key behind, reentrant holds included.
#[tokio::test]
async fn released_lock_leaves_no_key_behind() {
    let redis = RedisServer::start();
    let locks = instance(&redis, DEFAULT_LEASE).await;
    let mut a = handle(&locks, "clean");
    for _ in 0..3 {
        a.take(FOREVER).await.unwrap();
    }
    for _ in 0..3 {
        a.give_back().await.unwrap();
    }
    assert_eq!(key_count(&redis).await, 0);
    assert!(
        !a.give_back().await.unwrap(),
        "unlocking a lock not held reports false"
    );
}

/// When the lock disappears under a live holder, the next watchdog tick says so.
#[tokio::test]
async fn watchdog_reports_a_lost_lock() {
    let redis = RedisServer::start();
    let locks = instance(&redis, Duration::from_millis(300)).await;
    let mut a = handle(&locks, "lost");
    a.take(FOREVER).await.unwrap();
    let _: () = redis.conn().await.del("test:lost:lock").await.unwrap();
    // Its next tick finds it gone (the bound says a hang).
    let until = tokio::time::Instant::now() + Duration::from_secs(10);
    while locks.counters().lost() == 0 {
        assert!(
            tokio::time::Instant::now() < until,
            "no tick found the lock gone"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    assert!(a.is_lost(), "the holder was not told");
    assert_eq!(locks.counters().lost(), 1);
    assert!(
        !a.is_renewing(),
        "the watchdog goes on after finding the lock gone"
    );
    assert!(
        !a.give_back().await.unwrap(),
        "unlock reports the lock was not ours"
    );
}

/// Ownership is per task: two tasks on one thread are two holders.
#[test]
fn holders_are_per_task_not_per_thread() {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let redis = RedisServer::start();
        let locks = instance(&redis, DEFAULT_LEASE).await;
        let mut first = handle(&locks, "tasks");
        first.take(FOREVER).await.unwrap();
        let mut second = handle(&locks, "tasks");
        let other_task = tokio::spawn(async move { second.take(Duration::ZERO).await.unwrap() });
        assert!(
            !other_task.await.unwrap(),
            "a second task on the same thread re-entered"
        );
        first.give_back().await.unwrap();
    });
}

/// One unlock wakes one waiter per instance, not every waiter (hand-offs off).
#[tokio::test]
async fn unlock_wakes_one_waiter_per_instance() {
    let redis = RedisServer::start();
    let one = handing_off(&redis, DEFAULT_LEASE, 0).await;
    let two = handing_off(&redis, DEFAULT_LEASE, 0).await;
    let mut holder = handle(&one, "wake");
    holder.take(FOREVER).await.unwrap();
    let acquired = Arc::new(AtomicUsize::new(0));
    // The first waiter in holds the lock until told, so that the first hand-off can be
    // looked at alone.
    let (go, gone) = tokio::sync::watch::channel(false);
    let since = script_calls(&redis).await;
    let mut waiters = Vec::new();
    for locks in [&one, &two] {
        for _ in 0..3 {
            let mut lock = handle(locks, "wake");
            let (acquired, mut gone) = (acquired.clone(), gone.clone());
            waiters.push(tokio::spawn(async move {
                if lock.take(Duration::from_secs(20)).await.unwrap() {
                    acquired.fetch_add(1, Ordering::SeqCst);
                    gone.wait_for(|go| *go).await.unwrap();
                    lock.give_back().await.unwrap();
                }
            }));
        }
    }
    // All six have tried and wait.
    tried(&redis, since, 6).await;
    let since = script_calls(&redis).await;
    holder.give_back().await.unwrap();
    // The release, and a try by each instance's woken waiter (the bound says a hang).
    tried(&redis, since, 3).await;
    let until = tokio::time::Instant::now() + Duration::from_secs(10);
    while acquired.load(Ordering::SeqCst) == 0
        || one.counters().wakeups() == 0
        || two.counters().wakeups() == 0
    {
        assert!(tokio::time::Instant::now() < until, "no waiter woke");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    assert_eq!(
        acquired.load(Ordering::SeqCst),
        1,
        "exactly one waiter took the lock"
    );
    assert_eq!(
        one.counters().wakeups(),
        1,
        "instance one woke more than one waiter"
    );
    assert_eq!(
        two.counters().wakeups(),
        1,
        "instance two woke more than one waiter"
    );
    go.send(true).unwrap();
    for waiter in waiters {
        waiter.await.unwrap();
    }
    assert_eq!(
        acquired.load(Ordering::SeqCst),
        6,
        "every waiter got its turn"
    );
}

/// A holder hands the lock straight to a sleeping waiter of its own instance: no message,
/// no try of the waiter's own; the waiter holds it in Redis, under its own name.
#[tokio::test]
async fn holder_hands_the_lock_to_a_waiter_of_its_instance() {
    let redis = RedisServer::start();
    let locks = instance(&redis, DEFAULT_LEASE).await;
    let mut a = handle(&locks, "direct");
    a.take(FOREVER).await.unwrap();
    let mut b = handle(&locks, "direct");
    let since = script_calls(&redis).await;
    let waiting = tokio::spawn(async move {
        let got = b.take(Duration::from_secs(10)).await.unwrap();
        (got, b)
    });
    tried(&redis, since, 1).await;
    assert!(a.give_back().await.unwrap());
    let (got, mut b) = waiting.await.unwrap();
    assert!(got, "B did not get the lock");
    assert!(b.is_held().await.unwrap(), "Redis does not name B");
    assert!(!a.is_held().await.unwrap());
    assert!(b.is_renewing(), "B's watchdog did not start");
    assert_eq!(locks.counters().handoffs(), 1);
    assert_eq!(locks.counters().wakeups(), 0, "a message woke B");
    assert!(b.give_back().await.unwrap());
    assert_eq!(key_count(&redis).await, 0);
}

/// A release cancelled after it reserved a sleeping waiter for the hand-off (its future
/// dropped at its first await, as a `timeout` or a `select!` drops it) passes the hand-off
/// on: the waiter tries again and gets the lock (handed over, or freed by the lease) within
/// its wait, instead of sleeping on a grant that never comes.
#[tokio::test]
async fn a_cancelled_release_does_not_leave_its_reserved_waiter_asleep() {
    let redis = RedisServer::start();
    let locks = instance(&redis, Duration::from_millis(500)).await;
    let mut a = handle(&locks, "cancelled");
    a.take(FOREVER).await.unwrap();
    let mut b = handle(&locks, "cancelled");
    let wait = Duration::from_secs(3);
    let waiting = tokio::spawn(async move {
        let got = b.take(wait).await;
        (got, b)
    });
    // B asleep: with a lease this short A's renewals are scripts too, so B's try is not
    // told apart by counting them; B has a third of a second to try and sleep.
    tokio::time::sleep(Duration::from_millis(300)).await;
    // Polled once — B reserved, the script on its way — then dropped.
    let cancelled = cut(Cut::At(1), a.give_back()).await;
    assert!(
        cancelled.is_none(),
        "the release finished before it could be cancelled"
    );
    let (got, mut b) = tokio::time::timeout(wait + Duration::from_secs(2), waiting)
        .await
        .expect("B sleeps past its wait: the cancelled release left it reserved")
        .unwrap();
    assert!(got.unwrap(), "B did not get the lock within its wait");
    assert!(b.give_back().await.unwrap());
    assert_eq!(key_count(&redis).await, 0);
}

/// Lost means lost: with Redis frozen, a holder counts its lock as lost once the lease has
/// run out since its last renewal — before any tick of its watchdog can reach Redis to
/// find the lock gone.
#[tokio::test]
async fn a_lease_run_out_while_redis_is_away_is_lost() {
    let redis = RedisServer::start();
    let lease = Duration::from_millis(600);
    let locks = instance(&redis, lease).await;
    let mut a = handle(&locks, "frozen");
    assert!(a.take(FOREVER).await.unwrap());
    renewed(&locks, 0, 1).await;
    assert!(!a.is_lost(), "renewed by its watchdog: still held");
    redis.signal("STOP");
    tokio::time::sleep(lease * 2).await;
    let lost = a.is_lost();
    redis.signal("CONT");
    assert!(
        lost,
        "the lease ran out with Redis away, and the holder still counts it held"
    );
    assert!(
        !a.give_back().await.unwrap(),
        "the lock expired in Redis too"
    );
    assert_eq!(key_count(&redis).await, 0);
}

/// A lease taken without a watchdog (Redisson's `lock(leaseTime)`) is lost when it runs
/// out, and the holder knows it without asking Redis.
#[tokio::test]
async fn a_lease_without_a_watchdog_is_lost_when_it_runs_out() {
    let redis = RedisServer::start();
    let locks = instance(&redis, DEFAULT_LEASE).await;
    let lease = Duration::from_millis(300);
    let mut a = handle(&locks, "leased").with_lease(Lease::Fixed(lease));
    assert!(a.take(FOREVER).await.unwrap());
    assert!(!a.is_lost());
    tokio::time::sleep(lease + Duration::from_millis(100)).await;
    assert!(a.is_lost(), "its lease ran out");
    assert!(!a.give_back().await.unwrap());
}

/// Giving back one of two holds re-applies the handle's own lease, not the instance's: a
/// holder that asked for a short lease keeps it short.
#[tokio::test]
async fn a_partial_release_keeps_the_handles_own_lease() {
    let redis = RedisServer::start();
    let locks = instance(&redis, DEFAULT_LEASE).await;
    let lease = Duration::from_millis(1_000);
    let mut lock = handle(&locks, "own-lease").with_lease(Lease::Fixed(lease));
    assert!(lock.take(FOREVER).await.unwrap());
    assert!(lock.take(FOREVER).await.unwrap());
    assert!(lock.give_back().await.unwrap());
    let ttl = lock.remaining_ttl().await.unwrap().expect("still held");
    assert!(ttl <= lease, "the instance's 30 s lease came back: {ttl:?}");
    assert!(lock.give_back().await.unwrap());
}

/// A holder can await the loss: `lost()` returns once a tick finds the lock taken away,
/// and, with no watchdog, once the lease has run out — and not before.
#[tokio::test]
async fn a_holder_awaiting_the_loss_wakes_when_the_lock_is_gone() {
    let redis = RedisServer::start();
    let locks = instance(&redis, Duration::from_millis(1_000)).await;

    // Taken away under a watchdog: its next tick (every third of a lease) finds it gone. Not
    // before: while the watchdog renews it — past its lease — lost() has not returned.
    let guard = handle(&locks, "awaited").acquire().await.expect("free");
    let renewals = locks.counters().renewals();
    {
        let lost = guard.lost();
        tokio::pin!(lost);
        let kept = async {
            renewed(&locks, renewals, 4).await;
            !guard.is_lost()
        };
        tokio::select! {
            () = &mut lost => panic!("lost() returned while the watchdog kept the lock"),
            kept = kept => assert!(kept, "the watchdog's renewals kept the lock"),
        }
        let _: u64 = redis.conn().await.del("test:awaited:lock").await.unwrap();
        tokio::time::timeout(Duration::from_secs(10), lost)
            .await
            .expect("lost() woke when a tick found the lock gone");
    }
    assert!(guard.is_lost());
    assert!(!guard.release().await.unwrap());

    // An explicit lease, unrenewed: lost at its end — not before, counted from before the
    // acquire was sent (a lower bound no slowness can break).
    let lease = Duration::from_millis(200);
    let started = std::time::Instant::now();
    let guard = handle(&locks, "leased-awaited")
        .with_lease(Lease::Fixed(lease))
        .acquire()
        .await
        .expect("free");
    tokio::time::timeout(Duration::from_secs(10), guard.lost())
        .await
        .expect("lost() woke when the lease ran out");
    assert!(started.elapsed() >= lease, "woke before the lease ended");
}

/// Hand-offs in a row are bounded: past the instance's `handoffs`, a holder releases the lock for
/// every instance (a message), then hands on again.
#[tokio::test]
async fn handoffs_in_a_row_are_bounded() {
    let redis = RedisServer::start();
    let locks = handing_off(&redis, DEFAULT_LEASE, 2).await;
    let mut a = handle(&locks, "bounded");
    a.take(FOREVER).await.unwrap();
    let served = Arc::new(AtomicUsize::new(0));
    let since = script_calls(&redis).await;
    let waiters: Vec<_> = (0..4)
        .map(|_| {
            let mut lock = handle(&locks, "bounded");
            let served = served.clone();
            tokio::spawn(async move {
                assert!(lock.take(Duration::from_secs(10)).await.unwrap());
                served.fetch_add(1, Ordering::SeqCst);
                tokio::time::sleep(Duration::from_millis(50)).await;
                assert!(lock.give_back().await.unwrap());
            })
        })
        .collect();
    // All four have tried and wait.
    tried(&redis, since, 4).await;
    a.give_back().await.unwrap();
    for waiter in waiters {
        waiter.await.unwrap();
    }
    assert_eq!(served.load(Ordering::SeqCst), 4);
    // Five releases: two hand-offs, a release for everybody (one waiter woken), a
    // hand-off, and the last release with nobody left.
    assert_eq!(locks.counters().handoffs(), 3);
    assert!(locks.counters().wakeups() >= 1);
    assert_eq!(key_count(&redis).await, 0);
}

fn fair_handle(locks: &WatchdogLocks, name: &str) -> WatchdogLock {
    handle(locks, name).fair(true)
}

/// Waits until the fair lock `name`'s queue in Redis holds `waiters` (the bound says a
/// hang).
async fn queued(redis: &RedisServer, name: &str, waiters: u64) {
    let key = format!("test:{name}:lock:queue");
    let mut conn = redis.conn().await;
    let until = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        let now: u64 = conn.llen(&key).await.unwrap();
        if now == waiters {
            return;
        }
        assert!(
            tokio::time::Instant::now() < until,
            "{name}'s queue holds {now}, not {waiters}"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// The fair lock serves its waiters in the order they first tried, across two instances.
#[tokio::test]
async fn fair_lock_serves_waiters_in_arrival_order_across_instances() {
    let redis = RedisServer::start();
    let one = instance(&redis, DEFAULT_LEASE).await;
    let two = instance(&redis, DEFAULT_LEASE).await;
    let mut holder = fair_handle(&one, "fair");
    holder.take(FOREVER).await.unwrap();
    let order = Arc::new(std::sync::Mutex::new(Vec::new()));
    let mut waiters = Vec::new();
    for n in 0..8 {
        let locks = if n % 2 == 0 { &one } else { &two };
        let mut lock = fair_handle(locks, "fair");
        let order = order.clone();
        waiters.push(tokio::spawn(async move {
            assert!(lock.take(Duration::from_secs(20)).await.unwrap());
            order.lock().unwrap().push(n);
            tokio::time::sleep(Duration::from_millis(20)).await;
            assert!(lock.give_back().await.unwrap());
        }));
        // Each joins the queue before the next tries.
        queued(&redis, "fair", n + 1).await;
    }
    let queued: Vec<String> = redis
        .conn()
        .await
        .lrange("test:fair:lock:queue", 0, -1)
        .await
        .unwrap();
    assert_eq!(queued.len(), 8, "every waiter is in the queue");
    holder.give_back().await.unwrap();
    for waiter in waiters {
        waiter.await.unwrap();
    }
    assert_eq!(*order.lock().unwrap(), (0..8).collect::<Vec<_>>());
    assert_eq!(key_count(&redis).await, 0, "the queue is left empty");
}

/// A fair waiter that gives up leaves the queue, and the one behind it still gets its turn.
#[tokio::test]
async fn fair_waiter_that_gives_up_leaves_the_queue() {
    let redis = RedisServer::start();
    let locks = instance(&redis, DEFAULT_LEASE).await;
    let mut a = fair_handle(&locks, "quit");
    a.take(FOREVER).await.unwrap();
    let mut quitter = fair_handle(&locks, "quit");
    let quitter_id = quitter.holder().to_owned();
    // The quitter's wait outlasts the two joining the queue (seen in Redis), and then
    // runs out while the lock is still held.
    let quits =
        tokio::spawn(async move { quitter.take(Duration::from_millis(1_500)).await.unwrap() });
    queued(&redis, "quit", 1).await;
    let mut patient = fair_handle(&locks, "quit");
    let waits = tokio::spawn(async move {
        let got = patient.take(Duration::from_secs(10)).await.unwrap();
        patient.give_back().await.unwrap();
        got
    });
    queued(&redis, "quit", 2).await;
    assert!(!quits.await.unwrap(), "the quitter got the lock");
    let mut conn = redis.conn().await;
    let queued: Vec<String> = conn.lrange("test:quit:lock:queue", 0, -1).await.unwrap();
    assert!(!queued.contains(&quitter_id), "still queued: {queued:?}");
    assert_eq!(queued.len(), 1, "the patient waiter stays: {queued:?}");
    let timeout: Option<f64> = conn
        .zscore("test:quit:lock:waiting", &quitter_id)
        .await
        .unwrap();
    assert!(timeout.is_none());
    a.give_back().await.unwrap();
    assert!(
        waits.await.unwrap(),
        "the waiter behind the quitter starved"
    );
}

/// A fair waiter whose instance died stays at the head of the queue only until its
/// patience runs out; then the next waiter gets the lock.
#[tokio::test]
async fn dead_fair_waiter_drops_out_of_the_queue() {
    let redis = RedisServer::start();
    let alive = instance(&redis, DEFAULT_LEASE).await;
    let mut holder = fair_handle(&alive, "dead");
    holder.take(FOREVER).await.unwrap();
    {
        let doomed = instance(&redis, DEFAULT_LEASE).await;
        let mut lock = fair_handle(&doomed, "dead");
        let task = tokio::spawn(async move { lock.take(Duration::from_secs(60)).await });
        queued(&redis, "dead", 1).await;
        // The instance dies: its waiter never tries again, nor leaves.
        task.abort();
    }
    let mut next = fair_handle(&alive, "dead");
    let waits = tokio::spawn(async move {
        let got = next.take(Duration::from_secs(20)).await.unwrap();
        next.give_back().await.unwrap();
        got
    });
    queued(&redis, "dead", 2).await;
    holder.give_back().await.unwrap();
    assert!(
        waits.await.unwrap(),
        "the dead waiter kept its turn for ever"
    );
    let queued: u64 = redis
        .conn()
        .await
        .llen("test:dead:lock:queue")
        .await
        .unwrap();
    assert_eq!(queued, 0);
}

/// Waits until `locks`' watchdogs have renewed `more` leases since `since` (the bound
/// says a hang).
async fn renewed(locks: &WatchdogLocks, since: u64, more: u64) {
    let until = tokio::time::Instant::now() + Duration::from_secs(10);
    while locks.counters().renewals() < since + more {
        assert!(
            tokio::time::Instant::now() < until,
            "the watchdog renewed {} of {more} leases",
            locks.counters().renewals() - since
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}
