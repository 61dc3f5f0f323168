//! Holding under load and faults, through real Nginx in front of two real instances: 2,000
//! connections at once, Redis dying and coming back, an instance killed mid-load. An
//! acknowledged sale is never lost and a unit is never sold twice.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{Cluster, Nginx, int};
use serde_json::json;

/// 2,000 concurrent connections through Nginx, to the lock-free and every lock variant:
/// only the contract's statuses, no socket errors, every 200 an order, nothing oversold,
/// and any load shed is a 503 that says when to come back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_thousand_connections_hold() {
    rlimit::increase_nofile_limit(u64::MAX).unwrap();
    let cluster = Cluster::start(2, &[]);
    let nginx = Nginx::start(&cluster.instances);
    let mut peaks = Vec::new();
    for (variant, shards) in [
        ("lua", 1),
        ("setnx", 1),
        ("token?wait_ms=10000", 1),
        ("watchdog?wait_ms=10000", 1),
        ("segmented?wait_ms=10000", 8),
    ] {
        nginx.reset(&cluster.http, 1000, shards).await;
        let report = cluster
            .load_through(
                nginx.url(&format!("/deduct_stock/{variant}")),
                2000,
                2000,
                false,
            )
            .await;
        assert_eq!(report.transport_errors, 0, "{variant}: {report:?}");
        for status in report.statuses.keys() {
            assert!(
                [200, 409, 429, 503].contains(status),
                "{variant}: status {status} in {report:?}"
            );
        }
        assert_eq!(
            report.without_retry_after, 0,
            "{variant}: a 503 without Retry-After"
        );
        let stats = nginx.stats(&cluster.http).await;
        assert_eq!(int(&stats, "oversold"), 0, "{variant}: {stats}");
        assert_eq!(int(&stats, "lost_updates"), 0, "{variant}: {stats}");
        assert_eq!(
            int(&stats, "sold") as usize,
            report.count(200),
            "{variant}: {stats}"
        );
        let recorded = cluster.recorded_orders("101").await;
        assert!(
            report.orders.iter().all(|o| recorded.contains_key(o)),
            "{variant}: a 200 without its order"
        );
        peaks.push(
            cluster
                .instances
                .iter()
                .map(|i| i.peak_rss_kib())
                .collect::<Vec<_>>(),
        );
        eprintln!("{variant}: {:?}, {stats}", report.statuses);
    }
    eprintln!("peak RSS per instance (KiB) after each variant: {peaks:?}");
}

/// What a time-bound load saw.
#[derive(Debug, Default)]
struct Timed {
    statuses: BTreeMap<u16, usize>,
    transport_errors: usize,
    slowest: Duration,
}

/// `concurrency` workers POST to `url` until `until`.
async fn load_until(
    http: &reqwest::Client,
    url: String,
    concurrency: usize,
    until: Instant,
) -> Timed {
    let url = Arc::new(url);
    let workers: Vec<_> = (0..concurrency)
        .map(|_| {
            let (http, url) = (http.clone(), url.clone());
            tokio::spawn(async move {
                let mut seen = Timed::default();
                while Instant::now() < until {
                    let sent = Instant::now();
                    match http.post(url.as_str()).send().await {
                        Ok(response) => {
                            *seen.statuses.entry(response.status().as_u16()).or_default() += 1;
                            let _ = response.bytes().await;
                        }
                        Err(_) => seen.transport_errors += 1,
                    }
                    seen.slowest = seen.slowest.max(sent.elapsed());
                }
                seen
            })
        })
        .collect();
    let mut total = Timed::default();
    for worker in workers {
        let part = worker.await.unwrap();
        for (status, n) in part.statuses {
            *total.statuses.entry(status).or_default() += n;
        }
        total.transport_errors += part.transport_errors;
        total.slowest = total.slowest.max(part.slowest);
    }
    total
}

