//! `optimistic` (WATCH, MULTI/EXEC) from two instances on one real Redis: exact at low
//! contention; under 100 connections never oversold, its conflicts, its 429s and the units
//! it left unsold counted, and a 429 only once every try conflicted.

use seckill_testkit::{
    Report, Service, assert_every_200_an_order, assert_exact, assert_orders_recorded, int,
};
use serde_json::Value;

use crate::{recorded_orders, service, spread};

/// The audit against what the clients saw: exact from `initial`, one order per 200, every
/// refusal counted where its status says.
async fn assert_accounted(cluster: &Service, report: &Report, initial: i64) -> Value {
    let stats = cluster.api(0).stats("101").await;
    assert_eq!(report.transport_errors, 0, "requests without an answer");
    assert_every_200_an_order(report, &stats, "optimistic");
    assert_eq!(
        int(&stats, "sold_out") as usize,
        report.count(409),
        "{stats}"
    );
    let conflict = stats["optimistic"]["conflict"].as_i64().unwrap_or(0);
    assert_eq!(
        conflict as usize,
        report.count(429),
        "every 429 counted: {stats}"
    );
    assert_exact(&stats, initial, "optimistic");
    let statuses: Vec<u16> = report.statuses.keys().copied().collect();
    assert!(
        statuses.iter().all(|s| [200, 409, 429].contains(s)),
        "only 200, 409 and 429 under load: {report:?}"
    );
    let recorded = recorded_orders(&cluster.redis, "101").await;
    assert_orders_recorded(report, &recorded, "optimistic");
    assert_eq!(
        stats["by_instance"].as_object().map(|m| m.len()),
        Some(2),
        "both instances sold: {stats}"
    );
    stats
}

/// Few buyers at a time: every unit sold, once; the clients go on until their first 409.
#[tokio::test]
async fn optimistic_sells_exactly_at_low_contention() {
    let cluster = service(2, &[]);
    cluster.api(0).reset("101", 300, 1).await;
    let load = spread(&cluster, "101", "optimistic")
        .requests(20_000)
        .concurrency(4)
        .until_sold_out();
    let report = cluster.api(0).run(load).await;
    let stats = assert_accounted(&cluster, &report, 300).await;
    assert_eq!(int(&stats, "sold"), 300, "sold out: {stats}");
    let tx = &stats["optimistic"];
    assert_eq!(
        tx["commits"].as_i64(),
        Some(300),
        "one transaction ran per unit: {stats}"
    );
}

/// 100 connections on one product with stock to spare: nothing oversold; the transactions
/// that found the stock changed are counted; a request is turned away (429 `conflict`)
/// only after its first try and `retries` more all conflicted; and each one turned away
/// left a unit unsold.
#[tokio::test]
async fn optimistic_under_100_connections_counts_conflicts_and_undersell() {
    let cluster = service(2, &[]);
    cluster.api(0).reset("101", 5_000, 1).await;
    let retries = 2;
    let load = spread(&cluster, "101", &format!("optimistic?retries={retries}"))
        .requests(2_000)
        .concurrency(100);
    let report = cluster.api(0).run(load).await;
    let stats = assert_accounted(&cluster, &report, 5_000).await;
    let tx = &stats["optimistic"];
    let (commits, conflicts, conflict) = (
        tx["commits"].as_i64().unwrap(),
        tx["conflicts"].as_i64().unwrap(),
        tx["conflict"].as_i64().unwrap(),
    );
    assert_eq!(commits, int(&stats, "sold"), "{stats}");
    assert!(conflicts > 0, "100 buyers of one product conflict: {stats}");
    assert!(
        conflicts >= conflict * (retries + 1),
        "each 429 after {} conflicted tries: {stats}",
        retries + 1
    );
    let rate = tx["conflict_rate"].as_f64().unwrap();
    let expected = conflicts as f64 / (conflicts + commits) as f64;
    assert!((rate - expected).abs() < 1e-9, "{stats}");
    // The stock never ran out: every buyer turned away is a unit left unsold.
    assert!(int(&stats, "remaining") > 0, "{stats}");
    assert_eq!(int(&stats, "undersold"), conflict, "{stats}");
}

/// `retries=0`: one try only, so every conflict is a 429.
#[tokio::test]
async fn optimistic_without_retries_answers_each_conflict() {
    let cluster = service(2, &[]);
    cluster.api(0).reset("101", 5_000, 1).await;
    let load = spread(&cluster, "101", "optimistic?retries=0")
        .requests(1_000)
        .concurrency(100);
    let report = cluster.api(0).run(load).await;
    let stats = assert_accounted(&cluster, &report, 5_000).await;
    let tx = &stats["optimistic"];
    assert_eq!(tx["conflicts"], tx["conflict"], "{stats}");
    assert_eq!(report.count(200) + report.count(429), 1_000, "{report:?}");
}

/// One transaction connection and work that holds it: the requests that cannot get it
/// within `--redis-timeout-ms` are answered 503 `tx_busy`, counted, and sell nothing.
#[tokio::test]
async fn optimistic_answers_503_when_every_transaction_connection_is_in_use() {
    let cluster = service(
        1,
        &[
            "--tx-connections",
            "1",
            "--redis-timeout-ms",
            "300",
            "--redis-wait-timeout-ms",
            "100",
        ],
    );
    let api = cluster.api(0);
    api.reset("101", 100, 1).await;
    let answers =
        futures_util::future::join_all((0..6).map(|_| api.deduct("101", "optimistic?work_ms=200")))
            .await;
    let busy: Vec<&Value> = answers
        .iter()
        .filter(|(status, _)| *status == 503)
        .map(|(_, body)| body)
        .collect();
    assert!(!busy.is_empty(), "{answers:?}");
    assert!(
        busy.iter().all(|b| b["outcome"] == "tx_busy"),
        "{answers:?}"
    );
    let sold = answers.iter().filter(|(status, _)| *status == 200).count();
    let stats = api.stats("101").await;
    assert_eq!(int(&stats, "sold") as usize, sold, "{stats}");
    assert_eq!(
        stats["optimistic"]["tx_busy"].as_u64(),
        Some(busy.len() as u64),
        "{stats}"
    );
    assert_eq!(int(&stats, "remaining"), 100 - sold as i64, "{stats}");
}
