//! The watchdog lock as a library, against a real Redis: the cases of Redisson's lock test
//! suite (`RedissonDistributedLockerTest`, quoted in the seeds), and the watchdog's own
//! promises — renewal while held, none after, and a lost lock reported.

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use common::RedisServer;
use redis::AsyncCommands;
use redis::aio::ConnectionManager;
use seckill::lock::watchdog::DEFAULT_LEASE;
use seckill::lock::{OwnerIds, WatchdogLock, WatchdogLocks};
use seckill::store::{Nodes, RedisConn};

const PATTERN: &str = "test:*:released";

/// One "instance": a connection and the shared subscription.
async fn instance(redis: &RedisServer, lease: Duration) -> WatchdogLocks {
    let client = redis::Client::open(redis.url()).unwrap();
    let conn = ConnectionManager::new(client.clone()).await.unwrap();
    let locks = WatchdogLocks::start(
        Nodes::Fixed(vec![client]),
        RedisConn::Single(conn),
        lease,
        PATTERN,
    );
    // Let the subscription start, so the first unlock message is not missed (a missed one
    // would only be caught by the TTL retry, which these tests tell apart from a wake-up).
    tokio::time::sleep(Duration::from_millis(100)).await;
    locks
}

fn handle(locks: &WatchdogLocks, name: &str, owners: &OwnerIds) -> WatchdogLock {
    locks.lock(
        &format!("test:{name}:lock"),
        &format!("test:{name}:released"),
        &owners.next(),
    )
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
    let owners = OwnerIds::new();
    for n in 0..10_000 {
        let mut lock = handle(&locks, &format!("cycle{n}"), &owners);
        lock.lock().await.unwrap();
        assert!(lock.unlock().await.unwrap(), "cycle {n} was not released");
    }
    assert_eq!(
        key_count(&redis).await,
        0,
        "released locks left keys behind"
    );
    assert_eq!(locks.counters().lost.get(), 0);
}

/// The same owner takes the lock again; each hold must be given back.
#[tokio::test]
async fn reentrant_lock_counts_holds() {
    let redis = RedisServer::start();
    let locks = instance(&redis, DEFAULT_LEASE).await;
    let owners = OwnerIds::new();
    let mut lock = handle(&locks, "reentrant", &owners);
    lock.lock().await.unwrap();
    assert!(
        lock.try_lock(Duration::ZERO, None).await.unwrap(),
        "re-entry refused"
    );
    assert_eq!(lock.hold_count().await.unwrap(), 2);
    let mut other = handle(&locks, "reentrant", &owners);
    assert!(
        !other.try_lock(Duration::ZERO, None).await.unwrap(),
        "another owner got in"
    );
    lock.unlock().await.unwrap();
    assert!(lock.is_held().await.unwrap(), "one hold remains");
    assert!(
        lock.is_renewing(),
        "the watchdog runs while any hold remains"
    );
    lock.unlock().await.unwrap();
    assert!(!lock.is_locked().await.unwrap());
    assert!(!lock.is_renewing());
    assert!(other.try_lock(Duration::ZERO, None).await.unwrap());
    other.unlock().await.unwrap();
}

