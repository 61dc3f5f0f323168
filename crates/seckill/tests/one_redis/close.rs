//! Closing a sale (`/admin/close`) under load from two instances on one real Redis: with
//! `guard=rw` the close takes the product's write lock, waits for the sales in flight, and
//! nothing sells after it answers — under a stream of readers that never stops; with
//! `guard=check` the sales that checked "open" just before the close may sell after it, and
//! the audit counts them.

use std::time::{Duration, Instant};

use seckill_testkit::{Report, Service, assert_every_200_an_order, int};
use serde_json::{Value, json};

use crate::{keys, service, spread};

/// 100 connections of `optimistic` with `guard` and 20 ms of work, spread over both
/// instances, and a close 400 ms in: the load's report, the close's answer and how long
/// it took.
async fn close_under_load(cluster: &Service, guard: &str) -> (Report, Value, Duration) {
    let api = cluster.api(0);
    api.reset("101", 1_000_000, 1).await;
    let load = spread(
        cluster,
        "101",
        &format!("optimistic?guard={guard}&work_ms=20&retries=10"),
    )
    .requests(4_000)
    .concurrency(100);
    let close = async {
        tokio::time::sleep(Duration::from_millis(400)).await;
        let started = Instant::now();
        let (status, body) = api
            .post_json(
                "/admin/close",
                &json!({ "product": "101", "wait_ms": 10_000 }),
            )
            .await;
        assert_eq!(status, 200, "{body}");
        (body, started.elapsed())
    };
    let (report, (body, took)) = tokio::join!(api.run(load), close);
    (report, body, took)
}

fn close(stats: &Value, field: &str) -> i64 {
    stats["close"][field].as_i64().unwrap_or(0)
}

/// The close with `guard=rw`: it waits for the sales in flight (their read locks) — no
/// longer than the longest of them — and every deduction after it is refused. The readers
/// never stop coming (100 connections for seconds after), and the close still gets in.
#[tokio::test]
async fn close_with_guard_rw_sells_nothing_after_it_under_a_stream_of_readers() {
    let cluster = service(2, &[]);
    let (report, closed, took) = close_under_load(&cluster, "rw").await;
    let stats = cluster.api(0).stats("101").await;
    eprintln!(
        "guard=rw: the close waited {} ms (answered in {} ms; longest sale {} ms); {} sold, {} refused after",
        closed["waited_ms"],
        took.as_millis(),
        report.latency.max() / 1_000,
        int(&stats, "sold"),
        close(&stats, "refused")
    );
    assert_eq!(stats["close"]["closed"], true, "{stats}");
    assert_eq!(close(&stats, "sold_after_close"), 0, "{stats}");
    assert!(
        close(&stats, "refused") > 0,
        "sales after the close: {stats}"
    );
    assert!(int(&stats, "sold") > 0, "{stats}");
    let waited = closed["waited_ms"].as_u64().unwrap();
    assert!(
        waited <= report.latency.max() / 1_000 + 50,
        "the close waits for the sales in flight, no longer: {closed}, longest sale {} ms",
        report.latency.max() / 1_000
    );
    assert!(
        report
            .statuses
            .keys()
            .all(|status| [200, 410, 429].contains(status)),
        "{report:?}"
    );
    assert_every_200_an_order(&report, &stats, "guard=rw");
    assert_eq!(
        close(&stats, "refused") as usize,
        report.count(410),
        "{stats}"
    );
}

/// The same close with `guard=check`: deductions that checked "open" before it sell after
/// it. How many is a matter of timing; the audit counts them and the test reports them.
#[tokio::test]
async fn close_with_guard_check_reports_the_sales_after_it() {
    let cluster = service(2, &[]);
    let (report, closed, _) = close_under_load(&cluster, "check").await;
    let stats = cluster.api(0).stats("101").await;
    eprintln!(
        "guard=check: the close waited {} ms; {} units sold after it; {} refused",
        closed["waited_ms"],
        close(&stats, "sold_after_close"),
        close(&stats, "refused")
    );
    assert_eq!(stats["close"]["closed"], true, "{stats}");
    assert!(close(&stats, "refused") > 0, "{stats}");
    assert_every_200_an_order(&report, &stats, "guard=check");
    assert_eq!(int(&stats, "oversold"), 0, "{stats}");
}

/// The lock-free `lua` counts a sale that lands after the close, as the locked variants'
/// scripts do: the close's mark put in the audit by hand, as a close that lands between a
/// deduction's check ("open": the product's meta is untouched) and its sale leaves it.
#[tokio::test]
async fn a_lua_sale_after_the_close_is_counted() {
    let cluster = service(1, &[]);
    let api = cluster.api(0);
    api.reset("101", 10, 1).await;
    let _: () = redis::AsyncCommands::hset(
        &mut cluster.redis.conn().await,
        keys("101").audit,
        "closed_at",
        1,
    )
    .await
    .unwrap();
    for _ in 0..2 {
        let (status, body) = api.deduct("101", "lua").await;
        assert_eq!(status, 200, "{body}");
    }
    let stats = api.stats("101").await;
    assert_eq!(close(&stats, "sold_after_close"), 2, "{stats}");
    assert_eq!(int(&stats, "sold"), 2, "{stats}");
}

/// Reopened, the product sells again; closing an unknown product is a 404.
#[tokio::test]
async fn reopen_sells_again_and_unknown_products_are_refused() {
    let cluster = service(1, &[]);
    let api = cluster.api(0);
    api.reset("101", 10, 1).await;
    let (status, _) = api
        .post_json("/admin/close", &json!({ "product": "101" }))
        .await;
    assert_eq!(status, 200);
    let (status, body) = api.deduct("101", "watchdog?guard=rw").await;
    assert_eq!((status, body["outcome"].as_str()), (410, Some("closed")));
    let (status, _) = api
        .post_json("/admin/reopen", &json!({ "product": "101" }))
        .await;
    assert_eq!(status, 200);
    let (status, body) = api.deduct("101", "watchdog?guard=rw").await;
    assert_eq!(status, 200, "{body}");
    let stats = api.stats("101").await;
    assert_eq!(stats["close"]["closed"], false, "{stats}");
    assert_eq!(close(&stats, "refused"), 1, "{stats}");
    let (status, _) = api
        .post_json("/admin/close", &json!({ "product": "nope" }))
        .await;
    assert_eq!(status, 404);
    let (status, _) = api
        .post_json(
            "/admin/close",
            &json!({ "product": "101", "wait_ms": 999_999 }),
        )
        .await;
    assert_eq!(status, 400);
}
