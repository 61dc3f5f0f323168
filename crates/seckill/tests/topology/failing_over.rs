//! Every answer true when a master fails over: on a real Cluster of three masters with a
//! replica each, a `200` only from a sale a replica has, and a "nothing sold" only when
//! nothing can have sold. Each fault is aimed by an event read back from Redis (a holder
//! inside its critical section, a sale blocked in `WAIT`), never by a sleep.

use std::time::{Duration, Instant};

use seckill_testkit::{Api, Instance, RedisCluster, heavy_turn};

use crate::{instance, keys};

/// One instance in cluster mode on `redis`, with `extra` flags.
fn on_cluster(redis: &RedisCluster, extra: &[&str]) -> Instance {
    let mut args = vec!["--redis-mode", "cluster"];
    args.extend_from_slice(extra);
    instance(&redis.urls(), &args)
}

/// The port of the master serving `key`'s slot now.
fn master_of_key(redis: &RedisCluster, key: &str) -> u16 {
    let live = redis
        .nodes
        .iter()
        .find(|n| n.is_running())
        .expect("a live node");
    let slot: u16 = redis
        .cli(live.port, &["cluster", "keyslot", key])
        .trim()
        .parse()
        .expect("a slot");
    redis.master_port_of_slot(slot).expect("a master")
}

/// The master of a whole product's slot.
fn master_of(redis: &RedisCluster, product: &str) -> u16 {
    master_of_key(redis, &keys(product).whole().stock)
}

/// A product from 102 on whose slot another master serves than `product`'s.
fn on_another_master(redis: &RedisCluster, product: &str) -> String {
    let master = master_of(redis, product);
    (102..300)
        .map(|p| p.to_string())
        .find(|p| master_of(redis, p) != master)
        .expect("a product on another master")
}

/// A master promoted by a failover has none of the scripts (Redis does not replicate its
/// script cache): the first sale there loads them on that master alone, so it sells while
/// another master is frozen. Before, redis-rs loaded a script on every master it had a
/// connection to at once (`SCRIPT LOAD` fanned out), which waited out the frozen one and
/// failed: the sale was answered as a lost answer, and nothing sold on the promoted master
/// until every master answered again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_promoted_master_sells_while_another_master_is_frozen() {
    let _turn = heavy_turn().await;
    let mut redis = RedisCluster::start(3, 1);
    // Each command bounded well inside the Cluster's node timeout (2 s): the frozen master
    // is not failed over while the sales below are answered.
    let seckill = on_cluster(
        &redis,
        &[
            "--redis-timeout-ms",
            "400",
            "--redis-wait-timeout-ms",
            "200",
        ],
    );
    let api = seckill.api();
    let other = on_another_master(&redis, "101");
    for product in ["101", other.as_str()] {
        api.reset(product, 10, 1).await;
        let (status, body) = api.deduct(product, "lua").await;
        assert_eq!(status, 200, "{body}");
    }
    let master = master_of(&redis, "101");
    redis.kill(master);
    tokio::task::block_in_place(|| {
        redis.wait_for_failover(Duration::from_secs(30));
        redis.restart(master);
        redis.wait_replica_synced(master, Duration::from_secs(30));
    });
    // The instance has found the promoted master.
    until_status(&api, "/stats?product=101", 200).await;
    let promoted = master_of(&redis, "101");
    let scripts = redis.cli(promoted, &["script", "exists", &lua_sha()]);
    assert!(
        scripts.trim().ends_with('0'),
        "the promoted master lacks the script: {scripts}"
    );
    // Another master freezes; 101's answers, and has none of the scripts.
    let frozen = master_of(&redis, &other);
    redis.signal(frozen, "STOP");
    let lua = api.deduct("101", "lua").await;
    let watchdog = api.deduct("101", "watchdog").await;
    redis.signal(frozen, "CONT");
    assert_eq!(lua.0, 200, "lua on the promoted master: {}", lua.1);
    assert_eq!(
        watchdog.0, 200,
        "watchdog on the promoted master: {}",
        watchdog.1
    );
}

/// The SHA1 of `lua/deduct.lua` as the service loads it (its library in front of it).
fn lua_sha() -> String {
    let body = [
        include_str!("../../lua/lib/critical.lua"),
        include_str!("../../lua/deduct.lua"),
    ]
    .concat();
    redis::Script::new(&body).get_hash().to_owned()
}

/// Until `path` answers `status` (30 s at most).
async fn until_status(api: &Api, path: &str, status: u16) {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let (got, body) = api.get(path).await;
        if got == status {
            return;
        }
        assert!(Instant::now() < deadline, "{path}: {got} {body}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
