//! The stock store as a master with two replicas watched by three real sentinels: the
//! master killed under lua load with `--redis-wait-replicas 1`; the instances follow the
//! promoted replica by themselves, and every order answered 200 survives.

use std::time::{Duration, Instant};

use seckill_testkit::sentinel::MASTER;
use seckill_testkit::{
    Api, Control, Instance, Nginx, Sentinels, assert_survived_failover, heavy_turn,
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
