//! Durable by default: a standalone Redis killed under load comes back on its AOF with
//! every order it acknowledged, and `--redis-wait-replicas` answers 200 only for sales a
//! replica has.

use std::time::Duration;

use seckill_testkit::{
    Api, Control, Instance, Nginx, RedisServer, assert_survived_failover, heavy_turn, int,
};

use crate::{instance, recorded_orders, service};

/// `kill -9` of the one Redis under lua load, then a restart on the same AOF: every order
/// answered 200 is there, the stock and the orders add up, nothing is oversold, and sales
/// resume by themselves.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_redis_restarts_on_its_aof_with_every_acknowledged_order() {
    let _turn = heavy_turn().await;
    let mut cluster = service(2, &[]);
    let nginx = Nginx::start(&cluster.instances);
    let api = Api::new(&nginx.url(""));
    let initial = 100_000;
    api.reset("101", initial, 1).await;

    let control = Control::default();
    let lua = api.load("101", "lua").requests(90_000).concurrency(20);
    let load = api.spawn(lua.keeping_orders(), &control);
    let within = Duration::from_secs(20);
    api.wait_sold("101", 500, within, "sales before the kill")
        .await;
    cluster.redis.kill();
    tokio::time::sleep(Duration::from_millis(500)).await;
    cluster.redis.restart();
    // Sales resume by themselves once the instances have reconnected.
    let then = api
        .wait_sold("101", 0, within, "/stats after the restart")
        .await;
    api.wait_sold("101", then + 100, within, "sales after the restart")
        .await;
    control.stop();
    let load = load.await.unwrap();

    let stats = api.stats("101").await;
    let recorded = recorded_orders(&cluster.redis, "101").await;
    let lost = assert_survived_failover(&load, &stats, initial, &recorded);
    eprintln!("{load:?}; stats {stats}");
    assert_eq!(lost, 0, "acknowledged orders lost in the restart");
    assert!(load.count(503) > 0, "the outage was seen: {load:?}");
}

/// A master, its replica in sync, and an instance on the master whose sales wait for one
/// replica (`--redis-wait-replicas 1`, a WAIT of 3 s: a bound on a hang — a replica on a
/// busy machine missed 200 ms, and once 800 ms with a core kept busy).
async fn confirmed_by_a_replica() -> (RedisServer, RedisServer, Instance) {
    let master = RedisServer::start();
    let replica = RedisServer::start_with(&["--replicaof", "127.0.0.1", &master.port.to_string()]);
    let instance = instance(
        &master.url(),
        &[
            "--redis-wait-replicas",
            "1",
            "--redis-wait-timeout-ms",
            "3000",
            // What bounds the WAIT, and what bounds a request (the instance refuses less).
            "--redis-timeout-ms",
            "4000",
            "--request-timeout-ms",
            "60000",
        ],
    );
    replica.wait_synced(Duration::from_secs(10)).await;
    (master, replica, instance)
}

/// With `--redis-wait-replicas 1` and a replica attached, sales are answered 200; with
/// the replica gone, each sale is answered 503 `unconfirmed` (its order recorded, since
/// the master has it), and `/stats` counts them. (The WAIT timeout is 3 s, a bound on a
/// hang: a replica on a busy machine missed 200 ms, and once 800 ms with a core kept
/// busy. Each sale with no replica waits it out: 9 s.)
#[tokio::test]
async fn sales_no_replica_confirmed_are_answered_unconfirmed() {
    let (_master, mut replica, instance) = confirmed_by_a_replica().await;
    let api = instance.api();
    api.reset("101", 10, 1).await;

    for variant in ["lua", "token", "watchdog"] {
        let (status, body) = api.deduct("101", variant).await;
        assert_eq!(status, 200, "{variant} confirmed by the replica: {body}");
    }

    replica.kill();
    for variant in ["lua", "token", "watchdog"] {
        let (status, body) = api.deduct("101", variant).await;
        assert_eq!(status, 503, "{variant} with no replica: {body}");
        assert_eq!(body["outcome"], "unconfirmed", "{body}");
        assert!(
            body["order"].is_string(),
            "the answer names its order: {body}"
        );
    }
    let stats = api.stats("101").await;
    assert_eq!(int(&stats, "unconfirmed"), 3, "{stats}");
    assert_eq!(int(&stats, "sold"), 6, "the master has all six: {stats}");
    assert_eq!(int(&stats, "remaining"), 4, "{stats}");
}

