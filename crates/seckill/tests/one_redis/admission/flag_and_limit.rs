//! The sold-out flag and a buyer's rate limit, at the front door of two instances behind
//! Nginx.

use std::time::{Duration, Instant};

use seckill_testkit::{Api, int};
use serde_json::{Value, json};

use super::{NOTICE, admission_when, two_behind_nginx};

/// `sold_out_flag: on`: once an instance saw the product sold out, its 409s cost Redis
/// nothing (counted in `/stats`); a reopen, a reset and an expired reservation giving its
/// unit back each clear it. `sticky`, the demos' flag: the unit that came back is never
/// sold — undersold.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_sold_out_flag_answers_from_memory_until_a_unit_may_be_back() {
    let (cluster, _nginx, _api) = two_behind_nginx();
    let (one, two) = (cluster.api(0), cluster.api(1));
    let sale = |flag: &str, pay_within_ms: u64| json!({"product": "704", "stock": 1, "pay_within_ms": pay_within_ms, "sold_out_flag": flag});
    one.reset_with(sale("on", 0)).await;
    let (status, bought) = one.deduct("704", "lua?user=a").await;
    assert_eq!(status, 200, "{bought}");
    for api in [&one, &two] {
        let (status, body) = api.deduct("704", "lua?user=b").await;
        assert_eq!(
            status, 409,
            "the stock says so, and the flag is set: {body}"
        );
    }
    let started = Instant::now();
    let before = crate::script_calls(&cluster.redis).await;
    for _ in 0..100 {
        let (status, body) = one.deduct("704", "lua?user=b").await;
        assert_eq!(
            (status, &body["outcome"]),
            (409, &json!("sold_out")),
            "{body}"
        );
    }
    // Besides the flush of the counts (at most one call per instance per 200 ms, however
    // long the 100 took: a slower machine flushes more often), nothing: not one a sale.
    let calls = crate::script_calls(&cluster.redis).await - before;
    let flushes = 2 * (started.elapsed().as_millis() as u64 / 200 + 2);
    assert!(
        calls <= flushes,
        "100 answers from the flag took {calls} script calls in {:?}",
        started.elapsed()
    );
    let stats = admission_when(&one, "704", |a| a["sold_out_flagged"] == 100).await;
    assert_eq!(stats["admission"]["sold_out_flagged"], 100, "{stats}");
    assert_eq!(int(&stats, "sold_out"), 2, "the stock's own 409s: {stats}");

    // A reopen: the next deduction asks the stock again.
    let (status, _) = one
        .post_json("/admin/reopen", &json!({"product": "704"}))
        .await;
    assert_eq!(status, 200);
    tokio::time::sleep(NOTICE).await;
    let asked = crate::script_calls(&cluster.redis).await;
    let (status, _) = one.deduct("704", "lua?user=b").await;
    assert_eq!(status, 409);
    assert!(
        crate::script_calls(&cluster.redis).await > asked,
        "a reopen clears the flag"
    );

    // A reset: a new sale sells.
    one.reset_with(sale("on", 300)).await;
    tokio::time::sleep(NOTICE).await;
    let (status, body) = one.deduct("704", "lua?user=a").await;
    assert_eq!(status, 200, "{body}");
    for api in [&one, &two] {
        let (status, _) = api.deduct("704", "lua?user=b").await;
        assert_eq!(status, 409);
    }
    // The reservation expires unpaid: its unit is back, and both flags are forgotten.
    let back = wait_for(&one, "704", |s| int(s, "remaining") == 1).await;
    assert_eq!(int(&back, "remaining"), 1, "{back}");
    tokio::time::sleep(NOTICE).await;
    let (status, body) = two.deduct("704", "lua?user=c").await;
    assert_eq!(status, 200, "the unit that came back sells: {body}");

    // Sticky: the unit that comes back stays unsold while buyers are turned away.
    one.reset_with(sale("sticky", 300)).await;
    tokio::time::sleep(NOTICE).await;
    let (status, _) = one.deduct("704", "lua?user=a").await;
    assert_eq!(status, 200);
    let (status, _) = one.deduct("704", "lua?user=b").await;
    assert_eq!(status, 409);
    wait_for(&one, "704", |s| int(s, "remaining") == 1).await;
    tokio::time::sleep(NOTICE).await;
    for _ in 0..5 {
        let (status, body) = one.deduct("704", "lua?user=b").await;
        assert_eq!(
            status, 409,
            "the sticky flag outlives the unit's return: {body}"
        );
    }
    let stats = wait_for(&one, "704", |s| int(s, "undersold") >= 1).await;
    assert_eq!(int(&stats, "remaining"), 1, "{stats}");
    assert_eq!(int(&stats, "undersold"), 1, "{stats}");
}

/// `/stats` of `product` once `check` holds (within 3 s), or the last one seen.
async fn wait_for(api: &Api, product: &str, check: impl Fn(&Value) -> bool) -> Value {
    let deadline = Instant::now() + Duration::from_secs(3);
    loop {
        let stats = api.stats(product).await;
        if check(&stats) || Instant::now() > deadline {
            return stats;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// `rate_limit: {per_s: 1, burst: 5}`: a buyer clicking fast gets the 5 tries of the burst
/// through, then 429 with `Retry-After`, counted in `/stats`, and no more than one more a
/// second; another buyer is not held back. However slowly the clicks go, the bucket's
/// verdict is its own: a second more of clicking lets one more through, never more.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_buyer_past_their_rate_is_told_when_to_come_back() {
    let (_cluster, _nginx, api) = two_behind_nginx();
    api.reset_with(
        json!({"product": "705", "stock": 1000, "rate_limit": {"per_s": 1, "burst": 5}}),
    )
    .await;
    let mut through = 0;
    let mut retry_after = Vec::new();
    let started = Instant::now();
    for _ in 0..20 {
        let response = api
            .http()
            .post(api.url("/deduct_stock/lua?product=705&user=bot"))
            .send()
            .await
            .unwrap();
        match response.status().as_u16() {
            200 => through += 1,
            429 => retry_after.push(
                response.headers()["retry-after"]
                    .to_str()
                    .unwrap()
                    .parse::<u64>()
                    .unwrap(),
            ),
            other => panic!("status {other}"),
        }
    }
    // The burst, and a token a second refilled while the 20 clicks went (a slower machine
    // clicks for longer, and is let through more: the bound grows with it).
    let refilled = started.elapsed().as_secs() + 1;
    assert!(
        through >= 5 && through as u64 <= 5 + refilled,
        "{through} of 20 got through in {:?}",
        started.elapsed()
    );
    assert!(retry_after.iter().all(|&s| s == 1), "{retry_after:?}");
    let (status, body) = api.deduct("705", "lua?user=someone").await;
    assert_eq!(status, 200, "another buyer: {body}");
    let (status, body) = api.deduct("705", "lua").await;
    assert_eq!(status, 400, "a rate per buyer needs the buyer: {body}");
    // Refused by the bucket in Redis, or (until the next token) from the memory of the
    // instance that heard it: counted either way.
    let refused = json!(retry_after.len());
    let stats = admission_when(&api, "705", |a| a["rate_limited"] == refused).await;
    assert_eq!(stats["admission"]["rate_limited"], refused, "{stats}");
}
