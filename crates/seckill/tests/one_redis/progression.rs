//! The progression under concurrent load from two instances sharing one real Redis:
//! naive loses stock; setnx, token, watchdog, segmented, shares and lua sell exactly the
//! stock.

use std::collections::BTreeSet;

use futures_util::future::join_all;
use seckill_testkit::{
    Report, Service, assert_every_200_an_order, assert_orders_recorded, assert_sold_out, int,
};
use serde_json::Value;

use crate::{recorded_orders, service, spread};

/// `requests` deductions of product 101 over both instances from `concurrency` clients;
/// with `until_sold_out`, each client stops at its first 409.
async fn load(
    cluster: &Service,
    variant_and_knobs: &str,
    requests: usize,
    concurrency: usize,
    until_sold_out: bool,
) -> Report {
    let mut load = spread(cluster, "101", variant_and_knobs)
        .requests(requests)
        .concurrency(concurrency);
    if until_sold_out {
        load = load.until_sold_out();
    }
    cluster.api(0).run(load).await
}

/// Checks that the audit adds up with itself and with what the clients saw.
async fn assert_audit_consistent(cluster: &Service, product: &str, report: &Report) -> Value {
    let stats = cluster.api(0).stats(product).await;
    let (initial, remaining, sold) = (
        int(&stats, "initial"),
        int(&stats, "remaining"),
        int(&stats, "sold"),
    );
    assert_eq!(report.transport_errors, 0, "requests without an answer");
    assert_eq!(report.unnamed_sales, 0, "every 200 names its order");
    assert_every_200_an_order(report, &stats, product);
    assert_eq!(
        int(&stats, "sold_out") as usize,
        report.count(409),
        "every 409 counted: {stats}"
    );
    assert_eq!(
        int(&stats, "lock_busy") as usize,
        report.count(429),
        "every 429 counted: {stats}"
    );
    let recorded = recorded_orders(&cluster.redis, product).await;
    assert_orders_recorded(report, &recorded, product);
    let by_instance: i64 = stats["by_instance"]
        .as_object()
        .unwrap()
        .values()
        .map(|v| v.as_i64().unwrap())
        .sum();
    let by_variant: i64 = stats["by_variant"]
        .as_object()
        .unwrap()
        .values()
        .map(|v| v.as_i64().unwrap())
        .sum();
    assert_eq!(
        by_instance, sold,
        "per-instance counts add up to sold: {stats}"
    );
    assert_eq!(
        by_variant, sold,
        "per-variant counts add up to sold: {stats}"
    );
    assert_eq!(
        stats["by_instance"].as_object().unwrap().len(),
        2,
        "both instances sold: {stats}"
    );
    assert_eq!(int(&stats, "oversold"), (sold - initial).max(0));
    assert_eq!(
        int(&stats, "lost_updates"),
        (sold - (initial - remaining)).max(0)
    );
    stats
}

async fn assert_sells_exactly(variant_query: &str, stock: i64) {
    assert_sells_exactly_over(variant_query, stock, 1).await;
}

async fn assert_sells_exactly_over(variant_query: &str, stock: i64, shards: u32) {
    let cluster = service(2, &[]);
    cluster.api(0).reset("101", stock, shards).await;
    let report = load(&cluster, variant_query, 20_000, 40, true).await;
    let stats = assert_audit_consistent(&cluster, "101", &report).await;
    assert_eq!(
        report.count(200) as i64,
        stock,
        "one 200 per unit: {report:?}"
    );
    assert_sold_out(&stats, stock, variant_query);
    let statuses: Vec<u16> = report.statuses.keys().copied().collect();
    assert!(
        statuses.iter().all(|s| [200, 409, 429].contains(s)),
        "only 200, 409 and 429 under load: {report:?}"
    );
}

/// naive: GET-then-SET from two instances loses updates (and so sells more than it has).
#[tokio::test]
async fn naive_loses_updates_under_concurrent_load_from_two_instances() {
    let cluster = service(2, &[]);
    cluster.api(0).reset("101", 100, 1).await;
    let report = load(&cluster, "naive?work_ms=10", 400, 40, false).await;
    let stats = assert_audit_consistent(&cluster, "101", &report).await;
    assert!(
        int(&stats, "lost_updates") > 0 || int(&stats, "oversold") > 0,
        "naive should lose stock under concurrent load: {stats}"
    );
    assert!(
        int(&stats, "sold") > int(&stats, "initial") - int(&stats, "remaining"),
        "{stats}"
    );
}

/// naive loses updates even without a widened race window, at 40 concurrent clients.
#[tokio::test]
async fn naive_loses_updates_without_added_work() {
    let cluster = service(2, &[]);
    cluster.api(0).reset("101", 200, 1).await;
    let report = load(&cluster, "naive", 400, 40, false).await;
    let stats = assert_audit_consistent(&cluster, "101", &report).await;
    assert!(int(&stats, "lost_updates") > 0, "{stats}");
}

/// setnx: the lock serialises the check and the decrement; losers fail fast with 429.
#[tokio::test]
async fn setnx_sells_exactly_the_stock() {
    assert_sells_exactly("setnx?work_ms=2", 50).await;
}

/// token: same, with waiters retrying for up to wait_ms.
#[tokio::test]
async fn token_sells_exactly_the_stock() {
    assert_sells_exactly("token?work_ms=2&wait_ms=2000&ttl_ms=5000", 50).await;
}

/// lua: one atomic script, no lock, no 429.
#[tokio::test]
async fn lua_sells_exactly_the_stock() {
    assert_sells_exactly("lua", 300).await;
}

