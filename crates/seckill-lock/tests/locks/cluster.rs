//! The watchdog lock on a real Redis Cluster.

use std::time::Duration;

use redis::cluster::ClusterClient;
use seckill_lock::{Lock, Namespace, WatchdogLocks};
use seckill_testkit::RedisCluster;

/// On redis-rs's Cluster connection a lock whose keys have no hash tag is refused when its
/// handle is made (before, Redis refused its first take with `CROSSSLOT`); a tagged one is
/// taken and given back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lock_without_a_hash_tag_is_refused_at_lock_on_a_cluster() {
    let cluster = RedisCluster::start(3, 0);
    let urls: Vec<String> = cluster.urls().split(',').map(str::to_owned).collect();
    let conn = ClusterClient::new(urls.clone())
        .unwrap()
        .get_async_connection()
        .await
        .unwrap();
    let subscribe_on: Vec<redis::Client> = urls
        .iter()
        .map(|url| redis::Client::open(url.as_str()).unwrap())
        .collect();
    let locks = WatchdogLocks::builder(subscribe_on, conn)
        .lease(Duration::from_secs(30))
        .namespace(Namespace::new("c"))
        .start();

    let untagged =
        std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| locks.lock("order:42")));
    assert!(
        untagged.is_err(),
        "a lock without a hash tag refused at lock()"
    );

    let guard = locks
        .lock("{order:42}")
        .try_acquire()
        .await
        .unwrap()
        .expect("free");
    assert!(guard.release().await.unwrap());
}
