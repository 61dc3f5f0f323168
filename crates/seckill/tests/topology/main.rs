//! Tests that start a Redis topology: a Redis Cluster of three masters and three replicas,
//! a master with replicas watched by sentinels, the failover lesson's lock stores, and a
//! ZooKeeper ensemble. Each takes its turn ([`seckill_testkit::heavy_turn`]): they kill
//! masters and leaders under load and time failovers.

mod failing_over;
mod failover_lesson;
mod redis_cluster;
mod sentinel;
mod zookeeper;

#[path = "../shared/variants.rs"]
mod variants;

use std::collections::BTreeMap;

use redis::aio::ConnectionLike;
use seckill::keys::{ProductId, ProductKeys};
use seckill_testkit::Instance;

/// The service's binary, as cargo built it for these tests.
const SECKILL: &str = env!("CARGO_BIN_EXE_seckill");

/// One instance on the stock store at `redis_url`.
fn instance(redis_url: &str, args: &[&str]) -> Instance {
    Instance::start(SECKILL, redis_url, args)
}

/// A product's keys, as the service builds them.
fn keys(product: &str) -> ProductKeys {
    ProductKeys::new(&ProductId::parse(product).expect("a valid product id"))
}

/// Every order recorded for `product` in the store behind `conn`, over all its shards.
async fn recorded_orders(
    conn: &mut (impl ConnectionLike + Send),
    product: &str,
) -> BTreeMap<String, String> {
    let product = ProductId::parse(product).expect("a valid product id");
    seckill::product::recorded_orders(conn, &product)
        .await
        .expect("the orders, read from Redis")
}
