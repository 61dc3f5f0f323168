//! The stock store as a master with two replicas watched by three real sentinels: the
//! master killed under lua load with `--redis-wait-replicas 1`; the instances follow the
//! promoted replica by themselves, and every order answered 200 survives.

use std::time::{Duration, Instant};

use seckill_testkit::sentinel::MASTER;
use seckill_testkit::{
    Api, Control, Instance, Nginx, Sentinels, assert_survived_failover, heavy_turn, int, redis_cli,
};

use crate::{instance, recorded_orders};

/// The master killed under lua load: the sentinels promote a replica, the instances follow
/// it by themselves, and with `--redis-wait-replicas 1` no order answered 200 is lost.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_sentinel_master_loses_no_acknowledged_order() {
    let _turn = heavy_turn().await;
    let mut redis = Sentinels::start(2);
    let args = [
        "--redis-mode",
        "sentinel",
        "--redis-sentinel-master",
        MASTER,
        "--redis-wait-replicas",
        "1",
    ];
    let instances: Vec<Instance> = (0..2).map(|_| instance(&redis.urls(), &args)).collect();
    let nginx = Nginx::start(&instances);
    let api = Api::new(&nginx.url(""));
    let initial = 100_000;
    api.reset("101", initial, 1).await;

    let control = Control::default();
    let lua = api.load("101", "lua").requests(90_000).concurrency(20);
    let load = api.spawn(lua.keeping_orders(), &control);
    let within = Duration::from_secs(60);
    api.wait_sold("101", 500, within, "sales before the kill")
        .await;
    let old = redis.master.port;
    redis.master.kill();
    let killed_at = Instant::now();
    let promoted =
        tokio::task::block_in_place(|| redis.wait_for_failover(old, Duration::from_secs(30)));
    eprintln!(
        "sentinels promoted :{promoted} after {:?}",
        killed_at.elapsed()
    );

    // The instances find the new master by themselves: sales go on.
    let then = api
        .wait_sold("101", 0, within, "/stats after the failover")
        .await;
    api.wait_sold("101", then + 100, within, "sales on the new master")
        .await;
    let resumed_after = killed_at.elapsed();
    control.stop();
    let load = load.await.unwrap();

    let stats = api.stats("101").await;
    let mut conn = redis::Client::open(format!("redis://127.0.0.1:{promoted}"))
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    let recorded = recorded_orders(&mut conn, "101").await;
    let lost = assert_survived_failover(&load, &stats, initial, &recorded);
    eprintln!("{load:?}; resumed after {resumed_after:?}; lost {lost}; {stats}");
    assert_eq!(lost, 0, "every order answered 200 is on the new master");
}

/// The master demoted by hand under a running instance (`REPLICAOF`, which closes no
/// client's connection) and the sentinels pointed at the new one: the lua script that runs
/// on the demoted node is refused `READONLY` inside its line, which the connection never
/// sees as an error; the instance forgets that master all the same, and its next sale goes
/// to the one the sentinels name.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_master_demoted_under_lua_sales_is_left_for_the_one_the_sentinels_name() {
    let redis = Sentinels::start(1);
    let args = [
        "--redis-mode",
        "sentinel",
        "--redis-sentinel-master",
        MASTER,
    ];
    let seckill = instance(&redis.urls(), &args);
    let api = seckill.api();
    api.reset("101", 100, 1).await;
    let (status, body) = api.deduct("101", "lua").await;
    assert_eq!(status, 200, "a sale on the first master: {body}");

    let (old, new) = (redis.master.port, redis.replicas[0].port);
    let synced = || {
        let info = redis_cli(new, &["info", "replication"]);
        let offset = |info: &str, field: &str| {
            info.lines()
                .find_map(|l| l.strip_prefix(field))
                .map(|v| v.trim().to_owned())
        };
        let master = redis_cli(old, &["info", "replication"]);
        offset(&info, "slave_repl_offset:") == offset(&master, "master_repl_offset:")
    };
    let deadline = Instant::now() + Duration::from_secs(30);
    while !synced() {
        assert!(Instant::now() < deadline, "the replica did not catch up");
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(redis_cli(new, &["replicaof", "no", "one"]).starts_with("OK"));
    tokio::task::block_in_place(|| redis.monitor(new));
    let port = new.to_string();
    assert!(redis_cli(old, &["replicaof", "127.0.0.1", &port]).starts_with("OK"));
    let deadline = Instant::now() + Duration::from_secs(30);
    while !redis_cli(old, &["info", "replication"]).contains("master_link_status:up") {
        assert!(
            Instant::now() < deadline,
            "the old master did not follow the new"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }

    // The first sale may still go to the demoted node (503, refused READONLY: nothing
    // sold); the next goes to the new master.
    let (first, body) = api.deduct("101", "lua").await;
    assert!([200, 503].contains(&first), "{first}: {body}");
    let (status, body) = api.deduct("101", "lua").await;
    assert_eq!(status, 200, "the sale after a READONLY line: {body}");
    // The old master is a replica now: a sale can only have been made on the new one.
    let sold_since = if first == 200 { 2 } else { 1 };
    assert_eq!(int(&body, "remaining"), 99 - sold_since, "{body}");
}
