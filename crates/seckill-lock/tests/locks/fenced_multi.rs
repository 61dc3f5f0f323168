//! The fenced lock and the MultiLock, against a real Redis.

use std::time::Duration;

use redis::AsyncCommands;
use redis::aio::ConnectionManager;
use seckill_lock::{HolderId, Lease, Lock, MultiLock, Namespace, WatchdogLock, WatchdogLocks};
use seckill_testkit::RedisServer;

use crate::{script_calls, subscribed, subscribers, tried};

async fn instance(redis: &RedisServer) -> WatchdogLocks<ConnectionManager> {
    let client = redis::Client::open(redis.url()).unwrap();
    let conn = ConnectionManager::new(client.clone()).await.unwrap();
    let before = subscribers(redis).await;
    let locks = WatchdogLocks::builder(client, conn)
        .lease(Duration::from_secs(30))
        .namespace(Namespace::new("t"))
        .start();
    subscribed(redis, before).await;
    locks
}

/// Every take of a fenced lock issues a token greater than every one before it — across
/// holders, a hand-off between two holders of one instance, and a lease that ran out —
/// and the counter outlives the lock.
#[tokio::test]
async fn a_fenced_lock_issues_growing_tokens_across_holders_hand_offs_and_expiry() {
    let redis = RedisServer::start();
    let locks = instance(&redis).await;
    let fenced = || locks.lock("{fenced}").fenced(true);
    let free = |lock: WatchdogLock<ConnectionManager>| async move {
        lock.try_acquire().await.unwrap().expect("free")
    };
    let mut tokens = Vec::new();
    for _ in 0..3 {
        let guard = free(fenced()).await;
        tokens.push(guard.fencing_token().expect("a fenced lock's token"));
        assert!(guard.release().await.unwrap());
    }

    // Handed over: the waiter's token comes after the holder's.
    let first = free(fenced()).await;
    tokens.push(first.fencing_token().unwrap());
    let since = script_calls(&redis).await;
    let waiting = tokio::spawn(fenced().try_acquire_for(Duration::from_secs(5)));
    // The waiter has tried, found it held, and sleeps: the release hands it over.
    tried(&redis, since, 1).await;
    assert!(first.release().await.unwrap());
    let second = waiting.await.unwrap().unwrap().expect("handed over");
    tokens.push(second.fencing_token().unwrap());
    assert!(
        locks.counters().handoffs() >= 1,
        "the lock was not handed over"
    );

    // Its holder gone (abandoned, its lock expired: deleted here), then a lease that runs
    // out: each next holder's token is greater still.
    second.abandon();
    let mut conn = redis.conn().await;
    let _: u64 = conn.del("t:{fenced}:lock").await.unwrap();
    let after = free(fenced().with_lease(Lease::Fixed(Duration::from_millis(100)))).await;
    tokens.push(after.fencing_token().unwrap());
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(after.is_lost(), "its lease ran out");
    let next = free(fenced()).await;
    tokens.push(next.fencing_token().unwrap());
    assert!(next.release().await.unwrap());

    assert!(
        tokens.windows(2).all(|pair| pair[0] < pair[1]),
        "tokens did not grow: {tokens:?}"
    );
    let counter: i64 = conn.get("t:{fenced}:lock:token").await.unwrap();
    assert_eq!(
        counter,
        *tokens.last().unwrap(),
        "the counter outlives the lock"
    );
}

/// A fenced lock handed to a waiter whose token then cannot be issued (the counter made
/// unreadable: `INCR` fails, a clean error): the waiter's acquire fails and the lock is
/// free at once (before, the acquire failed holding the lock, and it stayed held for a
/// lease with nobody in it).
#[tokio::test]
async fn a_hand_off_whose_token_cannot_be_issued_leaves_the_lock_free() {
    let redis = RedisServer::start();
    let locks = instance(&redis).await;
    let fenced = || locks.lock("{untokened}").fenced(true);
    let first = fenced().try_acquire().await.unwrap().expect("free");
    let since = script_calls(&redis).await;
    let waiting = tokio::spawn(fenced().try_acquire_for(Duration::from_secs(30)));
    tried(&redis, since, 1).await;
    let mut conn = redis.conn().await;
    let _: () = conn
        .set("t:{untokened}:lock:token", "not a number")
        .await
        .unwrap();
    assert!(first.release().await.unwrap());
    let taken = waiting.await.unwrap();
    assert!(taken.is_err(), "no token, no lock: the acquire fails");
    assert!(locks.counters().handoffs() >= 1, "the lock was handed over");
    let held: bool = conn.exists("t:{untokened}:lock").await.unwrap();
    assert!(!held, "the lock was left held with nobody in it");
}

