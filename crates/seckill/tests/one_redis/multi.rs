//! `multi` (Redisson's MultiLock) from two instances on one real Redis: carts sold all or
//! nothing with every product's stock exact; opposite lock orders deadlock until the
//! waits run out (counted), and one sorted order does not.

use std::sync::Arc;

use futures_util::future::join_all;
use seckill_testkit::{Api, assert_exact, int};
use serde_json::Value;
use tokio::sync::Semaphore;

use crate::service;

/// `carts` at `multi` with `knobs`, `concurrency` at a time, cart n on `apis[n % len]`:
/// each answer's status with its cart.
async fn buy(
    apis: &[Api],
    carts: &[Vec<&'static str>],
    knobs: &str,
    concurrency: usize,
) -> Vec<(u16, Vec<&'static str>)> {
    let gate = Arc::new(Semaphore::new(concurrency));
    join_all(carts.iter().enumerate().map(|(n, cart)| {
        let (api, gate) = (&apis[n % apis.len()], gate.clone());
        async move {
            let _turn = gate.acquire().await.expect("the gate stays open");
            let query = format!("multi?products={}&{knobs}", cart.join(","));
            let (status, body) = api.deduct(cart[0], &query).await;
            assert!(
                [200, 409, 429].contains(&status),
                "{query}: {status} {body}"
            );
            (status, cart.clone())
        }
    }))
    .await
}

fn multi(stats: &Value, field: &str) -> i64 {
    stats["multi"][field].as_i64().unwrap_or(0)
}

/// 200 carts of two or three of four products, from two instances, more carts than stock:
/// each product sold exactly one unit per cart answered 200 that holds it — no cart
/// half-sold — and never more than its stock.
#[tokio::test]
async fn multi_sells_carts_all_or_nothing_from_two_instances() {
    let cluster = service(2, &[]);
    let products = ["101", "102", "103", "104"];
    for product in products {
        cluster.api(0).reset(product, 60, 1).await;
    }
    let carts: Vec<Vec<&str>> = (0..200)
        .map(|n: usize| {
            let size = 2 + n % 2;
            (0..size).map(|i| products[(n + i * 3) % 4]).collect()
        })
        .collect();
    let answers = buy(&cluster.apis(), &carts, "wait_ms=10000", 16).await;
    for product in products {
        let stats = cluster.api(0).stats(product).await;
        let carts_sold = answers
            .iter()
            .filter(|(status, cart)| *status == 200 && cart.contains(&product))
            .count() as i64;
        assert_eq!(int(&stats, "sold"), carts_sold, "{product}: {stats}");
        assert_exact(&stats, 60, product);
        assert_eq!(multi(&stats, "half_sold"), 0, "{product}: {stats}");
    }
    let sold_out = answers.iter().filter(|(status, _)| *status == 409).count();
    assert!(
        sold_out > 0,
        "more carts than stock: some find a product gone"
    );
}

/// Carts 101,102 from one instance and 102,101 from the other, at once, with work inside
/// the locks. With `lock_order=given` each holds the lock the other waits for: carts time
/// out, each after its whole wait, and `/stats` counts them, the time they waited and the
/// units left unsold. With `sorted`, every cart sells.
#[tokio::test]
async fn multi_opposite_orders_deadlock_with_given_and_not_with_sorted() {
    let cluster = service(2, &[]);
    let apis = cluster.apis();
    let carts: Vec<Vec<&str>> = (0..40)
        .map(|n| {
            if n % 2 == 0 {
                vec!["101", "102"]
            } else {
                vec!["102", "101"]
            }
        })
        .collect();

    for product in ["101", "102"] {
        cluster.api(0).reset(product, 1_000, 1).await;
    }
    let wait_ms = 300;
    let given = buy(
        &apis,
        &carts,
        &format!("lock_order=given&work_ms=20&wait_ms={wait_ms}"),
        8,
    )
    .await;
    let timed_out = given.iter().filter(|(status, _)| *status == 429).count() as i64;
    let stats = cluster.api(0).stats("101").await;
    eprintln!(
        "given: {timed_out} of 40 carts timed out, {} ms waited, {} units left unsold while buyers were turned away",
        multi(&stats, "waited_ms"),
        int(&stats, "undersold")
    );
    assert!(timed_out > 0, "opposite orders deadlock: {stats}");
    for product in ["101", "102"] {
        let stats = cluster.api(0).stats(product).await;
        assert_eq!(multi(&stats, "timed_out"), timed_out, "{stats}");
        assert_eq!(int(&stats, "lock_busy"), timed_out, "{stats}");
        assert!(
            multi(&stats, "waited_ms") >= timed_out * wait_ms,
            "each timed-out cart waited its whole wait: {stats}"
        );
        assert_eq!(int(&stats, "undersold"), timed_out, "{stats}");
        assert_eq!(int(&stats, "sold"), 40 - timed_out, "{stats}");
    }

    for product in ["101", "102"] {
        cluster.api(0).reset(product, 1_000, 1).await;
    }
    let sorted = buy(
        &apis,
        &carts,
        "lock_order=sorted&work_ms=20&wait_ms=5000",
        8,
    )
    .await;
    assert!(
        sorted.iter().all(|(status, _)| *status == 200),
        "{sorted:?}"
    );
    for product in ["101", "102"] {
        let stats = cluster.api(0).stats(product).await;
        assert_eq!(int(&stats, "sold"), 40, "{stats}");
        assert_eq!(multi(&stats, "timed_out"), 0, "{stats}");
        assert_eq!(int(&stats, "lock_busy"), 0, "{stats}");
    }
}

/// A buyer at their limit on one product of a cart: the cart is refused `403
/// limit_reached` with nothing sold — the limit is checked under the cart's locks before
/// any line sells. Before, the other product's line sold first, and the cart was answered
/// 403 all the same, sold in part (`multi.half_sold`).
#[tokio::test]
async fn a_cart_with_a_product_at_the_buyers_limit_sells_nothing() {
    let cluster = service(1, &[]);
    let api = cluster.api(0);
    api.reset_limited("101", 10, 1, 1).await;
    api.reset_limited("102", 10, 1, 1).await;
    let (status, body) = api.deduct("102", "watchdog?user=ann").await;
    assert_eq!(status, 200, "ann's one unit of 102: {body}");
    let (status, body) = api.deduct("101", "multi?products=101,102&user=ann").await;
    assert_eq!(status, 403, "{body}");
    assert_eq!(body["outcome"], "limit_reached", "{body}");
    let stats = api.stats("101").await;
    assert_eq!(int(&stats, "sold"), 0, "nothing of 101 sold: {stats}");
    assert_eq!(multi(&stats, "half_sold"), 0, "{stats}");
    let (status, body) = api.deduct("101", "multi?products=101,102&user=bob").await;
    assert_eq!(status, 200, "bob, at no limit, buys the cart: {body}");
}
