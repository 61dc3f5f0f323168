//! A partial failure stays partial: a replica that stops answering (SIGSTOP: a pause, a
//! fork for a full sync, a network hiccup) under `--redis-wait-replicas 1` load slows
//! nothing but the confirmations it owes, and those fail fast.
//!
//! On one Redis every product's sales are confirmed by the same replica, so product 102
//! here is answered `503 unconfirmed` at once like 101, not queued behind 101's `WAIT`s;
//! `topology redis_cluster` has a product on a master whose replica is fine, sold with 200s.

use std::time::Duration;

use seckill_testkit::api::deduct_path;
use seckill_testkit::partial::{Phase, until_confirmed};
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

/// With the replica frozen, `/readyz`, `/stats` and product 102 are answered as with it
/// healthy and 101 is answered `503 unconfirmed`, each within the `WAIT` timeout, at least
/// half as many per second ([`Phase::assert_partial`]); every one of those sales is on the
/// master, recorded and audited; after SIGCONT the 200s come back by themselves.
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
    let api = instance.api();
    replica.wait_synced(Duration::from_secs(10)).await;
    api.reset("101", STOCK, 1).await;
    api.reset("102", STOCK, 1).await;

    let healthy = phase(&api).await;
    let before = api.stats("101").await;
    replica.signal("STOP");
    let stalled = phase(&api).await;
    let after = api.stats("101").await;
    replica.signal("CONT");
    let back = until_confirmed(&api, "101", Duration::from_secs(5)).await;
    eprintln!("confirmed sales again {back:?} after SIGCONT");

    assert!(
        healthy.confirmed.count(200) * 2 > healthy.confirmed.answered(),
        "with the replica healthy, sales are confirmed: {:?}",
        healthy.confirmed.statuses
    );
    stalled.assert_partial(&healthy, WAIT_TIMEOUT);
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
}

/// With one confirmation connection (`--confirm-connections 1`) and the replica frozen, a
/// sale that arrives while another's `WAIT` holds the connection is answered `503
/// unconfirmed` at once, before the first one's `WAIT` is over: an exhausted pool says
/// so, it does not queue.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sale_finding_every_confirmation_connection_in_use_is_answered_at_once() {
    let master = RedisServer::start();
    let replica = RedisServer::start_with(&["--replicaof", "127.0.0.1", &master.port.to_string()]);
    let instance = instance(
        &master.url(),
        &[
            "--redis-wait-replicas",
            "1",
            // Long enough that the second sale surely arrives during the first's WAIT.
            "--redis-wait-timeout-ms",
            "800",
            "--confirm-connections",
            "1",
        ],
    );
    let api = instance.api();
    replica.wait_synced(Duration::from_secs(10)).await;
    for product in ["101", "102"] {
        api.reset(product, 10, 1).await;
    }
    replica.signal("STOP");
    let (first_api, second_api) = (api.clone(), api.clone());
    let first = tokio::spawn(async move {
        let answer = first_api.deduct("101", "lua?batch=off").await;
        (answer, tokio::time::Instant::now())
    });
    tokio::time::sleep(Duration::from_millis(200)).await;
    let second = second_api.deduct("102", "lua?batch=off").await;
    let second_done = tokio::time::Instant::now();
    let (first, first_done) = first.await.unwrap();
    replica.signal("CONT");

    assert_eq!(first.0, 503, "{}", first.1);
    assert_eq!(first.1["outcome"], "unconfirmed", "{}", first.1);
    assert_eq!(second.0, 503, "{}", second.1);
    assert_eq!(second.1["outcome"], "unconfirmed", "{}", second.1);
    assert!(
        second_done < first_done,
        "the second sale was answered before the first one's WAIT ended, not after it"
    );
    let stats = api.stats("102").await;
    assert_eq!(
        int(&stats, "sold"),
        1,
        "the unconfirmed sale is recorded: {stats}"
    );
    assert_eq!(int(&stats, "unconfirmed"), 1, "{stats}");
}