/// A MultiLock takes every lock or none: with one of its locks held elsewhere for the
/// whole wait, it answers no and holds none of the others; once that one is free, it
/// takes them all, and gives them all back.
#[tokio::test]
async fn a_multilock_takes_all_of_its_locks_or_none() {
    let redis = RedisServer::start();
    let locks = instance(&redis).await;
    let mut conn = redis.conn().await;
    let names = ["{c}", "{a}", "{b}"];

    let other = locks
        .lock("{b}")
        .try_acquire()
        .await
        .unwrap()
        .expect("free");
    let holder = HolderId::new();
    let cart = MultiLock::new(names.map(|name| locks.lock_as(name, &holder)));
    let order: Vec<&str> = cart.locks().iter().map(Lock::key).collect();
    assert_eq!(
        order,
        ["t:{a}:lock", "t:{b}:lock", "t:{c}:lock"],
        "taken in key order"
    );
    assert!(
        cart.try_acquire_for(Duration::from_millis(200))
            .await
            .unwrap()
            .is_none()
    );
    let held: Vec<String> = conn.keys("t:*:lock").await.unwrap();
    assert_eq!(held, ["t:{b}:lock"], "a cart that got no lock holds none");

    assert!(other.release().await.unwrap());
    let cart = MultiLock::new(names.map(|name| locks.lock_as(name, &holder)));
    let guard = cart.try_acquire().await.unwrap().expect("all free");
    let mut held: Vec<String> = conn.keys("t:*:lock").await.unwrap();
    held.sort();
    assert_eq!(held, ["t:{a}:lock", "t:{b}:lock", "t:{c}:lock"]);
    assert!(guard.release().await.unwrap());
    let held: Vec<String> = conn.keys("t:*:lock").await.unwrap();
    assert!(held.is_empty(), "left held: {held:?}");
}

/// A cart that names one lock twice (sorted, or in the order given) takes it once, and
/// its release gives back every lock it holds, each still held until then (before, the two
/// handles were one hold in Redis: the first release freed the lock under the second, and
/// the cart's release said a lock was no longer held).
#[tokio::test]
async fn a_cart_naming_a_lock_twice_takes_and_gives_it_back_once() {
    let redis = RedisServer::start();
    let locks = instance(&redis).await;
    let mut conn = redis.conn().await;
    let names = ["{a}", "{b}", "{a}"];
    let holder = HolderId::new();
    for given in [false, true] {
        let handles = names.map(|name| locks.lock_as(name, &holder));
        let cart = if given {
            MultiLock::in_order_given(handles)
        } else {
            MultiLock::new(handles)
        };
        assert_eq!(cart.locks().len(), 2, "the key given twice is one lock");
        let guard = cart.try_acquire().await.unwrap().expect("all free");
        let mut held: Vec<String> = conn.keys("t:*:lock").await.unwrap();
        held.sort();
        assert_eq!(held, ["t:{a}:lock", "t:{b}:lock"]);
        assert!(
            guard.release().await.unwrap(),
            "every lock was still held at the release"
        );
        let held: Vec<String> = conn.keys("t:*:lock").await.unwrap();
        assert!(held.is_empty(), "left held: {held:?}");
    }
}

/// Carts over the same products in opposite orders, many at once: sorted, none deadlocks
/// (every one gets its locks, however long the others take: a wait that only bounds a
/// hang); taken in the order given, they do (two carts each holding what the other waits
/// for give up when their 1.5 s wait runs out).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sorted_multilocks_never_deadlock_and_given_orders_do() {
    let redis = RedisServer::start();
    let locks = instance(&redis).await;
    let carts = |sorted: bool| {
        let wait = if sorted {
            Duration::from_secs(60)
        } else {
            Duration::from_millis(1500)
        };
        (0..20)
            .map(|n| {
                let holder = HolderId::new();
                let names = if n % 2 == 0 {
                    ["{x}", "{y}"]
                } else {
                    ["{y}", "{x}"]
                };
                let handles = names.map(|name| {
                    locks
                        .lock_as(name, &holder)
                        .expecting_to_hold(Duration::from_millis(5))
                });
                let cart = if sorted {
                    MultiLock::new(handles)
                } else {
                    MultiLock::in_order_given(handles)
                };
                tokio::spawn(async move {
                    match cart.try_acquire_for(wait).await.unwrap() {
                        Some(guard) => {
                            tokio::time::sleep(Duration::from_millis(20)).await;
                            guard.release().await.unwrap();
                            true
                        }
                        None => false,
                    }
                })
            })
            .collect::<Vec<_>>()
    };
    let mut got = 0;
    for cart in carts(true) {
        got += usize::from(cart.await.unwrap());
    }
    assert_eq!(got, 20, "sorted carts gave up: a deadlock");

    let mut gave_up = 0;
    for cart in carts(false) {
        gave_up += usize::from(!cart.await.unwrap());
    }
    assert!(gave_up > 0, "carts in opposite orders never deadlocked");
}
