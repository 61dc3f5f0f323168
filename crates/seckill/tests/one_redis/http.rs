//! The HTTP contract against a real Redis: every status code, the admin token, and bad
//! input that is refused without touching the stock or the audit.

use std::time::{Duration, Instant};

use redis::AsyncCommands;
use seckill_testkit::{int, ports};
use serde_json::Value;

use crate::{instance, keys, service};

/// 200 deducted, 409 sold out, with the body the contract describes.
#[tokio::test]
async fn deducts_then_answers_sold_out() {
    let cluster = service(1, &[]);
    let api = cluster.api(0);
    api.reset("7", 1, 1).await;
    let (status, body) = api.post("/deduct_stock/token?product=7").await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["outcome"], "deducted");
    assert_eq!(body["variant"], "token");
    assert_eq!(body["product"], "7");
    assert_eq!(body["remaining"], 0);
    assert!(
        body["order"].as_str().is_some_and(|o| !o.is_empty()),
        "{body}"
    );
    assert!(body["instance"].as_str().is_some(), "{body}");
    for variant in ["naive", "setnx", "token", "lua"] {
        let (status, body) = api
            .post(&format!("/deduct_stock/{variant}?product=7"))
            .await;
        assert_eq!(status, 409, "{variant}: {body}");
        assert_eq!(body["outcome"], "sold_out");
    }
}

/// 429: a held lock turns setnx and token requests away (token after its wait).
#[tokio::test]
async fn held_lock_answers_429_and_counts_lock_busy() {
    let cluster = service(1, &[]);
    let api = cluster.api(0);
    api.reset("101", 10, 1).await;
    let mut redis = cluster.redis.conn().await;
    let _: () = redis
        .set(keys("101").whole().lock.clone(), "someone-else")
        .await
        .unwrap();
    let (status, body) = api.post("/deduct_stock/setnx").await;
    assert_eq!(status, 429, "{body}");
    assert_eq!(body["outcome"], "lock_busy");
    let started = Instant::now();
    let (status, _) = api.post("/deduct_stock/token?wait_ms=200").await;
    assert_eq!(status, 429);
    assert!(
        started.elapsed() >= Duration::from_millis(200),
        "token waited wait_ms first"
    );
    let stats = api.stats("101").await;
    assert_eq!(int(&stats, "lock_busy"), 2, "{stats}");
    assert_eq!(int(&stats, "remaining"), 10, "{stats}");
    assert_eq!(int(&stats, "sold"), 0, "{stats}");
}

/// 404 for an unknown variant lists the variants; 404 for a product never reset.
#[tokio::test]
async fn unknown_variant_and_unknown_product_are_404() {
    let cluster = service(1, &[]);
    let api = cluster.api(0);
    let (status, body) = api.post("/deduct_stock/pessimistic").await;
    assert_eq!(status, 404);
    let listed: Vec<&str> = body["variants"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap())
        .collect();
    for variant in ["naive", "setnx", "token", "lua"] {
        assert!(listed.contains(&variant), "{body}");
    }
    for variant in ["naive", "setnx", "token", "lua"] {
        let (status, body) = api
            .post(&format!("/deduct_stock/{variant}?product=never"))
            .await;
        assert_eq!(
            status, 404,
            "{variant} must not sell a product with no stock key: {body}"
        );
        assert_eq!(body["outcome"], "unknown_product");
    }
    let mut redis = cluster.redis.conn().await;
    let exists: bool = redis
        .exists(keys("never").whole().stock.clone())
        .await
        .unwrap();
    assert!(!exists, "a refused deduction must not create a stock key");
    let (status, _) = api.get("/stats?product=never").await;
    assert_eq!(status, 404);
}

/// 503 quickly when Redis is away, readiness follows it, and the instance recovers.
#[tokio::test]
async fn redis_away_is_503_then_recovers() {
    let mut cluster = service(1, &[]);
    let api = cluster.api(0);
    api.reset("101", 5, 1).await;
    cluster.redis.kill();
    for variant in ["naive", "setnx", "token", "lua"] {
        let started = Instant::now();
        let (status, body) = api.post(&format!("/deduct_stock/{variant}")).await;
        assert_eq!(status, 503, "{variant}: {body}");
        assert_eq!(body["outcome"], "redis_unavailable");
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "{variant} hung while Redis was away"
        );
    }
    let (status, _) = api.get("/readyz").await;
    assert_eq!(status, 503);
    let (status, _) = api.get("/healthz").await;
    assert_eq!(status, 200, "the process itself is healthy");

    cluster.redis.restart_empty();
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let (status, _) = api.get("/readyz").await;
        if status == 200 {
            break;
        }
        assert!(Instant::now() < deadline, "instance did not reconnect");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // Redis came back empty: no stock key is not stock.
    let (status, _) = api.post("/deduct_stock/lua").await;
    assert_eq!(status, 404);
    api.reset("101", 5, 1).await;
    let (status, _) = api.post("/deduct_stock/lua").await;
    assert_eq!(status, 200);
}

