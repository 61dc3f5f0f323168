//! Hostile input on every endpoint and parameter: a 4xx with a clear message, never a 5xx,
//! never a change to stock or audit.

use seckill::variants::VARIANTS;
use seckill_testkit::{Api, Postgres, RedisServer, ZooKeeperEnsemble};
use serde_json::Value;

use crate::instance;

/// Values no parameter accepts: huge, empty, non-ASCII, control characters, hash-tag
/// braces, CRLF, signs, exponents, hex, padding, overflow. Percent-encoded as a client
/// would send them.
fn hostile_values() -> Vec<String> {
    vec![
        "x".repeat(10_000),
        String::new(),
        "%C3%A9".into(),
        "%E2%80%AE101".into(),
        "%00".into(),
        "1%00".into(),
        "%7B101%7D".into(),
        "101%7D%7Bx".into(),
        "101%0D%0ASET%20x%201".into(),
        "-1".into(),
        "1e3".into(),
        "0x10".into(),
        "%201".into(),
        "1%20".into(),
        "99999999999999999999999999".into(),
        "*".into(),
        "seckill%3A%7B101%7D%3Astock".into(),
    ]
}

async fn send(api: &Api, method: &str, path: &str, body: Option<String>) -> (u16, Value) {
    let url = api.url(path);
    let request = match method {
        "GET" => api.http().get(url),
        _ => api.http().post(url),
    };
    let request = match body {
        Some(body) => request
            .header("content-type", "application/json")
            .body(body),
        None => request,
    };
    let response = request.send().await.unwrap();
    let status = response.status().as_u16();
    (status, response.json().await.unwrap_or(Value::Null))
}

fn assert_refused(what: &str, status: u16, body: &Value) {
    assert!((400..500).contains(&status), "{what}: {status} {body}");
    if status == 400 {
        let message = body["error"].as_str().unwrap_or_default();
        assert!(
            !message.is_empty() && message.len() < 300,
            "{what}: no clear message: {body}"
        );
        assert!(
            !message.contains('\r') && !message.contains('\n'),
            "{what}: raw control characters echoed"
        );
    }
}

/// Every parameter of every endpoint that takes parameters — every variant of the registry
/// and every knob any of them takes — with every hostile value, and duplicated: refused,
/// and Redis is as it was.
#[tokio::test]
async fn every_parameter_refuses_hostile_values() {
    // Servers for redlock, zookeeper and the pg_* variants too, so that every variant
    // serves: a value that is hostile to one parameter may be a valid product id (`-1`,
    // `1e3`), and then the variant runs.
    let stock = RedisServer::start();
    let redlock: Vec<RedisServer> = (0..3).map(|_| RedisServer::start()).collect();
    let urls: Vec<String> = redlock.iter().map(RedisServer::url).collect();
    let zookeeper = ZooKeeperEnsemble::start(1);
    let postgres = Postgres::start();
    let args = [
        "--redlock-urls",
        &urls.join(","),
        "--zookeeper-urls",
        &zookeeper.hosts(),
        "--orders-db",
        &postgres.url(),
    ];
    let instance = instance(&stock.url(), &args);
    let api = instance.api();
    api.reset("101", 50, 1).await;
    api.reset("202", 50, 4).await;
    api.reset_with(serde_json::json!({"product": "303", "stock": 50, "stock_in": "postgres"}))
        .await;
    let stats = async || {
        let mut all = Vec::new();
        for product in ["101", "202", "303"] {
            let mut stats = api.stats(product).await;
            // (The reconciliation's backlog age moves with the clock.)
            stats["orders_of_record"] = Value::Null;
            all.push(stats);
        }
        all
    };
    let before = stats().await;
    let mut endpoints: Vec<(&str, String)> = VARIANTS
        .iter()
        .map(|v| ("POST", format!("/deduct_stock/{v}")))
        .collect();
    for (method, path) in [
        ("POST", "/deduct_stock"),
        ("GET", "/deduct_stock/token"),
        ("GET", "/stock"),
        ("GET", "/stats"),
    ] {
        endpoints.push((method, path.to_owned()));
    }
    let mut parameters = seckill::knobs::ALWAYS.to_vec();
    for knob in VARIANTS.iter().flat_map(|v| v.spec().knobs) {
        if !parameters.contains(&knob.name) {
            parameters.push(knob.name);
        }
    }
    let mut tried = 0;
    for (method, path) in &endpoints {
        for parameter in &parameters {
            for value in hostile_values() {
                // A hostile value may be a valid buyer id (`-1`): on a product never reset,
                // it is then a 404, and still nothing is sold.
                let query = match *parameter {
                    "user" => format!("{path}?user={value}&product=never-reset"),
                    _ => format!("{path}?{parameter}={value}"),
                };
                let (status, body) = send(&api, method, &query, None).await;
                assert_refused(
                    &format!("{method} {path}?{parameter}=…({} chars)", value.len()),
                    status,
                    &body,
                );
                tried += 1;
            }
            let duplicated = format!("{path}?{parameter}=1&{parameter}=1");
            let (status, body) = send(&api, method, &duplicated, None).await;
            assert_refused(&format!("{method} {duplicated}"), status, &body);
        }
    }
    for variant in [
        "%7B101%7D",
        "naive%0D%0A",
        "NAIVE",
        "lua%00",
        &"v".repeat(5000),
        "..%2Fstats",
        "%C3%A9",
    ] {
        let (status, body) = send(&api, "POST", &format!("/deduct_stock/{variant}"), None).await;
        assert_refused(&format!("variant {variant:.40}"), status, &body);
    }
    let after = stats().await;
    assert_eq!(before, after, "hostile input changed stock or audit");
    assert!(tried > 1000);
}