/// A holds, B waits; A releases, and B is woken and acquires long before the lease
/// (30 s) could have expired: the unlock message did it (hand-offs off).
#[tokio::test]
async fn waiter_acquires_when_holder_releases() {
    let redis = RedisServer::start();
    let locks = instance(&redis, DEFAULT_LEASE).await;
    locks.set_hand_offs(0);
    let owners = OwnerIds::new();
    let mut a = handle(&locks, "handoff", &owners);
    a.lock().await.unwrap();
    let mut b = handle(&locks, "handoff", &owners);
    let waiting = tokio::spawn(async move {
        let got = b.try_lock(Duration::from_secs(10), None).await.unwrap();
        (got, b)
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(!waiting.is_finished(), "B got in while A held the lock");
    assert!(a.unlock().await.unwrap());
    let (got, mut b) = waiting.await.unwrap();
    assert!(got, "B did not acquire after A released");
    assert!(b.is_held().await.unwrap());
    assert!(
        locks.counters().wakeups.get() >= 1,
        "B was not woken by the unlock message"
    );
    b.unlock().await.unwrap();
}

/// A holds, B and C wait: the lock passes A -> one of them -> the other.
#[tokio::test]
async fn three_way_hand_off() {
    let redis = RedisServer::start();
    let locks = instance(&redis, DEFAULT_LEASE).await;
    let owners = Arc::new(OwnerIds::new());
    let mut a = handle(&locks, "three", &owners);
    a.lock().await.unwrap();
    let order = Arc::new(std::sync::Mutex::new(Vec::new()));
    let waiters: Vec<_> = ["B", "C"]
        .into_iter()
        .map(|name| {
            let mut lock = handle(&locks, "three", &owners);
            let order = order.clone();
            tokio::spawn(async move {
                assert!(
                    lock.try_lock(Duration::from_secs(10), None).await.unwrap(),
                    "{name} starved"
                );
                order.lock().unwrap().push(name);
                tokio::time::sleep(Duration::from_millis(100)).await;
                assert!(lock.unlock().await.unwrap());
            })
        })
        .collect();
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(
        order.lock().unwrap().is_empty(),
        "someone got in while A held the lock"
    );
    a.unlock().await.unwrap();
    for waiter in waiters {
        waiter.await.unwrap();
    }
    assert_eq!(order.lock().unwrap().len(), 2);
    assert_eq!(key_count(&redis).await, 0);
}

/// try_lock with a short wait gives up while the lock is held.
#[tokio::test]
async fn try_lock_with_short_wait_fails_while_held() {
    let redis = RedisServer::start();
    let locks = instance(&redis, DEFAULT_LEASE).await;
    let owners = OwnerIds::new();
    let mut a = handle(&locks, "short", &owners);
    a.lock().await.unwrap();
    let mut b = handle(&locks, "short", &owners);
    assert!(!b.try_lock(Duration::from_millis(100), None).await.unwrap());
    assert!(a.is_held().await.unwrap());
    a.unlock().await.unwrap();
}

/// With an explicit lease no watchdog runs, and the lock expires by itself.
#[tokio::test]
async fn lease_expires_without_watchdog() {
    let redis = RedisServer::start();
    let locks = instance(&redis, DEFAULT_LEASE).await;
    let owners = OwnerIds::new();
    let mut a = handle(&locks, "lease", &owners);
    assert!(
        a.try_lock(Duration::ZERO, Some(Duration::from_millis(200)))
            .await
            .unwrap()
    );
    assert!(
        !a.is_renewing(),
        "an explicit lease must not start a watchdog"
    );
    let ttl = a.remaining_ttl().await.unwrap().expect("held");
    assert!(ttl <= Duration::from_millis(200));
    tokio::time::sleep(Duration::from_millis(400)).await;
    assert!(!a.is_locked().await.unwrap(), "the lease did not expire");
    let mut b = handle(&locks, "lease", &owners);
    assert!(b.try_lock(Duration::ZERO, None).await.unwrap());
    b.unlock().await.unwrap();
}

/// 1,000 concurrent try_lock with a 10 ms wait on one key: exactly one acquires.
#[tokio::test]
async fn thousand_concurrent_try_locks_exactly_one_acquires() {
    let redis = RedisServer::start();
    let locks = instance(&redis, DEFAULT_LEASE).await;
    let owners = Arc::new(OwnerIds::new());
    let acquired = Arc::new(AtomicUsize::new(0));
    let tasks: Vec<_> = (0..1000)
        .map(|_| {
            let mut lock = handle(&locks, "thousand", &owners);
            let acquired = acquired.clone();
            tokio::spawn(async move {
                if lock
                    .try_lock(Duration::from_millis(10), None)
                    .await
                    .unwrap()
                {
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
        winner.unlock().await.unwrap();
    }
}

/// 100 concurrent with a long wait and a tiny lease, none unlocking: each acquires once
/// the previous lease runs out. No unlock message is ever sent, so every hand-off is the
/// waiters' retry at the lock's remaining TTL.
#[tokio::test]
async fn hundred_concurrent_with_long_wait_and_tiny_lease_all_acquire() {
    let redis = RedisServer::start();
    let locks = instance(&redis, DEFAULT_LEASE).await;
    let owners = Arc::new(OwnerIds::new());
    let tasks: Vec<_> = (0..100)
        .map(|_| {
            let mut lock = handle(&locks, "hundred", &owners);
            tokio::spawn(async move {
                lock.try_lock(Duration::from_secs(30), Some(Duration::from_millis(20)))
                    .await
                    .unwrap()
            })
        })
        .collect();
    let mut acquired = 0;
    for task in tasks {
        acquired += usize::from(task.await.unwrap());
    }
    assert_eq!(acquired, 100);
    assert_eq!(
        locks.counters().wakeups.get(),
        0,
        "no unlock, so no wake-up message"
    );
}

/// The watchdog keeps the lock well past its lease while the holder works.
#[tokio::test]
async fn renewal_keeps_lock_alive_past_its_lease() {
    let redis = RedisServer::start();
    let locks = instance(&redis, Duration::from_millis(300)).await;
    let owners = OwnerIds::new();
    let mut a = handle(&locks, "renew", &owners);
    a.lock().await.unwrap();
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert!(
        a.is_held().await.unwrap(),
        "the lock expired under a live holder"
    );
    assert!(!a.is_lost());
    assert!(
        locks.counters().renewals.get() >= 3,
        "renewed {} times",
        locks.counters().renewals.get()
    );
    let mut b = handle(&locks, "renew", &owners);
    assert!(!b.try_lock(Duration::ZERO, None).await.unwrap());
    assert!(a.unlock().await.unwrap());
}

/// Nothing renews after unlock (or after abandon): no zombie watchdog.
#[tokio::test]
async fn nothing_renews_after_unlock() {
    let redis = RedisServer::start();
    let locks = instance(&redis, Duration::from_millis(300)).await;
    let owners = OwnerIds::new();
    let mut a = handle(&locks, "zombie", &owners);
    a.lock().await.unwrap();
    tokio::time::sleep(Duration::from_millis(250)).await;
    a.unlock().await.unwrap();
    assert!(!a.is_renewing());
    let (renewals, lost) = (locks.counters().renewals.get(), locks.counters().lost.get());
    tokio::time::sleep(Duration::from_millis(800)).await;
    assert_eq!(
        locks.counters().renewals.get(),
        renewals,
        "a watchdog renewed after unlock"
    );
    assert_eq!(
        locks.counters().lost.get(),
        lost,
        "a watchdog ticked after unlock"
    );

    // Abandoned (the holder "died"): the watchdog stops and the lock expires one lease later.
    let mut b = handle(&locks, "zombie", &owners);
    b.lock().await.unwrap();
    b.abandon();
    assert!(!b.is_renewing());
    let renewals = locks.counters().renewals.get();
    assert!(b.is_locked().await.unwrap(), "abandon does not release");
    tokio::time::sleep(Duration::from_millis(600)).await;
    assert!(
        !b.is_locked().await.unwrap(),
        "an abandoned lock did not expire"
    );
    assert_eq!(locks.counters().renewals.get(), renewals);
}

/// A released lock leaves no key behind, reentrant holds included.
#[tokio::test]
async fn released_lock_leaves_no_key_behind() {
    let redis = RedisServer::start();
    let locks = instance(&redis, DEFAULT_LEASE).await;
    let owners = OwnerIds::new();
    let mut a = handle(&locks, "clean", &owners);
    for _ in 0..3 {
        a.lock().await.unwrap();
    }
    for _ in 0..3 {
        a.unlock().await.unwrap();
    }
    assert_eq!(key_count(&redis).await, 0);
    assert!(
        !a.unlock().await.unwrap(),
        "unlocking a lock not held reports false"
    );
}

/// When the lock disappears under a live holder, the next watchdog tick says so.
#[tokio::test]
async fn watchdog_reports_a_lost_lock() {
    let redis = RedisServer::start();
    let locks = instance(&redis, Duration::from_millis(300)).await;
    let owners = OwnerIds::new();
    let mut a = handle(&locks, "lost", &owners);
    a.lock().await.unwrap();
    let _: () = redis.conn().await.del("test:lost:lock").await.unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(a.is_lost(), "the holder was not told");
    assert_eq!(locks.counters().lost.get(), 1);
    assert!(
        !a.is_renewing(),
        "the watchdog goes on after finding the lock gone"
    );
    assert!(
        !a.unlock().await.unwrap(),
        "unlock reports the lock was not ours"
    );
}

/// Ownership is per task: two tasks on one thread are two owners.
#[test]
fn owners_are_per_task_not_per_thread() {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let redis = RedisServer::start();
        let locks = instance(&redis, DEFAULT_LEASE).await;
        let owners = Arc::new(OwnerIds::new());
        let mut first = handle(&locks, "tasks", &owners);
        first.lock().await.unwrap();
        let mut second = handle(&locks, "tasks", &owners);
        let other_task =
            tokio::spawn(async move { second.try_lock(Duration::ZERO, None).await.unwrap() });
        assert!(
            !other_task.await.unwrap(),
            "a second task on the same thread re-entered"
        );
        first.unlock().await.unwrap();
    });
}

/// One unlock wakes one waiter per instance, not every waiter (hand-offs off).
#[tokio::test]
async fn unlock_wakes_one_waiter_per_instance() {
    let redis = RedisServer::start();
    let one = instance(&redis, DEFAULT_LEASE).await;
    let two = instance(&redis, DEFAULT_LEASE).await;
    for locks in [&one, &two] {
        locks.set_hand_offs(0);
    }
    let owners = Arc::new(OwnerIds::new());
    let mut holder = handle(&one, "wake", &owners);
    holder.lock().await.unwrap();
    let acquired = Arc::new(AtomicUsize::new(0));
    let mut waiters = Vec::new();
    for locks in [&one, &two] {
        for _ in 0..3 {
            let mut lock = handle(locks, "wake", &owners);
            let acquired = acquired.clone();
            waiters.push(tokio::spawn(async move {
                if lock.try_lock(Duration::from_secs(20), None).await.unwrap() {
                    acquired.fetch_add(1, Ordering::SeqCst);
                    // Hold it, so that the first hand-off can be looked at alone.
                    tokio::time::sleep(Duration::from_millis(500)).await;
                    lock.unlock().await.unwrap();
                }
            }));
        }
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    holder.unlock().await.unwrap();
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(
        acquired.load(Ordering::SeqCst),
        1,
        "exactly one waiter took the lock"
    );
    assert_eq!(
        one.counters().wakeups.get(),
        1,
        "instance one woke more than one waiter"
    );
    assert_eq!(
        two.counters().wakeups.get(),
        1,
        "instance two woke more than one waiter"
    );
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
    let owners = OwnerIds::new();
    let mut a = handle(&locks, "direct", &owners);
    a.lock().await.unwrap();
    let mut b = handle(&locks, "direct", &owners);
    let waiting = tokio::spawn(async move {
        let got = b.try_lock(Duration::from_secs(10), None).await.unwrap();
        (got, b)
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(a.unlock().await.unwrap());
    let (got, mut b) = waiting.await.unwrap();
    assert!(got, "B did not get the lock");
    assert!(b.is_held().await.unwrap(), "Redis does not name B");
    assert!(!a.is_held().await.unwrap());
    assert!(b.is_renewing(), "B's watchdog did not start");
    assert_eq!(locks.counters().hand_offs.get(), 1);
    assert_eq!(locks.counters().wakeups.get(), 0, "a message woke B");
    assert!(b.unlock().await.unwrap());
    assert_eq!(key_count(&redis).await, 0);
}

/// Hand-offs in a row are bounded: past `set_hand_offs`, a holder releases the lock for
/// every instance (a message), then hands on again.
#[tokio::test]
async fn hand_offs_in_a_row_are_bounded() {
    let redis = RedisServer::start();
    let locks = instance(&redis, DEFAULT_LEASE).await;
    locks.set_hand_offs(2);
    let owners = Arc::new(OwnerIds::new());
    let mut a = handle(&locks, "bounded", &owners);
    a.lock().await.unwrap();
    let served = Arc::new(AtomicUsize::new(0));
    let waiters: Vec<_> = (0..4)
        .map(|_| {
            let mut lock = handle(&locks, "bounded", &owners);
            let served = served.clone();
            tokio::spawn(async move {
                assert!(lock.try_lock(Duration::from_secs(10), None).await.unwrap());
                served.fetch_add(1, Ordering::SeqCst);
                tokio::time::sleep(Duration::from_millis(50)).await;
                assert!(lock.unlock().await.unwrap());
            })
        })
        .collect();
    tokio::time::sleep(Duration::from_millis(300)).await;
    a.unlock().await.unwrap();
    for waiter in waiters {
        waiter.await.unwrap();
    }
    assert_eq!(served.load(Ordering::SeqCst), 4);
    // Five releases: two hand-offs, a release for everybody (one waiter woken), a
    // hand-off, and the last release with nobody left.
    assert_eq!(locks.counters().hand_offs.get(), 3);
    assert!(locks.counters().wakeups.get() >= 1);
    assert_eq!(key_count(&redis).await, 0);
}

fn fair_handle(locks: &WatchdogLocks, name: &str, owners: &OwnerIds) -> WatchdogLock {
    handle(locks, name, owners).fair(
        &format!("test:{name}:lock:queue"),
        &format!("test:{name}:lock:waiting"),
    )
}

/// The fair lock serves its waiters in the order they first tried, across two instances.
#[tokio::test]
async fn fair_lock_serves_waiters_in_arrival_order_across_instances() {
    let redis = RedisServer::start();
    let one = instance(&redis, DEFAULT_LEASE).await;
    let two = instance(&redis, DEFAULT_LEASE).await;
    let owners = Arc::new(OwnerIds::new());
    let mut holder = fair_handle(&one, "fair", &owners);
    holder.lock().await.unwrap();
    let order = Arc::new(std::sync::Mutex::new(Vec::new()));
    let mut waiters = Vec::new();
    for n in 0..8 {
        let locks = if n % 2 == 0 { &one } else { &two };
        let mut lock = fair_handle(locks, "fair", &owners);
        let order = order.clone();
        waiters.push(tokio::spawn(async move {
            assert!(lock.try_lock(Duration::from_secs(20), None).await.unwrap());
            order.lock().unwrap().push(n);
            tokio::time::sleep(Duration::from_millis(20)).await;
            assert!(lock.unlock().await.unwrap());
        }));
        // Each joins the queue before the next tries.
        tokio::time::sleep(Duration::from_millis(60)).await;
    }
    let queued: Vec<String> = redis
        .conn()
        .await
        .lrange("test:fair:lock:queue", 0, -1)
        .await
        .unwrap();
    assert_eq!(queued.len(), 8, "every waiter is in the queue");
    holder.unlock().await.unwrap();
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
    let owners = Arc::new(OwnerIds::new());
    let mut a = fair_handle(&locks, "quit", &owners);
    a.lock().await.unwrap();
    let mut quitter = fair_handle(&locks, "quit", &owners);
    let quitter_id = quitter.owner().to_owned();
    let quits = tokio::spawn(async move {
        quitter
            .try_lock(Duration::from_millis(400), None)
            .await
            .unwrap()
    });
    tokio::time::sleep(Duration::from_millis(100)).await;
    let mut patient = fair_handle(&locks, "quit", &owners);
    let waits = tokio::spawn(async move {
        let got = patient
            .try_lock(Duration::from_secs(10), None)
            .await
            .unwrap();
        patient.unlock().await.unwrap();
        got
    });
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
    a.unlock().await.unwrap();
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
    let owners = Arc::new(OwnerIds::new());
    let mut holder = fair_handle(&alive, "dead", &owners);
    holder.lock().await.unwrap();
    {
        let doomed = instance(&redis, DEFAULT_LEASE).await;
        let mut lock = fair_handle(&doomed, "dead", &owners);
        let task = tokio::spawn(async move { lock.try_lock(Duration::from_secs(60), None).await });
        tokio::time::sleep(Duration::from_millis(100)).await;
        // The instance dies: its waiter never tries again, nor leaves.
        task.abort();
    }
    let mut next = fair_handle(&alive, "dead", &owners);
    let waits = tokio::spawn(async move {
        let got = next.try_lock(Duration::from_secs(20), None).await.unwrap();
        next.unlock().await.unwrap();
        got
    });
    tokio::time::sleep(Duration::from_millis(100)).await;
    holder.unlock().await.unwrap();
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

/// A hand-off whose answer was lost on its way back (a timeout): Redis already names the
/// successor and has let it into the critical section, and the successor, not knowing,
/// tries on its own. It gets the lock with one hold, and no overlap is counted against
/// itself; its release then frees the lock.
#[tokio::test]
async fn a_hand_off_whose_answer_was_lost_is_one_hold_and_no_overlap() {
    use seckill::keys::{ProductId, ProductKeys};
    use seckill::lock::watchdog::{Release, Successor};
    use seckill::variants::{commit_release_script, lock_enter_script};

    let redis = RedisServer::start();
    let mut conn = redis.conn().await;
    let shard = ProductKeys::new(&ProductId::parse("101").unwrap()).whole();
    let _: () = conn.set(&shard.stock, 10).await.unwrap();
    let (lease, hold) = (DEFAULT_LEASE, Duration::from_secs(5));
    let lock_enter = |owner: &str| lock_enter_script(&shard, owner, lease, false, hold);
    let commit_release = |owner: &str, successor: Option<&str>| {
        let release = Release {
            owner: owner.to_owned(),
            lease,
            fair: false,
            successor: successor.map(|next| Successor {
                owner: next.to_owned(),
                lease,
                hold,
            }),
        };
        let order = format!("order-of-{owner}");
        commit_release_script(&shard, owner, &order, "test", "watchdog", true, &release)
    };
    let taken: (i64, i64, i64) = lock_enter("x").invoke_async(&mut conn).await.unwrap();
    assert_eq!(taken, (1, 10, 0));
    // X sells and hands the lock to Y, letting Y in with 9 units: this answer is "lost".
    let handed: (i64, i64, i64, i64) = commit_release("x", Some("y"))
        .invoke_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(handed, (9, 2, 9, 0));
    // Y tries by itself.
    let taken: (i64, i64, i64) = lock_enter("y").invoke_async(&mut conn).await.unwrap();
    assert_eq!(taken, (1, 9, 0), "Y holds it, reads 9, no overlap");
    let holds: Option<i64> = conn.hget(&shard.lock, "y").await.unwrap();
    assert_eq!(holds, Some(1), "one hold, not two");
    let overlaps: Option<i64> = conn.hget(&shard.audit, "lock_overlaps").await.unwrap();
    assert_eq!(overlaps, None);
    let released: (i64, i64) = commit_release("y", None)
        .invoke_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(released, (8, 1), "sold, and the lock released");
    let held: bool = conn.exists(&shard.lock).await.unwrap();
    assert!(!held);
}
