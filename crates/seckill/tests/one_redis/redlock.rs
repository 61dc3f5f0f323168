//! The `redlock` variant over 5 independent Redis servers, through Nginx: exact while a
//! majority of them is up, and nothing sold when a majority is gone.

use seckill_testkit::{Api, Instance, Nginx, RedisServer, assert_sold_out, heavy_turn, int};
use serde_json::Value;

use crate::{instance, service};

struct Setup {
    stock: RedisServer,
    lock_servers: Vec<RedisServer>,
    instances: Vec<Instance>,
    _nginx: Nginx,
    /// Through Nginx.
    api: Api,
}

/// A stock store, 5 lock servers, two instances with `--redlock-urls`, Nginx.
fn setup() -> Setup {
    let stock = RedisServer::start();
    let lock_servers: Vec<RedisServer> = (0..5).map(|_| RedisServer::start()).collect();
    let urls = lock_servers
        .iter()
        .map(RedisServer::url)
        .collect::<Vec<_>>()
        .join(",");
    let instances: Vec<Instance> = (0..2)
        .map(|_| instance(&stock.url(), &["--redlock-urls", &urls]))
        .collect();
    let nginx = Nginx::start(&instances);
    Setup {
        stock,
        lock_servers,
        instances,
        api: Api::new(&nginx.url("")),
        _nginx: nginx,
    }
}

impl Setup {
    /// Resets to `stock` and loads until it is sold out (a waiter that waited its whole
    /// `wait_ms` is a 429, and the next round goes on); the 200s of every round.
    async fn sell(&self, stock: i64, requests: usize) -> (usize, Value) {
        let api = &self.api;
        api.reset("101", stock, 1).await;
        let mut sold = 0;
        for _ in 0..5 {
            let load = api.load("101", "redlock?work_ms=1&wait_ms=10000");
            let report = api.run(load.requests(requests).concurrency(100)).await;
            assert!(
                report.statuses.keys().all(|s| [200, 409, 429].contains(s)),
                "only sales, sold out and lock busy: {report:?}"
            );
            sold += report.count(200);
            if int(&api.stats("101").await, "remaining") == 0 {
                break;
            }
        }
        (sold, api.stats("101").await)
    }
}

/// 100 connections against 60 units: exactly 60 sold, never two holders inside; the same
/// with 2 of the 5 lock servers killed; with 3 of 5 killed, no quorum: nothing sold, and
/// every answer a 429 or a 503.
#[tokio::test]
async fn redlock_holds_with_a_majority_and_sells_nothing_without_one() {
    let _turn = heavy_turn().await;
    let mut s = setup();
    let (sold, stats) = s.sell(60, 300).await;
    assert_eq!(sold, 60, "{stats}");
    assert_sold_out(&stats, 60, "redlock");

    s.lock_servers[0].kill();
    s.lock_servers[3].kill();
    let (sold, stats) = s.sell(60, 300).await;
    assert_eq!(sold, 60, "2 of 5 down: {stats}");
    assert_sold_out(&stats, 60, "redlock, 2 of 5 lock servers down");

    s.lock_servers[1].kill();
    s.api.reset("101", 60, 1).await;
    let load = s.api.load("101", "redlock?work_ms=1&wait_ms=200");
    let report = s.api.run(load.requests(40).concurrency(10)).await;
    let stats = s.api.stats("101").await;
    assert_eq!(report.count(200), 0, "3 of 5 down: {report:?}");
    assert!(
        report.statuses.keys().all(|s| [429, 503].contains(s)),
        "only 429 and 503 without a quorum: {report:?}"
    );
    assert_eq!(int(&stats, "sold"), 0, "{stats}");
    assert_eq!(int(&stats, "remaining"), 60, "{stats}");
    drop(s.stock);
    drop(s.instances);
}

/// Without `--redlock-urls`, `redlock` says what it needs: 503 `not_configured`.
/// Buyers and keys on redlock, as on every other variant: 20 buyers × 5 clicks with
/// `per_user: 1` sell one unit each; a key sent 10 times sells once, with one order id.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redlock_holds_the_per_user_limit_and_idempotency_keys() {
    let _turn = heavy_turn().await;
    let s = setup();
    let api = &s.api;
    api.reset_limited("101", 100, 1, 1).await;
    let variant = "redlock?work_ms=1&wait_ms=10000";
    let statuses = Api::buyers_click(std::slice::from_ref(api), "101", variant, 20, 5).await;
    let stats = api.stats("101").await;
    assert_eq!(int(&stats, "sold"), 20, "{statuses:?} {stats}");
    assert_eq!(stats["over_limit"]["users"], 0, "{stats}");

    let answers = Api::same_click(
        std::slice::from_ref(api),
        "101",
        &format!("{variant}&user=k"),
        "redlock-1",
        10,
    )
    .await;
    let orders: std::collections::BTreeSet<&str> = answers
        .iter()
        .map(|(_, body, _)| body["order"].as_str().unwrap_or_default())
        .collect();
    assert_eq!(orders.len(), 1, "{orders:?}");
    assert!(
        !orders.contains(""),
        "every click answered 200 with the order"
    );
    let stats = api.stats("101").await;
    assert_eq!(int(&stats, "sold"), 21, "{stats}");
}

#[tokio::test]
async fn redlock_without_servers_says_so() {
    let cluster = service(1, &[]);
    let api = cluster.api(0);
    api.reset("101", 5, 1).await;
    let (status, body) = api.deduct("101", "redlock").await;
    assert_eq!(status, 503, "{body}");
    assert_eq!(body["outcome"], "not_configured", "{body}");
    assert!(
        body["error"].as_str().unwrap().contains("--redlock-urls"),
        "{body}"
    );
}