/// An instance pointed at a port where no Redis listens starts, and answers 503.
#[tokio::test]
async fn instance_without_redis_starts_and_answers_503() {
    let instance = instance(&format!("redis://127.0.0.1:{}", ports::candidate()), &[]);
    let http = reqwest::Client::new();
    let response = http
        .post(instance.url("/deduct_stock/lua"))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 503);
    assert!(response.headers().contains_key("retry-after"));
}

/// With --admin-token, reset needs `Authorization: Bearer <token>`.
#[tokio::test]
async fn admin_token_is_required_when_configured() {
    let cluster = service(1, &["--admin-token", "s3cret-token"]);
    let api = cluster.api(0);
    let url = api.url("/admin/reset");
    let body = serde_json::json!({ "product": "101", "stock": 3 });
    for auth in [
        None,
        Some("Bearer wrong-token"),
        Some("s3cret-token"),
        Some("Basic s3cret-token"),
    ] {
        let mut request = api.http().post(&url).json(&body);
        if let Some(auth) = auth {
            request = request.header("authorization", auth);
        }
        let response = request.send().await.unwrap();
        assert_eq!(response.status(), 401, "authorization {auth:?}");
    }
    let response = api
        .http()
        .post(&url)
        .header("authorization", "Bearer s3cret-token")
        .json(&body)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    assert_eq!(int(&api.stats("101").await, "remaining"), 3);
}

/// Reset clears orders, audit and locks, and splits stock over shards.
#[tokio::test]
async fn reset_clears_orders_audit_and_locks() {
    let cluster = service(1, &[]);
    let api = cluster.api(0);
    api.reset("101", 10, 1).await;
    api.post("/deduct_stock/lua").await;
    let mut redis = cluster.redis.conn().await;
    let _: () = redis
        .set(keys("101").whole().lock.clone(), "stuck")
        .await
        .unwrap();
    api.post("/deduct_stock/setnx").await;
    api.reset("101", 10, 4).await;
    let stats = api.stats("101").await;
    assert_eq!(int(&stats, "sold"), 0, "{stats}");
    assert_eq!(int(&stats, "lock_busy"), 0, "{stats}");
    assert_eq!(int(&stats, "remaining"), 10, "{stats}");
    assert_eq!(stats["shard_remaining"], serde_json::json!([3, 3, 2, 2]));
    let held: bool = redis
        .exists(keys("101").whole().lock.clone())
        .await
        .unwrap();
    assert!(!held, "reset frees a stuck lock");
    let (status, body) = api.post("/deduct_stock/token").await;
    assert_eq!(
        status, 400,
        "a split product is for the segmented variant: {body}"
    );
    api.reset("101", 10, 1).await;
    assert_eq!(
        api.stats("101").await["shard_remaining"],
        serde_json::json!([10])
    );
}