/// A key whose sale was answered `503 unconfirmed` (no replica to confirm it) is not
/// answered so for ever: repeated while no replica has it, it is `unconfirmed` again with
/// the same order; repeated once a replica is back and has it, the replicas are asked
/// again and it is `200` with that order — for a whole stock's sale (lua) and a locked one
/// (watchdog). Nothing more is sold or counted. An order no longer on the master (a
/// failover lost it) is voided, and its key's repeat is served anew.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unconfirmed_keyed_sale_repeated_once_a_replica_has_it_is_answered_200() {
    let (master, mut replica, instance) = confirmed_by_a_replica().await;
    let api = instance.api();
    api.reset("102", 10, 1).await;

    replica.kill();
    let mut sold = Vec::new();
    for variant in ["lua", "watchdog", "token"] {
        let key = format!("k-{variant}");
        let (status, first, _) = api.deduct_keyed("102", variant, &key).await;
        assert_eq!(status, 503, "{variant} with no replica: {first}");
        assert_eq!(first["outcome"], "unconfirmed", "{first}");
        let (status, again, replayed) = api.deduct_keyed("102", variant, &key).await;
        assert_eq!((status, replayed), (503, true), "{variant}: {again}");
        assert_eq!(again["order"], first["order"], "{again}");
        sold.push((variant, key, first["order"].clone()));
    }

    let lost = sold.pop().expect("token's sale");
    replica.restart();
    replica.wait_synced(Duration::from_secs(20)).await;
    for (variant, key, order) in sold {
        // The master's confirmations wait for their probe to see the replica again.
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        loop {
            let (status, again, replayed) = api.deduct_keyed("102", variant, &key).await;
            assert!(replayed, "{variant}: {again}");
            assert_eq!(again["order"], order, "{variant}: the same order: {again}");
            if status == 200 {
                assert_eq!(again["outcome"], "deducted", "{again}");
                break;
            }
            assert_eq!(again["outcome"], "unconfirmed", "{variant}: {again}");
            assert!(
                std::time::Instant::now() < deadline,
                "{variant}: still unconfirmed with the replica back: {again}"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
    let stats = api.stats("102").await;
    assert_eq!(
        (
            int(&stats, "sold"),
            int(&stats, "unconfirmed"),
            int(&stats, "remaining")
        ),
        (3, 3, 7),
        "{stats}"
    );

    // An order a failover lost (here deleted on the master, the replicas confirming again):
    // never 200 for an order that is not there. Its id is voided, the key forgotten, and
    // the repeat served anew: a sale of its own, with its own order (the deletion left the
    // lost sale's unit out of the stock, so the audit would not add up: not checked here).
    let (variant, key, order) = lost;
    let orders = crate::keys("102").whole().orders.clone();
    let order = order.as_str().expect("an order id");
    let _: () = redis::AsyncCommands::hdel(&mut master.conn().await, &orders, order)
        .await
        .unwrap();
    let (status, again, replayed) = api.deduct_keyed("102", variant, &key).await;
    assert_eq!((status, replayed), (200, false), "{variant}: {again}");
    assert_ne!(again["order"], order, "a new sale: {again}");
    let void = crate::keys("102").whole().void.clone();
    let voided: bool = redis::AsyncCommands::hexists(&mut master.conn().await, &void, order)
        .await
        .unwrap();
    assert!(
        voided,
        "the lost order's id is voided: it can never run now"
    );
}
