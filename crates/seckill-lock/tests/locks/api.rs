//! The API a holder uses: one try, a wait with no deadline, a lease extended by hand, the
//! instance's options, and holder ids only the crate makes.

use std::time::Duration;

use redis::AsyncCommands;
use redis::aio::ConnectionManager;
use seckill_lock::teaching::SetnxLock;
use seckill_lock::{
    HolderId, Lease, Lock, LockError, MultiLock, Namespace, Redlock, TokenLock, WatchdogLocks,
};
use seckill_testkit::RedisServer;

async fn conn(redis: &RedisServer) -> ConnectionManager {
    ConnectionManager::new(redis::Client::open(redis.url()).unwrap())
        .await
        .unwrap()
}

async fn instance(redis: &RedisServer, builder: impl FnOnce(Builder) -> Builder) -> Locks {
    let client = redis::Client::open(redis.url()).unwrap();
    let before = crate::subscribers(redis).await;
    let locks =
        builder(WatchdogLocks::builder(client, conn(redis).await).namespace(Namespace::new("api")))
            .start();
    crate::subscribed(redis, before).await;
    locks
}

type Locks = WatchdogLocks<ConnectionManager>;
type Builder = seckill_lock::WatchdogLocksBuilder<redis::Client, ConnectionManager>;

async fn pttl(redis: &RedisServer, key: &str) -> i64 {
    redis.conn().await.pttl(key).await.unwrap()
}

/// `try_acquire` is one try: a held lock answers `None` after exactly one take script,
/// and a free one is taken.
#[tokio::test]
async fn try_acquire_tries_once() {
    let redis = RedisServer::start();
    let locks = instance(&redis, |b| b).await;
    let held = locks
        .lock("{once}")
        .try_acquire()
        .await
        .unwrap()
        .expect("free");
    let since = crate::script_calls(&redis).await;
    let other = locks.lock("{once}").try_acquire().await.unwrap();
    assert!(other.is_none(), "a held lock is not taken");
    assert_eq!(crate::script_calls(&redis).await - since, 1, "one try");
    assert!(held.release().await.unwrap());
    let taken = locks.lock("{once}").try_acquire().await.unwrap();
    assert!(taken.is_some(), "a free lock is taken");
}

/// A lock with a fixed lease, extended by hand: the extension reaches Redis (the key's TTL
/// is the new lease's, far past the old one's) and the holder is not lost; once the lock
/// is gone, an extension says false and the holder is lost from then on.
#[tokio::test]
async fn a_fixed_lease_is_extended_while_held_and_not_after() {
    let redis = RedisServer::start();
    let locks = instance(&redis, |b| b).await;
    let conn = conn(&redis).await;
    let short = Duration::from_millis(500);
    let long = Duration::from_secs(60);

    let mut token = TokenLock::new(conn.clone(), "{token}:lock", short, &HolderId::new())
        .try_acquire()
        .await
        .unwrap()
        .expect("free");
    let mut watchdog = locks
        .lock("{fixed}")
        .with_lease(Lease::Fixed(short))
        .try_acquire()
        .await
        .unwrap()
        .expect("free");
    assert!(token.extend(long).await.unwrap(), "the token lock was held");
    assert!(
        watchdog.extend(long).await.unwrap(),
        "the watchdog lock was held"
    );
    for key in ["{token}:lock", "api:{fixed}:lock"] {
        let left = pttl(&redis, key).await;
        assert!(left > 10_000, "{key} extended: {left} ms left");
    }
    assert!(!token.is_lost() && !watchdog.is_lost());

    let _: u64 = redis
        .conn()
        .await
        .del(&["{token}:lock", "api:{fixed}:lock"])
        .await
        .unwrap();
    assert!(!token.extend(long).await.unwrap(), "gone: not extended");
    assert!(!watchdog.extend(long).await.unwrap(), "gone: not extended");
    assert!(token.is_lost() && watchdog.is_lost(), "found gone: lost");
    assert!(!token.release().await.unwrap());
    assert!(!watchdog.release().await.unwrap());
}

/// A MultiLock extends every lock it holds; Redlock extends on its quorum; a lock with no
/// lease of its own says it cannot.
#[tokio::test]
async fn extend_reaches_every_lock_or_says_it_cannot() {
    let redis = RedisServer::start();
    let locks = instance(&redis, |b| b).await;
    // Leases long enough that a slow machine does not let one lapse before the extension
    // (the verdict is then the extension's, not the clock's); extended past them, to 60 s.
    let short = Lease::Fixed(Duration::from_secs(20));
    let holder = HolderId::new();
    let mut cart =
        MultiLock::new(["{a}", "{b}"].map(|name| locks.lock_as(name, &holder).with_lease(short)))
            .try_acquire()
            .await
            .unwrap()
            .expect("free");
    assert!(cart.extend(Duration::from_secs(60)).await.unwrap());
    for key in ["api:{a}:lock", "api:{b}:lock"] {
        assert!(pttl(&redis, key).await > 30_000, "{key} extended");
    }
    assert!(cart.release().await.unwrap());

    let servers: Vec<RedisServer> = (0..3).map(|_| RedisServer::start()).collect();
    let mut conns = Vec::new();
    for server in &servers {
        conns.push(conn(server).await);
    }
    let mut redlock = Redlock::new(conns)
        .lock("{red}", Duration::from_secs(20))
        .try_acquire()
        .await
        .unwrap()
        .expect("free");
    assert!(redlock.extend(Duration::from_secs(60)).await.unwrap());
    // An extension is decided once a quorum said yes: the third server's may still be on its
    // way (or lost), and the lock holds without it.
    let mut extended = 0;
    for server in &servers {
        extended += usize::from(pttl(server, "{red}").await > 30_000);
    }
    assert!(extended >= 2, "extended on a quorum: {extended} of 3");
    assert!(redlock.release().await.unwrap());

    let mut setnx = SetnxLock::new(conn(&redis).await, "{setnx}", &HolderId::new())
        .try_acquire()
        .await
        .unwrap()
        .expect("free");
    assert!(matches!(
        setnx.extend(Duration::from_secs(1)).await,
        Err(LockError::Unsupported(_))
    ));
    assert!(setnx.release().await.unwrap());
}

/// The ids the crate makes are unique, and carry the instance's name when it has one: two
/// handles from `lock()` are two holders, so the one's release cannot free the other's.
#[tokio::test]
async fn every_handle_is_a_holder_of_its_own() {
    let redis = RedisServer::start();
    let locks = instance(&redis, |b| b.instance("east")).await;
    let (a, b) = (locks.lock("{own}"), locks.lock("{own}"));
    assert_ne!(a.holder(), b.holder());
    assert!(a.holder().starts_with("east/"), "{}", a.holder());
    assert_ne!(HolderId::new(), HolderId::new());

    let held = a.try_acquire().await.unwrap().expect("free");
    // The other handle's release script, sent to Redis: it finds another holder there.
    let mut other = b;
    other.clean_up().await.unwrap();
    assert!(!held.is_lost());
    assert!(held.release().await.unwrap(), "still the holder's");
}