/// The `Idempotency-Key` header with values no key accepts — empty, huge, braces, spaces,
/// non-ASCII, a key of another product, twice — on every variant: refused with a clear
/// 400, and Redis is as it was.
#[tokio::test]
async fn hostile_idempotency_keys_are_refused() {
    let stock = RedisServer::start();
    let instance = instance(&stock.url(), &[]);
    let api = instance.api();
    api.reset("101", 50, 1).await;
    let before = api.stats("101").await;
    let values: Vec<Vec<u8>> = vec![
        Vec::new(),
        b"\"\"".to_vec(),
        "k".repeat(129).into_bytes(),
        "k".repeat(10_000).into_bytes(),
        b"{101}".to_vec(),
        b"a b".to_vec(),
        b"a/b".to_vec(),
        b"seckill:{101}:stock".to_vec(),
        "é".as_bytes().to_vec(),
        b"\xff\xfe".to_vec(),
        b"\"k".to_vec(),
        b"*".to_vec(),
    ];
    let mut tried = 0;
    for variant in VARIANTS {
        let url = api.url(&format!("/deduct_stock/{variant}?product=101"));
        for value in &values {
            let header = reqwest::header::HeaderValue::from_bytes(value).expect("a header value");
            let response = api
                .http()
                .post(&url)
                .header("idempotency-key", header)
                .send()
                .await
                .unwrap();
            let status = response.status().as_u16();
            let body: Value = response.json().await.unwrap_or(Value::Null);
            assert_refused(&format!("{variant} with key {value:.40?}"), status, &body);
            tried += 1;
        }
        let twice = api
            .http()
            .post(&url)
            .header("idempotency-key", "a")
            .header("idempotency-key", "b")
            .send()
            .await
            .unwrap();
        assert_eq!(twice.status().as_u16(), 400, "{variant}: two keys");
    }
    assert_eq!(
        api.stats("101").await,
        before,
        "hostile keys changed stock or audit"
    );
    assert!(tried > 50);
}

/// Admin bodies: malformed, mistyped, nested, duplicated, oversized, smuggling keys.
#[tokio::test]
async fn admin_bodies_refuse_hostile_json() {
    let cluster = crate::service(1, &[]);
    let api = cluster.api(0);
    api.reset("101", 50, 1).await;
    let before = api.stats("101").await;
    let nested = format!("{}{}", "[".repeat(10_000), "]".repeat(10_000));
    let bodies = [
        String::new(),
        "{".into(),
        "null".into(),
        "[]".into(),
        "\"101\"".into(),
        nested,
        r#"{"product":101,"stock":1}"#.into(),
        r#"{"product":null,"stock":1}"#.into(),
        r#"{"product":"101","product":"102","stock":1}"#.into(),
        r#"{"product":"101","stock":1,"stock":2}"#.into(),
        r#"{"product":"101\u0000","stock":1}"#.into(),
        r#"{"product":"10\r\n1","stock":1}"#.into(),
        r#"{"product":"{101}","stock":1}"#.into(),
        r#"{"product":"101}:x:{y","stock":1}"#.into(),
        r#"{"product":"101","stock":-5}"#.into(),
        r#"{"product":"101","stock":1.5}"#.into(),
        r#"{"product":"101","stock":99999999999999999999}"#.into(),
        r#"{"product":"101","stock":1,"shards":-1}"#.into(),
        r#"{"product":"101","stock":1,"shards":65}"#.into(),
        format!(r#"{{"product":"{}","stock":1}}"#, "p".repeat(65)),
        format!(
            r#"{{"product":"101","stock":1,"pad":"{}"}}"#,
            "x".repeat(10_000)
        ),
    ];
    for path in ["/admin/reset", "/admin/unlock"] {
        for body in &bodies {
            let (status, answer) = send(&api, "POST", path, Some(body.clone())).await;
            assert_refused(&format!("{path} with {:.60}", body), status, &answer);
        }
    }
    assert_eq!(
        before,
        api.stats("101").await,
        "a refused admin request changed something"
    );
}
