//! Lost means lost: a lock says so once it is no longer its holder's.

use std::time::Duration;

use redis::AsyncCommands;
use redis::aio::ConnectionManager;
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