/// Bad input of every kind is a 400 (or 413) with a message, and changes nothing in Redis.
#[tokio::test]
async fn bad_input_is_refused_and_leaves_stock_and_audit_untouched() {
    let cluster = service(1, &[]);
    let api = cluster.api(0);
    api.reset("101", 10, 1).await;
    let before = api.stats("101").await;
    let huge = "9".repeat(5000);
    let bad = [
        "/deduct_stock/token?work_ms=-1".to_owned(),
        "/deduct_stock/token?work_ms=abc".to_owned(),
        "/deduct_stock/token?work_ms=1.5".to_owned(),
        "/deduct_stock/token?work_ms=99999999".to_owned(),
        format!("/deduct_stock/token?work_ms={huge}"),
        "/deduct_stock/token?ttl_ms=0".to_owned(),
        "/deduct_stock/token?wait_ms=3600000".to_owned(),
        "/deduct_stock/token?work_ms=1&work_ms=2".to_owned(),
        "/deduct_stock/lua?product=101&product=101".to_owned(),
        "/deduct_stock/lua?product=".to_owned(),
        "/deduct_stock/lua?product=%7B101%7D".to_owned(),
        "/deduct_stock/lua?product=101%0D%0AFLUSHALL".to_owned(),
        "/deduct_stock/lua?product=a:b".to_owned(),
        "/deduct_stock/lua?product=%C3%A9".to_owned(),
        format!("/deduct_stock/lua?product={}", "x".repeat(65)),
        "/deduct_stock/lua?work_ms=5".to_owned(),
        "/deduct_stock/setnx?ttl_ms=5".to_owned(),
        "/deduct_stock/naive?wait_ms=5".to_owned(),
        "/deduct_stock/lua?surprise=1".to_owned(),
        "/deduct_stock/token?fault=abandon".to_owned(),
        "/deduct_stock/setnx?fault=pause_before_release&pause_ms=10".to_owned(),
        "/deduct_stock/token?pause_ms=10".to_owned(),
        "/stats?product=a}b".to_owned(),
        "/stats?product=101&product=102".to_owned(),
        "/stock?product=".to_owned(),
    ];
    for path in &bad {
        let (status, body) = if path.starts_with("/deduct_stock") {
            api.post(path).await
        } else {
            api.get(path).await
        };
        assert_eq!(status, 400, "{path}: {body}");
        assert_eq!(body["outcome"], "bad_request", "{path}");
        assert!(
            body["error"]
                .as_str()
                .is_some_and(|e| !e.is_empty() && e.len() < 300),
            "{path}: {body}"
        );
    }
    let url = api.url("/deduct_stock/lua");
    let json_body = api
        .http()
        .post(&url)
        .header("content-type", "application/json")
        .body("{}")
        .send()
        .await
        .unwrap();
    assert_eq!(json_body.status(), 400, "a non-form body");
    // Its own client: the instance answers 413 without reading the body and closes the
    // connection, which a pooled client could otherwise reuse for the next request.
    let oversized = reqwest::Client::new()
        .post(&url)
        .header("content-type", "application/x-www-form-urlencoded")
        .body("a".repeat(100_000))
        .send()
        .await
        .unwrap();
    assert_eq!(oversized.status(), 413, "an oversized body");

    let reset = api.url("/admin/reset");
    for body in [
        "",
        "{",
        "not json",
        r#"{"product":"101"}"#,
        r#"{"product":"101","stock":-1}"#,
        r#"{"product":"101","stock":"ten"}"#,
        r#"{"product":"{101}","stock":5}"#,
        r#"{"product":"101","stock":5,"shards":0}"#,
        r#"{"product":"101","stock":5,"shards":100000}"#,
        r#"{"product":"101","stock":5,"extra":1}"#,
        r#"{"product":"101","stock":1e30}"#,
    ] {
        let response = api.http().post(&reset).body(body).send().await.unwrap();
        let status = response.status().as_u16();
        let answer: Value = response.json().await.unwrap_or(Value::Null);
        assert_eq!(status, 400, "reset with {body:?}: {answer}");
    }

    let after = api.stats("101").await;
    assert_eq!(before, after, "bad input changed stock or audit");
}

/// Form parameters in a POST body work like the query string (JMeter sends them so).
#[tokio::test]
async fn form_body_parameters_are_read() {
    let cluster = service(1, &[]);
    let api = cluster.api(0);
    api.reset("55", 2, 1).await;
    let response = api
        .http()
        .post(api.url("/deduct_stock/token"))
        .header("content-type", "application/x-www-form-urlencoded")
        .body("product=55&wait_ms=10")
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["product"], "55");
    let response = api
        .http()
        .post(api.url("/deduct_stock/token?product=55"))
        .header("content-type", "application/x-www-form-urlencoded")
        .body("product=55")
        .send()
        .await
        .unwrap();
    assert_eq!(
        response.status(),
        400,
        "the same parameter in query and body is a duplicate"
    );
}

/// `/deduct_stock` serves the configured default variant; GET works as POST does.
#[tokio::test]
async fn default_variant_and_get_are_served() {
    let cluster = service(1, &["--default-variant", "token"]);
    let api = cluster.api(0);
    api.reset("101", 5, 1).await;
    let (status, body) = api.post("/deduct_stock").await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["variant"], "token");
    let (status, body) = api.get("/deduct_stock/lua").await;
    assert_eq!(status, 200, "{body}");
    let (status, body) = api.get("/stock").await;
    assert_eq!(status, 200);
    assert_eq!(body["remaining"], 3);
}

/// `/metrics` counts deductions by variant and outcome, and lock acquisitions, each series
/// labelled with the instance that answered.
#[tokio::test]
async fn metrics_count_requests_by_variant_and_outcome() {
    let cluster = service(1, &["--instance-id", "seckill-7"]);
    let api = cluster.api(0);
    api.reset("101", 1, 1).await;
    api.post("/deduct_stock/setnx").await;
    api.post("/deduct_stock/lua").await;
    let text = api
        .http()
        .get(api.url("/metrics"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    for expected in [
        r#"seckill_deductions_total{instance="seckill-7",variant="setnx",outcome="deducted"} 1"#,
        r#"seckill_deductions_total{instance="seckill-7",variant="lua",outcome="sold_out"} 1"#,
        r#"seckill_lock_acquire_total{instance="seckill-7",variant="setnx",result="acquired"} 1"#,
        "seckill_deduction_duration_seconds_bucket",
        "seckill_lock_wait_seconds_bucket",
    ] {
        assert!(text.contains(expected), "missing {expected} in\n{text}");
    }
}
