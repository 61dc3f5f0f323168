//! The locks as a library against real `redis-server`s: the watchdog lock on one Redis,
//! Redlock on five.
//!
//! No verdict here is a time or a speed: a waiter is known to wait once Redis has run its
//! try ([`tried`]), an instance to listen once Redis names its subscription
//! ([`subscribed`]), a watchdog to keep its lock once it has renewed it; the clocks left
//! are leases (what the locks are about), causal lower bounds, and bounds on a hang.

use std::time::Duration;

use seckill_testkit::RedisServer;

mod api;
mod cancel;
#[cfg(feature = "cluster")]
mod cluster;
mod examples;
mod fenced_multi;
mod longest_wait;
mod lost;
mod redlock;
mod replicas;
#[cfg(feature = "sentinel")]
mod sentinel;
mod tasks;
mod tries;
mod watchdog;

/// Scripts Redis has run so far (`EVAL` and `EVALSHA`, from `INFO commandstats`): every
/// take, renewal and release of these locks is one.
pub(crate) async fn script_calls(redis: &RedisServer) -> u64 {
    let info: String = redis::cmd("INFO")
        .arg("commandstats")
        .query_async(&mut redis.conn().await)
        .await
        .unwrap();
    info.lines()
        .filter(|l| l.starts_with("cmdstat_eval:") || l.starts_with("cmdstat_evalsha:"))
        .filter_map(|l| {
            l.split("calls=")
                .nth(1)?
                .split(',')
                .next()?
                .parse::<u64>()
                .ok()
        })
        .sum()
}

/// Waits until Redis has run `tries` more scripts than `since` ([`script_calls`]): a
/// waiter spawned after `since` was read has tried, and sleeps (it queued itself before
/// its first try). The bound says a hang.
pub(crate) async fn tried(redis: &RedisServer, since: u64, tries: u64) {
    let until = tokio::time::Instant::now() + Duration::from_secs(10);
    while script_calls(redis).await < since + tries {
        assert!(
            tokio::time::Instant::now() < until,
            "{tries} waiter(s) never tried"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// Clients of `redis` subscribed to a pattern now (`CLIENT LIST`'s `psub`).
pub(crate) async fn subscribers(redis: &RedisServer) -> usize {
    let clients: String = redis::cmd("CLIENT")
        .arg("LIST")
        .query_async(&mut redis.conn().await)
        .await
        .unwrap();
    clients
        .lines()
        .filter(|client| {
            client
                .split_whitespace()
                .any(|field| field.starts_with("psub=") && field != "psub=0")
        })
        .count()
}

/// Waits until `redis` has more pattern subscribers than `before`: a watchdog instance
/// started after `before` was read listens for release messages. The bound says a hang.
pub(crate) async fn subscribed(redis: &RedisServer, before: usize) {
    let until = tokio::time::Instant::now() + Duration::from_secs(10);
    while subscribers(redis).await <= before {
        assert!(
            tokio::time::Instant::now() < until,
            "the watchdog locks never subscribed"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}
