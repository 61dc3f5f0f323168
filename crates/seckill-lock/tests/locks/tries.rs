//! What a waiter sends Redis: a try when it arrives, and one per reason to try again — a
//! wake-up, the end of its nap. Never a loop: a waiter woken while trying once tried back
//! to back until it won.

use std::time::Duration;

use redis::aio::ConnectionManager;
use seckill_lock::{Lock, Namespace, WatchdogLocks};
use seckill_testkit::RedisServer;

const PER_INSTANCE: usize = 12;
const ROUNDS: usize = 4;

/// Two instances, twelve waiters each, every one taking the lock four times as soon as it
/// can with no work inside (so that releases come while other waiters' tries are on their
/// way), hand-offs off (every release a message): no acquire sent a try beyond its first,
/// one per wake-up it received and one per nap that ran out (each acquire's account).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiters_try_once_per_reason_under_two_instances_contention() {
    let redis = RedisServer::start();
    let mut instances = Vec::new();
    for _ in 0..2 {
        let client = redis::Client::open(redis.url()).unwrap();
        let conn = ConnectionManager::new(client.clone()).await.unwrap();
        let before = crate::subscribers(&redis).await;
        let locks = WatchdogLocks::builder(client, conn)
            .lease(Duration::from_secs(30))
            .namespace(Namespace::new("tries"))
            .handoffs(0)
            .start();
        crate::subscribed(&redis, before).await;
        instances.push(locks);
    }
    let mut waiters = Vec::new();
    for locks in &instances {
        for _ in 0..PER_INSTANCE {
            let locks = locks.clone();
            waiters.push(tokio::spawn(async move {
                for _ in 0..ROUNDS {
                    let guard = locks
                        .lock("{contended}")
                        .acquire()
                        .await
                        .expect("a wait as long as it takes ends with the lock");
                    assert!(guard.release().await.unwrap());
                }
            }));
        }
    }
    for waiter in waiters {
        tokio::time::timeout(Duration::from_secs(120), waiter)
            .await
            .expect("a waiter hung")
            .unwrap();
    }
    let acquires = (PER_INSTANCE * ROUNDS) as u64;
    for (i, locks) in instances.iter().enumerate() {
        let counters = locks.counters();
        let (tries, wakeups) = (counters.tries(), counters.wakeups());
        eprintln!(
            "instance {i}: {acquires} acquires, {tries} tries, {wakeups} wake-ups ({:.2} tries an acquire; the most one acquire sent: {})",
            tries as f64 / acquires as f64,
            counters.most_tries()
        );
        assert_eq!(
            counters.tries_without_reason(),
            0,
            "instance {i}: an acquire tried without a reason"
        );
    }
}
