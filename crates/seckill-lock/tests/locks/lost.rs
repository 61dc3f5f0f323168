//! Lost means lost: a lock says so once it is no longer its holder's.

use std::time::Duration;

use redis::AsyncCommands;
use redis::aio::ConnectionManager;
use seckill_lock::rw::{RwKeys, RwLock, Side};
use seckill_lock::{HolderId, Lock, TokenLock};
use seckill_testkit::RedisServer;

/// A token lock whose TTL ran out says it is lost (nothing renews it), once Redis has let
/// the key go; the seed's holder, blind to its TTL, does not.
#[tokio::test]
async fn a_token_lock_is_lost_once_its_ttl_ran_out() {
    let redis = RedisServer::start();
    let conn = ConnectionManager::new(redis::Client::open(redis.url()).unwrap())
        .await
        .unwrap();
    let ttl = Duration::from_millis(200);
    let lock = TokenLock::new(conn.clone(), "{token}:lock", ttl, &HolderId::new());
    let blind =
        TokenLock::new(conn.clone(), "{blind}:lock", ttl, &HolderId::new()).blind_to_its_ttl();
    let guard = lock.try_acquire().await.unwrap().expect("free");
    let blind = blind.try_acquire().await.unwrap().expect("free");
    assert!(!guard.is_lost(), "just taken");
    let mut look = conn.clone();
    let bound = tokio::time::Instant::now() + Duration::from_secs(20);
    loop {
        let held: bool = look.exists("{token}:lock").await.unwrap();
        let blind_held: bool = look.exists("{blind}:lock").await.unwrap();
        if !held && !blind_held {
            break;
        }
        assert!(
            tokio::time::Instant::now() < bound,
            "the keys never expired"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(guard.is_lost(), "its TTL ran out: lost");
    assert!(!blind.is_lost(), "the seed's holder never knows");
    assert!(
        !guard.release().await.unwrap(),
        "not held at the release either"
    );
    assert!(!blind.release().await.unwrap());
}

/// A reader cut off from Redis learns it lost the read lock once its lease ran out
/// unrenewed (a writer may hold the lock by then), as the watchdog lock's holder does: its
/// renewals fail, and the lease's end says lost. (Its failed renewals used to be ignored,
/// and it went on saying it held the lock.) The guard's minute is how long a hang is let
/// run before the test calls it one, not a speed.
#[tokio::test]
async fn a_reader_cut_off_from_redis_is_lost_once_its_lease_ran_out() {
    let mut redis = RedisServer::start();
    let conn = ConnectionManager::new(redis::Client::open(redis.url()).unwrap())
        .await
        .unwrap();
    let lease = Duration::from_millis(300);
    let keys = RwKeys::under("{rw}");
    let lock = RwLock::new(conn, keys, &HolderId::new(), Side::Read, lease);
    let guard = lock.try_acquire().await.unwrap().expect("free");
    assert!(!guard.is_lost(), "just taken");
    redis.kill();
    tokio::time::timeout(Duration::from_secs(60), guard.lost())
        .await
        .expect("cut off from Redis past its lease, it still said it held the lock");
    assert!(guard.is_lost(), "lost stays lost");
}
