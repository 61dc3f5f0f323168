//! Fencing tokens at the stock: a lock holder paused (SIGSTOP) past its TTL loses the lock
//! to a second holder; both get inside. With `fence=on` the stock refuses the older
//! holder's commit; without, the unit sells twice. The locks live in a lock store of
//! their own, so the old "commit checks the lock hash" fence cannot help here.

use std::time::Duration;

use seckill_testkit::{RedisServer, heavy_turn, int};
use serde_json::Value;

use crate::instance;

/// Stock 1. Holder A takes the token lock (TTL 300 ms) and starts 500 ms of work; its
/// process is frozen for a second. Holder B gets the expired lock, and sells the unit.
/// A thaws and commits. Returns A's answer and `/stats`.
async fn paused_holder(fence: &str) -> ((u16, Value), Value) {
    // The pause is timed against a TTL: it wants the cores to itself.
    let _turn = heavy_turn().await;
    let stock = RedisServer::start();
    let locks = RedisServer::start();
    let args = ["--lock-redis-url", &locks.url()];
    let (a, b) = (instance(&stock.url(), &args), instance(&stock.url(), &args));
    let (api_a, api_b) = (a.api(), b.api());
    api_a.reset("101", 1, 1).await;

    let first = {
        let api = api_a.clone();
        let knobs = format!("token?work_ms=500&ttl_ms=300&fence={fence}");
        tokio::spawn(async move { api.deduct("101", &knobs).await })
    };
    // A is inside its work (the audit's set names it) when it is paused.
    crate::someone_inside(&stock).await;
    a.signal("STOP");
    let second = api_b
        .deduct("101", &format!("token?wait_ms=3000&fence={fence}"))
        .await;
    assert_eq!(
        second.0, 200,
        "B got the expired lock and sold: {}",
        second.1
    );
    tokio::time::sleep(Duration::from_millis(1_000)).await;
    a.signal("CONT");
    let first = first.await.unwrap();
    (first, api_b.stats("101").await)
}

/// With `fence=on` the paused holder's commit is refused: 503 `fenced`, one unit sold.
#[tokio::test]
async fn paused_holder_is_fenced_at_the_stock() {
    let ((status, body), stats) = paused_holder("on").await;
    assert_eq!(status, 503, "{body}");
    assert_eq!(body["outcome"], "fenced", "{body}");
    assert!(
        int(&stats, "lock_overlaps") >= 1,
        "both were inside: {stats}"
    );
    assert_eq!(int(&stats, "sold"), 1, "{stats}");
    assert_eq!(int(&stats, "oversold"), 0, "{stats}");
    assert_eq!(int(&stats, "fenced"), 1, "{stats}");
}

/// Without fencing the same pause sells the one unit twice.
#[tokio::test]
async fn paused_holder_without_fence_oversells() {
    let ((status, body), stats) = paused_holder("off").await;
    assert_eq!(status, 200, "the paused holder sold too: {body}");
    assert!(int(&stats, "lock_overlaps") >= 1, "{stats}");
    assert_eq!(int(&stats, "sold"), 2, "{stats}");
    assert_eq!(int(&stats, "oversold"), 1, "{stats}");
    assert_eq!(int(&stats, "fenced"), 0, "{stats}");
}

/// Fencing tokens come from the lock's own counter (`<lock>:token`) — beside the stock, the
/// watchdog lock with `fence=on` is the lock crate's fenced lock, whose take increments it
/// (the crate's tests show that); the token lock's tokens, issued by the stock store, are
/// drawn from the same counter — so there is one sequence per lock, whichever variant
/// draws from it, the stock records each as the highest seen, and a reset (which forgets
/// the tokens seen) leaves the counter growing.
#[tokio::test]
async fn fencing_tokens_are_one_sequence_per_lock_across_variants_and_resets() {
    let stock = RedisServer::start();
    let service = instance(&stock.url(), &[]);
    let api = service.api();
    let shard = crate::keys("104").whole();
    let token_key = format!("{}:token", shard.lock);
    let mut conn = stock.conn().await;
    let state = |conn: &mut redis::aio::MultiplexedConnection| {
        let (mut conn, fence, token_key) = (conn.clone(), shard.fence.clone(), token_key.clone());
        async move {
            let seen: Option<i64> = redis::AsyncCommands::hget(&mut conn, &fence, "seen")
                .await
                .unwrap();
            let issued: Option<i64> = redis::AsyncCommands::get(&mut conn, &token_key)
                .await
                .unwrap();
            (seen, issued)
        }
    };

    api.reset("104", 10, 1).await;
    for _ in 0..3 {
        let (status, body) = api.deduct("104", "watchdog?fence=on").await;
        assert_eq!(status, 200, "{body}");
    }
    assert_eq!(
        state(&mut conn).await,
        (Some(3), Some(3)),
        "the lock's take issued 1, 2, 3"
    );

    let (status, body) = api.deduct("104", "token?fence=on").await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(
        state(&mut conn).await,
        (Some(4), Some(4)),
        "the stock store drew 4 from it"
    );

    api.reset("104", 10, 1).await;
    let (status, body) = api.deduct("104", "watchdog?fence=on").await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(
        state(&mut conn).await,
        (Some(5), Some(5)),
        "the counter outlived the reset; the stock took 5 as its first"
    );
    let stats = api.stats("104").await;
    assert_eq!(int(&stats, "fenced"), 0, "{stats}");
}
