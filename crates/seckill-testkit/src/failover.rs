//! What must hold after a store fails over (or restarts) under load.

use std::collections::BTreeMap;
use std::time::Duration;

use seckill_load::Report;
use serde_json::Value;

use crate::{assert_adds_up, int};

/// After a failover under lua load: every request answered (200, or a clean 503 with
/// `Retry-After`), none hanging past the Redis timeout and a batch, nothing oversold or
/// lost, the stock and the orders adding up to `initial` ([`assert_adds_up`]), one order
/// per unit sold. Returns how many orders answered 200 are not in `recorded` (lost in the
/// failover); the load must have kept its orders.
pub fn assert_survived_failover(
    load: &Report,
    stats: &Value,
    initial: i64,
    recorded: &BTreeMap<String, String>,
) -> usize {
    assert_eq!(
        load.transport_errors, 0,
        "every request got an answer: {load:?}"
    );
    // A 504: a sale's answer lost with the master, and not yet looked up (`unknown`).
    assert!(
        load.statuses.keys().all(|s| [200, 503, 504].contains(s)),
        "only sales, clean 503s and 504s: {load:?}"
    );
    assert_eq!(load.without_retry_after, 0, "{load:?}");
    assert_eq!(load.unnamed_sales, 0, "every 200 names its order: {load:?}");
    // Redis timeout 1 s, WAIT 0.5 s, a batch in flight before: nothing waits much longer.
    assert!(
        load.slowest() < Duration::from_secs(4),
        "a request hung: {load:?}"
    );
    assert_adds_up(stats, initial, "after the failover");
    assert_eq!(int(stats, "sold") as usize, recorded.len(), "{stats}");
    load.orders
        .iter()
        .filter(|o| !recorded.contains_key(*o))
        .count()
}
