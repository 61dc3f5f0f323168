//! Nothing a lock starts outlives it: no renewal task after the last hold is given back,
//! no subscription after the last handle on an instance is dropped; and a subscription
//! whose server stops answering is noticed, not slept through.

use std::time::Duration;

use redis::aio::ConnectionManager;
use seckill_lock::{HolderIds, Lock, Namespace, RwKeys, RwLock, Side, WatchdogLocks};
use seckill_testkit::RedisServer;

/// Tasks alive on this test's runtime.
fn alive_tasks() -> usize {
    tokio::runtime::Handle::current()
        .metrics()
        .num_alive_tasks()
}

/// Waits until `done` holds, bounded (a hang).
async fn until(what: &str, mut done: impl AsyncFnMut() -> bool) {
    let bound = tokio::time::Instant::now() + Duration::from_secs(20);
    while !done().await {
        assert!(tokio::time::Instant::now() < bound, "{what}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// An instance's locks in a namespace nobody publishes in: once its last handle is
/// dropped, its subscription's task and connection are gone (before, the task noticed
/// only at the next message, which in a quiet namespace never came).
#[tokio::test]
async fn dropped_watchdog_locks_leave_no_subscription_behind() {
    let redis = RedisServer::start();
    let client = redis::Client::open(redis.url()).unwrap();
    let conn = ConnectionManager::new(client.clone()).await.unwrap();
    let (tasks, listening) = (alive_tasks(), crate::subscribers(&redis).await);
    let locks = WatchdogLocks::builder(client, conn.clone())
        .lease(Duration::from_secs(30))
        .namespace(Namespace::new("quiet"))
        .start();
    crate::subscribed(&redis, listening).await;
    let lock = locks.lock("{quiet}");
    let guard = lock.try_acquire().await.unwrap().unwrap();
    assert!(guard.release().await.unwrap());
    assert!(
        alive_tasks() > tasks,
        "the subscription runs while the instance does"
    );
    drop(locks);
    until(
        "the subscription's connection outlived its locks",
        async || crate::subscribers(&redis).await == listening,
    )
    .await;
    // (Counted apart: each look at Redis above is a connection of its own, whose task
    // ends a moment after it.)
    until("the subscription's task outlived its locks", async || {
        alive_tasks() == tasks
    })
    .await;
}

/// A read lock taken twice by one handle (re-entry) and given back twice: its renewal
/// task is gone with the last hold (before, each take started one and the second
/// overwrote the first's handle: the first renewed on, an orphan).
#[tokio::test]
async fn a_reentered_read_write_lock_leaves_no_renewal_task_behind() {
    let redis = RedisServer::start();
    let client = redis::Client::open(redis.url()).unwrap();
    let conn = ConnectionManager::new(client).await.unwrap();
    let tasks = alive_tasks();
    // A lease long enough that a task left behind is still asleep when it is counted.
    let lease = Duration::from_secs(30);
    for side in [Side::Read, Side::Write] {
        let keys = RwKeys::under("{reentered}");
        let mut lock = RwLock::new(conn.clone(), keys, &HolderIds::new().next(), side, lease);
        assert!(lock.take(Duration::ZERO).await.unwrap());
        assert!(
            lock.take(Duration::ZERO).await.unwrap(),
            "{side:?}: re-entered"
        );
        assert_eq!(
            alive_tasks(),
            tasks + 1,
            "{side:?}: one renewal task for both holds"
        );
        assert!(lock.give_back().await.unwrap());
        assert_eq!(
            alive_tasks(),
            tasks + 1,
            "{side:?}: a hold left, still renewed"
        );
        assert!(lock.give_back().await.unwrap());
        until("a renewal task outlived its lock's last hold", async || {
            alive_tasks() == tasks
        })
        .await;
        assert!(!lock.is_lost(), "{side:?}: given back, not lost");
    }
}

/// The server under an instance's subscription frozen (SIGSTOP: the connection stays
/// open, nothing is answered): the subscription's heartbeat notices, and it starts again
/// (before, it waited on the silent connection for ever, and every waiter fell back to its
/// lease-long nap).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_subscription_whose_server_stops_answering_is_noticed() {
    let redis = RedisServer::start();
    let client = redis::Client::open(redis.url()).unwrap();
    let conn = ConnectionManager::new(client.clone()).await.unwrap();
    let listening = crate::subscribers(&redis).await;
    let locks = WatchdogLocks::builder(client, conn)
        .lease(Duration::from_secs(30))
        .namespace(Namespace::new("frozen"))
        .start();
    crate::subscribed(&redis, listening).await;
    let counters = locks.counters();
    redis.signal("STOP");
    let noticed = tokio::time::timeout(Duration::from_secs(20), async {
        while counters.subscription_losses() == 0 {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await;
    redis.signal("CONT");
    assert!(
        noticed.is_ok(),
        "a frozen server under the subscription went unnoticed"
    );
    // And it listens again once the server answers.
    crate::subscribed(&redis, listening).await;
}
