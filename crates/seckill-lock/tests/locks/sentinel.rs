//! Behind Sentinel: the crate's own connection follows a failover, and the subscription
//! with it — a master killed, the sentinels promote its replica, and the same
//! `WatchdogLocks` take, wake and release on the new master.

use std::time::Duration;

use seckill_lock::sentinel::SentinelConnection;
use seckill_lock::{Lock, LockError, Namespace, WatchdogLocks};
use seckill_testkit::Sentinels;
use seckill_testkit::sentinel::MASTER;

/// The master killed: the first takes after it may fail (the connection finds the node
/// gone, and the sentinels need a second and an election to name another), never hang;
/// then a take succeeds on the new master, a waiter there is woken by the release
/// message the new master publishes, and the lock is given back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sentinel_connection_follows_the_master_across_a_failover() {
    let mut redis = Sentinels::start(1);
    let urls: Vec<String> = redis.sentinels.iter().map(|s| s.url()).collect();
    let urls: Vec<&str> = urls.iter().map(String::as_str).collect();
    let conn = SentinelConnection::new(&urls, MASTER, Duration::from_secs(2)).unwrap();
    let locks = WatchdogLocks::builder(conn.clone(), conn.clone())
        .namespace(Namespace::new("s"))
        .handoffs(0)
        .start();
    let before = conn.master_address().await.unwrap();
    let guard = locks
        .lock("{s}")
        .try_acquire()
        .await
        .unwrap()
        .expect("free");
    assert!(guard.release().await.unwrap());

    let old = redis.master.port;
    redis.master.kill();
    let new = tokio::task::block_in_place(|| redis.wait_for_failover(old, Duration::from_secs(60)));

    // Each failed take is an error (unavailable, or the demoted node's READONLY), not a
    // hang: the connection's timeout bounds it. The bound on tries says a hang.
    let mut failed = 0;
    let guard = loop {
        match locks.lock("{s}").try_acquire().await {
            Ok(Some(guard)) => break guard,
            Ok(None) => panic!("nobody holds the lock on the new master"),
            Err(err @ (LockError::Unavailable { .. } | LockError::Store { .. })) => {
                failed += 1;
                assert!(failed < 100, "never reached the new master: {err}");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            Err(err) => panic!("{err}"),
        }
    };
    let after = conn.master_address().await.unwrap();
    assert_ne!(before, after, "the connection moved");
    assert!(
        after.ends_with(&format!(":{new}")),
        "{after} is the new master, port {new}"
    );

    // A waiter on the new master, woken by the release message: the subscription moved
    // too (a waiter's nap would otherwise last the lock's 30 s lease).
    let promoted = &redis.replicas[0];
    let wakeups = locks.counters().wakeups();
    let since = crate::script_calls(promoted).await;
    let waiter = tokio::spawn(locks.lock("{s}").acquire());
    crate::tried(promoted, since, 1).await;
    assert!(guard.release().await.unwrap());
    let waited = tokio::time::timeout(Duration::from_secs(25), waiter)
        .await
        .expect("woken before the lease ran out: the release message reached it")
        .unwrap()
        .unwrap();
    assert!(locks.counters().wakeups() > wakeups, "woken by a message");
    assert!(waited.release().await.unwrap());
}
