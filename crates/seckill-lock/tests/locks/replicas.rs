//! A grant confirmed by replicas before an acquire returns it (off by default).

use std::time::Duration;

use redis::AsyncCommands;
use redis::aio::ConnectionManager;
use seckill_lock::{Lock, LockError, Namespace, WatchdogLocks};
use seckill_testkit::RedisServer;

/// Waits until `replica` has its link with the master up (bounded: a hang).
async fn in_sync(replica: &RedisServer) {
    let bound = tokio::time::Instant::now() + Duration::from_secs(20);
    loop {
        let info: String = redis::cmd("INFO")
            .arg("replication")
            .query_async(&mut replica.conn().await)
            .await
            .unwrap();
        if info.contains("master_link_status:up") {
            return;
        }
        assert!(
            tokio::time::Instant::now() < bound,
            "the replica never synced: {info}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// A master with one replica: a lock confirmed by one replica is granted while the replica
/// answers; with the replica frozen, the grant is not confirmed — the acquire fails
/// `NotConfirmed` and the lock is left free — and a lock that asks for no confirmation is
/// granted all the same.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_grant_is_returned_only_once_the_replicas_have_it() {
    let master = RedisServer::start();
    let port = master.port.to_string();
    let replica = RedisServer::start_with(&["--replicaof", "127.0.0.1", &port]);
    in_sync(&replica).await;
    let client = redis::Client::open(master.url()).unwrap();
    // A response timeout well past the WAIT's, so that WAIT answers, not the client.
    let config = redis::aio::ConnectionManagerConfig::new()
        .set_response_timeout(Some(Duration::from_secs(10)));
    let conn = ConnectionManager::new_with_config(client.clone(), config)
        .await
        .unwrap();
    let before = crate::subscribers(&master).await;
    let locks = WatchdogLocks::builder(client, conn)
        .lease(Duration::from_secs(30))
        .namespace(Namespace::new("r"))
        .start();
    crate::subscribed(&master, before).await;
    let confirmed = || {
        locks
            .lock("{replicated}")
            .fenced(true)
            .confirmed_by_replicas(1, Duration::from_secs(2))
    };

    let guard = confirmed()
        .try_acquire()
        .await
        .unwrap()
        .expect("free, and the replica answers");
    let on_replica: bool = replica
        .conn()
        .await
        .exists("r:{replicated}:lock")
        .await
        .unwrap();
    assert!(
        on_replica,
        "the replica had the grant when the acquire returned it"
    );
    assert!(guard.release().await.unwrap());

    replica.signal("STOP");
    let refused = confirmed().try_acquire().await;
    let unconfirmed = locks.lock("{replicated}").try_acquire().await;
    replica.signal("CONT");
    assert!(
        matches!(
            refused,
            Err(LockError::NotConfirmed {
                wanted: 1,
                confirmed: 0
            })
        ),
        "a grant no replica confirmed is refused: {:?}",
        refused.as_ref().err()
    );
    let guard = unconfirmed
        .unwrap()
        .expect("given back, so free for one that asks for no confirmation");
    assert!(guard.release().await.unwrap());
}