/// lua sends the deductions that arrive together in one script call (`batch=off`: one call
/// each). Either way every 200 is its own unit, with its own `remaining`, and the rest 409.
#[tokio::test]
async fn lua_shares_script_calls_and_still_sells_each_unit_once() {
    for (path, shared) in [("lua", true), ("lua?batch=off", false)] {
        let cluster = service(2, &[]);
        let apis = cluster.apis();
        apis[0].reset("101", 50, 1).await;
        let before = crate::script_calls(&cluster.redis).await;
        let answers = join_all((0..300).map(|i| apis[i % 2].deduct("101", path))).await;
        let calls = crate::script_calls(&cluster.redis).await - before;

        let sold: Vec<&Value> = answers
            .iter()
            .filter(|(s, _)| *s == 200)
            .map(|(_, b)| b)
            .collect();
        let sold_out = answers.iter().filter(|(s, _)| *s == 409).count();
        assert_eq!((sold.len(), sold_out), (50, 250), "{path}: {answers:?}");
        let remaining: BTreeSet<i64> = sold
            .iter()
            .map(|b| b["remaining"].as_i64().unwrap())
            .collect();
        assert_eq!(
            remaining,
            (0..50).collect(),
            "{path}: each sale leaves its own count"
        );
        let stats = apis[0].stats("101").await;
        assert_eq!(
            (
                int(&stats, "sold"),
                int(&stats, "sold_out"),
                int(&stats, "remaining")
            ),
            (50, 250, 0),
            "{path}: {stats}"
        );
        assert_eq!(
            recorded_orders(&cluster.redis, "101").await.len(),
            50,
            "{path}"
        );
        if shared {
            assert!(
                calls < 300,
                "{path}: 300 concurrent deductions took {calls} script calls"
            );
        } else {
            assert!(
                calls >= 300,
                "{path}: 300 deductions took only {calls} script calls"
            );
        }
    }
}

/// watchdog: waiters queue for the lock rather than fail; every unit sold once.
#[tokio::test]
async fn watchdog_sells_exactly_the_stock() {
    assert_sells_exactly("watchdog?work_ms=2", 100).await;
}

/// segmented: 8 shards, each under its own watchdog lock, sold out exactly from two instances.
#[tokio::test]
async fn segmented_sells_exactly_its_stock_over_shards_from_two_instances() {
    assert_sells_exactly_over("segmented?work_ms=2", 203, 8).await;
}

/// Every lock variant on one product uses the same lock, whatever its kind (setnx's and
/// token's strings, watchdog's hash): mixed at once, they still sell exactly the stock,
/// never overlap, and never trip over each other's lock type.
#[tokio::test]
async fn lock_variants_mixed_on_one_product_share_one_lock() {
    let cluster = service(2, &[]);
    cluster.api(0).reset("101", 90, 1).await;
    let (setnx, token, watchdog) = tokio::join!(
        load(&cluster, "setnx?work_ms=1", 3000, 10, true),
        load(&cluster, "token?work_ms=1&wait_ms=5000", 3000, 10, true),
        load(&cluster, "watchdog?work_ms=1&wait_ms=5000", 3000, 10, true),
    );
    let mut sold = 0;
    for (name, report) in [
        ("setnx", &setnx),
        ("token", &token),
        ("watchdog", &watchdog),
    ] {
        for status in report.statuses.keys() {
            assert!([200, 409, 429].contains(status), "{name}: {report:?}");
        }
        sold += report.count(200);
    }
    let stats = cluster.api(0).stats("101").await;
    assert_eq!(sold, 90, "{stats}");
    assert_sold_out(&stats, 90, "setnx, token and watchdog at once");
}

/// watchdog with hand-offs: a holder gives the lock straight to a waiter of its instance
/// (and lets it into the critical section in the same script). Mutual exclusion holds
/// under the overlap audit, every unit sells once, and hand-offs did happen.
#[tokio::test]
async fn watchdog_handoffs_keep_mutual_exclusion_and_sell_exactly() {
    for (query, shards) in [
        ("watchdog?work_ms=1&wait_ms=10000", 1),
        ("segmented?work_ms=1&wait_ms=10000", 4),
    ] {
        let cluster = service(2, &[]);
        cluster.api(0).reset("101", 300, shards).await;
        let report = load(&cluster, query, 2_000, 100, true).await;
        let stats = assert_audit_consistent(&cluster, "101", &report).await;
        assert_eq!(report.count(200), 300, "{query}: {report:?}");
        assert_sold_out(&stats, 300, query);
        let handoffs = cluster.metric("seckill_lock_handoffs_total").await;
        assert!(handoffs > 0.0, "{query}: no lock was handed over");
    }
}

/// The fair lock (`fair=on`) under load from two instances: exact, no overlap.
#[tokio::test]
async fn fair_watchdog_and_segmented_sell_exactly() {
    assert_sells_exactly("watchdog?work_ms=1&fair=on&wait_ms=10000", 100).await;
    assert_sells_exactly_over("segmented?work_ms=1&fair=on&wait_ms=10000", 101, 4).await;
}

/// shares: each instance takes a share of the stock and sells it under its own local
/// lock; small shares, so that instances take many and wait for each other's at the
/// end. Every unit sells once; the audit adds up.
#[tokio::test]
async fn shares_sell_exactly_the_stock() {
    assert_sells_exactly("shares?work_ms=1&share_units=7&wait_ms=5000", 100).await;
}
