//! A partial failure stays partial: a replica that stops answering (SIGSTOP: a pause, a
//! fork for a full sync, a network hiccup) under `--redis-wait-replicas 1` load slows
//! nothing but the confirmations it owes, and those fail fast.
//!
//! On one Redis every product's sales are confirmed by the same replica, so product 102
//! here is answered `503 unconfirmed` at once like 101, not queued behind 101's `WAIT`s;
//! `topology redis_cluster` has a product on a master whose replica is fine, sold with 200s.
//!
//! No clock decides these tests: what each request was answered, and who was answered
//! while a sale was seen blocked in `WAIT` (which the stopped replica cannot end). How
//! many answers a second each load got is `seckill-bench --suite partial`'s figure.

use std::time::Duration;

use seckill_testkit::api::deduct_path;
use seckill_testkit::partial::{PATIENT_WAIT, Phase, until_confirmed, while_a_sale_waits};
use seckill_testkit::{Api, Load, Method, RedisServer, assert_exact, heavy_turn, int};

use crate::instance;

/// Units of each product: more than the phases sell.
const STOCK: i64 = 10_000_000;

const WAIT_TIMEOUT: Duration = Duration::from_millis(300);

/// How long each phase's loads run.
const PHASE: Duration = Duration::from_secs(2);

/// Product 101's confirmed sales, lua and watchdog, from 20 clients; 102, `/readyz` and
/// `/stats` of 101 beside them.
async fn phase(api: &Api) -> Phase {
    let confirmed = Load::to(
        vec![
            api.url(&deduct_path("101", "lua")),
            api.url(&deduct_path("101", "watchdog?wait_ms=3000")),
        ],
        Method::Post,
    );
    Phase::run(api, confirmed.concurrency(20), "102", "101", PHASE).await
}

/// With the replica frozen, under load: `/readyz` and `/stats` are answered 200 every
/// time, 101 and 102 200 or `503 unconfirmed` ([`Phase::assert_isolated`]); every one of
/// those sales is on the master, recorded and audited. Who waits for whom: while a sale of
/// 101 is seen blocked in `WAIT` (an instance whose `WAIT` outlasts the test, one
/// confirmation connection), `/readyz` and `/stats` are answered 200 and 102 `503
/// unconfirmed` — before that sale, which is confirmed with 200 once the replica is let go
/// ([`while_a_sale_waits`]). After SIGCONT the 200s come back by themselves.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stalled_replica_slows_only_the_sales_it_must_confirm() {
    let _turn = heavy_turn().await;
    let master = RedisServer::start();
    let replica = RedisServer::start_with(&["--replicaof", "127.0.0.1", &master.port.to_string()]);
    let timeout = WAIT_TIMEOUT.as_millis().to_string();
    let instance = instance(
        &master.url(),
        &[
            "--redis-wait-replicas",
            "1",
            "--redis-wait-timeout-ms",
            &timeout,
        ],
    );
    let patient = crate::instance(&master.url(), &PATIENT_WAIT);
    let api = instance.api();
    replica.wait_synced(Duration::from_secs(10)).await;
    api.reset("101", STOCK, 1).await;
    api.reset("102", STOCK, 1).await;

    let healthy = phase(&api).await;
    let before = api.stats("101").await;
    replica.signal("STOP");
    let stalled = phase(&api).await;
    let after = api.stats("101").await;
    let waiting = while_a_sale_waits(&patient.api(), &master.url(), "101", "102").await;
    replica.signal("CONT");
    let (status, body) = waiting.sale.await.unwrap();
    let back = until_confirmed(&api, "101", Duration::from_secs(5)).await;
    eprintln!("confirmed sales again {back:?} after SIGCONT");

    assert!(
        healthy.confirmed.count(200) * 2 > healthy.confirmed.answered(),
        "with the replica healthy, sales are confirmed: {:?}",
        healthy.confirmed.statuses
    );
    stalled.assert_isolated();
    // Every unconfirmed sale is on the master, recorded and audited.
    let confirmed = &stalled.confirmed;
    let sold = int(&after, "sold") - int(&before, "sold");
    let unconfirmed = int(&after, "unconfirmed") - int(&before, "unconfirmed");
    assert_eq!(
        sold as usize,
        confirmed.count(200) + confirmed.count(503),
        "{after}"
    );
    assert_eq!(unconfirmed as usize, confirmed.count(503), "{after}");
    assert_exact(&after, STOCK, "with the replica stalled");

    assert_eq!(waiting.readyz.0, 200, "{}", waiting.readyz.1);
    assert_eq!(waiting.stats.0, 200, "{}", waiting.stats.1);
    assert_eq!(
        (waiting.other.0, &waiting.other.1["outcome"]),
        (503, &serde_json::json!("unconfirmed")),
        "102 is told at once that its confirmation cannot be had: {}",
        waiting.other.1
    );
    assert_eq!(
        status, 200,
        "the waiting sale, confirmed once the replica was let go: {body}"
    );
}

/// With one confirmation connection (`--confirm-connections 1`) and the replica frozen, a
/// sale that arrives while another's `WAIT` holds the connection is answered `503
/// unconfirmed` at once: an exhausted pool says so, it does not queue. Without a clock: the
/// first sale is seen blocked in `WAIT` (which the stopped replica cannot end, and whose
/// timeout outlasts the test), the second is sent then and answered while the first still
/// waits; the first is confirmed once the replica is let go.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sale_finding_every_confirmation_connection_in_use_is_answered_at_once() {
    let master = RedisServer::start();
    let replica = RedisServer::start_with(&["--replicaof", "127.0.0.1", &master.port.to_string()]);
    let instance = instance(&master.url(), &PATIENT_WAIT);
    let api = instance.api();
    replica.wait_synced(Duration::from_secs(10)).await;
    for product in ["101", "102"] {
        api.reset(product, 10, 1).await;
    }
    replica.signal("STOP");
    let waiting = while_a_sale_waits(&api, &master.url(), "101", "102").await;
    replica.signal("CONT");
    let first = waiting.sale.await.unwrap();
    let second = waiting.other;

    assert_eq!(second.0, 503, "{}", second.1);
    assert_eq!(second.1["outcome"], "unconfirmed", "{}", second.1);
    assert_eq!(
        first.0, 200,
        "the first sale, confirmed once the replica was let go: {}",
        first.1
    );
    let stats = api.stats("102").await;
    assert_eq!(
        int(&stats, "sold"),
        1,
        "the unconfirmed sale is recorded: {stats}"
    );
    assert_eq!(int(&stats, "unconfirmed"), 1, "{stats}");
}