/// Redis dies under load: deductions answer 503 at once, nothing hangs, nothing panics;
/// when Redis comes back the instances reconnect by themselves, and a Redis that came back
/// empty sells nothing until a reset.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_dies_under_load_then_comes_back() {
    let mut cluster = Cluster::start(2, &[]);
    let nginx = Nginx::start(&cluster.instances);
    let variants = [
        ("lua", "1"),
        ("token?wait_ms=2000", "2"),
        ("watchdog?wait_ms=2000", "3"),
    ];
    for (_, product) in variants {
        let response = cluster
            .http
            .post(nginx.url("/admin/reset"))
            .json(&json!({ "product": product, "stock": 1_000_000 }))
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 200);
    }
    let until = Instant::now() + Duration::from_secs(3);
    let loads: Vec<_> = variants
        .into_iter()
        .map(|(variant, product)| {
            let separator = if variant.contains('?') { '&' } else { '?' };
            let path = format!("/deduct_stock/{variant}{separator}product={product}");
            let (http, url) = (cluster.http.clone(), nginx.url(&path));
            tokio::spawn(async move { (variant, load_until(&http, url, 10, until).await) })
        })
        .collect();
    tokio::time::sleep(Duration::from_millis(800)).await;
    cluster.redis.kill();
    for load in loads {
        let (variant, seen) = load.await.unwrap();
        eprintln!("{variant}: {seen:?}");
        assert_eq!(seen.transport_errors, 0, "{variant}: {seen:?}");
        assert!(
            seen.statuses.get(&200).is_some_and(|n| *n > 0),
            "{variant} sold before: {seen:?}"
        );
        assert!(
            seen.statuses.get(&503).is_some_and(|n| *n > 0),
            "{variant} answered 503 after: {seen:?}"
        );
        for status in seen.statuses.keys() {
            assert!(
                [200, 429, 503].contains(status),
                "{variant}: {status} in {seen:?}"
            );
        }
        // The Redis timeout is 1 s; nothing may wait much past its own wait_ms for it.
        assert!(
            seen.slowest < Duration::from_secs(4),
            "{variant} hung: {seen:?}"
        );
    }
    for instance in &cluster.instances {
        let alive = cluster
            .http
            .get(instance.url("/healthz"))
            .send()
            .await
            .unwrap();
        assert_eq!(alive.status(), 200, "the instance did not survive");
    }

    cluster.redis.restart_empty();
    let deadline = Instant::now() + Duration::from_secs(10);
    for instance in &cluster.instances {
        while cluster
            .http
            .get(instance.url("/readyz"))
            .send()
            .await
            .unwrap()
            .status()
            != 200
        {
            assert!(Instant::now() < deadline, "an instance did not reconnect");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
    let empty = cluster
        .http
        .post(nginx.url("/deduct_stock/lua"))
        .send()
        .await
        .unwrap();
    assert_eq!(empty.status(), 404, "an empty Redis has nothing for sale");
    nginx.reset(&cluster.http, 10, 1).await;
    for variant in ["lua", "token", "watchdog"] {
        let answer = cluster
            .http
            .post(nginx.url(&format!("/deduct_stock/{variant}")))
            .send()
            .await
            .unwrap();
        assert_eq!(answer.status(), 200, "{variant} after recovery");
    }
}

/// An instance is killed (SIGKILL) under load: Nginx moves on, nothing is oversold, and the
/// orders in Redis are the 200s the clients got, plus at most the requests in flight at the
/// kill (which got a 502, their answer lost with the instance).
async fn instance_killed_under_load(variant: &str) {
    let mut cluster = Cluster::start(2, &["--lock-lease-ms", "1000"]);
    let nginx = Nginx::start(&cluster.instances);
    nginx.reset(&cluster.http, 100_000, 1).await;
    let concurrency = 20;
    let load = {
        let (url, http) = (
            nginx.url(&format!("/deduct_stock/{variant}")),
            cluster.http.clone(),
        );
        let cluster_load = Cluster::load_detached(http, url, 3000, concurrency);
        tokio::spawn(cluster_load)
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    cluster.instances[1].kill();
    let report = load.await.unwrap();
    eprintln!("{variant}: {:?}", report.statuses);
    assert_eq!(report.transport_errors, 0, "{report:?}");
    for status in report.statuses.keys() {
        assert!(
            [200, 409, 429, 502].contains(status),
            "{variant}: {status} in {:?}",
            report.statuses
        );
    }
    let lost_answers = report.count(502);
    assert!(
        lost_answers <= concurrency,
        "more 502s than requests in flight: {:?}",
        report.statuses
    );

    let stats = cluster.get(0, "/stats").await.1;
    assert_eq!(int(&stats, "oversold"), 0, "{stats}");
    let recorded: BTreeSet<String> = cluster.recorded_orders("101").await.into_keys().collect();
    let acknowledged: BTreeSet<String> = report.orders.iter().cloned().collect();
    assert!(
        acknowledged.is_subset(&recorded),
        "an acknowledged sale is missing from Redis"
    );
    let unacknowledged = recorded.len() - acknowledged.len();
    assert!(
        unacknowledged <= lost_answers,
        "{unacknowledged} orders nobody was told about, but only {lost_answers} answers were lost"
    );
    assert_eq!(int(&stats, "sold") as usize, recorded.len());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn instance_killed_under_load_lua() {
    instance_killed_under_load("lua").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn instance_killed_under_load_watchdog() {
    instance_killed_under_load("watchdog?wait_ms=5000").await;
}

/// Past its in-flight limit an instance sheds load at once — 503 with Retry-After —
/// instead of queueing without bound, and what it admitted is still sold exactly.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sheds_load_past_its_in_flight_limit() {
    let cluster = Cluster::start(1, &["--max-in-flight", "8"]);
    cluster.reset("101", 1000, 1).await;
    let report = cluster
        .load(
            "/deduct_stock/watchdog?work_ms=50&wait_ms=10000",
            200,
            50,
            false,
        )
        .await;
    eprintln!("{report:?}");
    assert_eq!(report.transport_errors, 0, "{report:?}");
    assert!(report.count(503) > 0, "nothing was shed: {report:?}");
    assert_eq!(report.without_retry_after, 0, "{report:?}");
    assert_eq!(report.count(200) + report.count(503), 200, "{report:?}");
    let stats = cluster.stats("101").await;
    assert_eq!(int(&stats, "sold") as usize, report.count(200), "{stats}");
    assert_eq!(int(&stats, "oversold"), 0, "{stats}");
}
