//! The longest wait there is, `Duration::MAX` ("as long as it takes", as the trait's docs
//! offer it), taken by every lock: on a free lock, and behind a holder that then lets go.
//! (The read-write lock and the ZooKeeper lock added it to `Instant::now()` and panicked.)

use std::sync::Arc;
use std::time::Duration;

use redis::aio::ConnectionManager;
use seckill_lock::teaching::SetnxLock;
use seckill_lock::{
    HolderId, Lock, Namespace, Redlock, RwKeys, RwLock, Side, TokenLock, WatchdogLocks, ZooKeeper,
};
use seckill_testkit::{RedisServer, ZooKeeperEnsemble};

/// Who a handle is for: the one that takes the free lock, the holder, the waiter behind it.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Role {
    Free,
    Holder,
    Waiter,
}

/// One handle takes the free lock with the longest wait and gives it back; then one holds
/// it while another waits as long as it takes, and gets it once the holder lets go.
async fn takes_the_longest_wait<L: Lock + Send + 'static>(what: &str, make: impl Fn(Role) -> L) {
    let free = make(Role::Free)
        .acquire()
        .await
        .unwrap_or_else(|err| panic!("{what}: {err}"));
    assert!(free.release().await.unwrap(), "{what}: released");

    let holder = make(Role::Holder)
        .try_acquire()
        .await
        .unwrap()
        .unwrap_or_else(|| panic!("{what}: a free lock not taken"));
    let waiter = tokio::spawn(make(Role::Waiter).acquire());
    // Whether the waiter tried before the release or after, it must end holding the lock.
    tokio::task::yield_now().await;
    assert!(
        holder.release().await.unwrap(),
        "{what}: the holder released"
    );
    let waited = tokio::time::timeout(Duration::from_secs(60), waiter)
        .await
        .unwrap_or_else(|_| panic!("{what}: the waiter hung"))
        .unwrap_or_else(|err| panic!("{what}: the waiter panicked: {err}"))
        .unwrap_or_else(|err| panic!("{what}: {err}"));
    assert!(
        waited.release().await.unwrap(),
        "{what}: the waiter released"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_lock_takes_the_longest_wait() {
    let redis = RedisServer::start();
    let client = redis::Client::open(redis.url()).unwrap();
    let conn = ConnectionManager::new(client.clone()).await.unwrap();
    let before = crate::subscribers(&redis).await;
    let locks = WatchdogLocks::builder(client, conn.clone())
        .lease(Duration::from_secs(30))
        .namespace(Namespace::new("longest"))
        .start();
    crate::subscribed(&redis, before).await;
    let lease = Duration::from_secs(30);

    takes_the_longest_wait("setnx", |_| {
        SetnxLock::new(conn.clone(), "longest:setnx", &HolderId::new())
    })
    .await;
    takes_the_longest_wait("token", |_| {
        TokenLock::new(conn.clone(), "longest:token", lease, &HolderId::new())
    })
    .await;
    for fair in [false, true] {
        takes_the_longest_wait(if fair { "watchdog fair" } else { "watchdog" }, |_| {
            locks.lock("{longest}").fair(fair)
        })
        .await;
    }
    for side in [Side::Read, Side::Write] {
        // A writer waits behind a reader, a reader behind a writer: the other side holds.
        let other = if side == Side::Read {
            Side::Write
        } else {
            Side::Read
        };
        let keys = RwKeys::under("{longest-rw}");
        takes_the_longest_wait(&format!("rw {side:?}"), |role| {
            let side = if role == Role::Holder { other } else { side };
            RwLock::new(conn.clone(), keys.clone(), &HolderId::new(), side, lease)
        })
        .await;
    }

    let redlock_servers: Vec<RedisServer> = (0..3).map(|_| RedisServer::start()).collect();
    let urls: Vec<String> = redlock_servers.iter().map(RedisServer::url).collect();
    let redlock = Redlock::connect(&urls, Duration::from_millis(500)).unwrap();
    takes_the_longest_wait("redlock", |_| {
        redlock.lock("{longest}", lease).extending(true)
    })
    .await;

    let ensemble = ZooKeeperEnsemble::start(1);
    let zk = Arc::new(ZooKeeper::new(
        &ensemble.hosts(),
        Duration::from_secs(10),
        Duration::from_secs(4),
    ));
    takes_the_longest_wait("zookeeper", |_| zk.lock("/seckill-lock-test/longest")).await;
}
