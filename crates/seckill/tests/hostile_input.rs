//! Hostile input on every endpoint and parameter: a 4xx with a clear message, never a 5xx,
//! never a change to stock or audit.

mod common;

use common::Cluster;
use serde_json::Value;

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

async fn send(cluster: &Cluster, method: &str, path: &str, body: Option<String>) -> (u16, Value) {
    let url = cluster.instances[0].url(path);
    let request = match method {
        "GET" => cluster.http.get(url),
        _ => cluster.http.post(url),
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

/// Every parameter of every endpoint that takes parameters, with every hostile value, and
/// duplicated: refused, and Redis is as it was.
#[tokio::test]
async fn every_parameter_refuses_hostile_values() {
    let cluster = Cluster::start(1, &[]);
    cluster.reset("101", 50, 1).await;
    cluster.reset("202", 50, 4).await;
    let before = (cluster.stats("101").await, cluster.stats("202").await);
    let endpoints = [
        ("POST", "/deduct_stock/naive"),
        ("POST", "/deduct_stock/setnx"),
        ("POST", "/deduct_stock/token"),
        ("POST", "/deduct_stock/watchdog"),
        ("POST", "/deduct_stock/segmented"),
        ("POST", "/deduct_stock/lua"),
        ("POST", "/deduct_stock"),
        ("GET", "/deduct_stock/token"),
        ("GET", "/stock"),
        ("GET", "/stats"),
    ];
    let parameters = [
        "product", "work_ms", "ttl_ms", "lease_ms", "wait_ms", "fault", "pause_ms", "batch",
    ];
    let mut tried = 0;
    for (method, path) in endpoints {
        for parameter in parameters {
            for value in hostile_values() {
                let query = format!("{path}?{parameter}={value}");
                let (status, body) = send(&cluster, method, &query, None).await;
                assert_refused(
                    &format!("{method} {path}?{parameter}=…({} chars)", value.len()),
                    status,
                    &body,
                );
                tried += 1;
            }
            let duplicated = format!("{path}?{parameter}=1&{parameter}=1");
            let (status, body) = send(&cluster, method, &duplicated, None).await;
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
        let (status, body) =
            send(&cluster, "POST", &format!("/deduct_stock/{variant}"), None).await;
        assert_refused(&format!("variant {variant:.40}"), status, &body);
    }
    let after = (cluster.stats("101").await, cluster.stats("202").await);
    assert_eq!(before, after, "hostile input changed stock or audit");
    assert!(tried > 1000);
}

/// Admin bodies: malformed, mistyped, nested, duplicated, oversized, smuggling keys.
#[tokio::test]
async fn admin_bodies_refuse_hostile_json() {
    let cluster = Cluster::start(1, &[]);
    cluster.reset("101", 50, 1).await;
    let before = cluster.stats("101").await;
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
            let (status, answer) = send(&cluster, "POST", path, Some(body.clone())).await;
            assert_refused(&format!("{path} with {:.60}", body), status, &answer);
        }
    }
    assert_eq!(
        before,
        cluster.stats("101").await,
        "a refused admin request changed something"
    );
}
