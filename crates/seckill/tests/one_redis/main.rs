//! Tests that start one Redis (and the instances, Nginx, Redlock servers they need): the
//! HTTP contract, the progression, its failure modes, fencing, security, resilience and
//! durability, the bench through Nginx, and the scripts the watchdog fuses its steps into.
//!
//! Every test starts its own servers on loopback ports of its own; heavy ones take their
//! turn ([`seckill_testkit::heavy_turn`]), so two never measure each other on two cores.

mod admission;
mod buyers;
mod check;
mod close;
mod cluster_script;
mod database;
mod deduct_script;
mod durability;
mod failure_modes;
mod fencing;
mod hostile_input;
mod http;
mod idempotency;
mod lost_answers;
mod multi;
mod nginx;
mod optimistic;
mod orders;
mod partial_failure;
mod payment;
mod progression;
mod redlock;
mod resilience;
mod scripts;
mod security;
mod trace;

#[path = "../shared/variants.rs"]
mod variants;

use std::collections::BTreeMap;

use seckill::keys::{ProductId, ProductKeys};
use seckill_testkit::{Api, Instance, Load, RedisServer, Service};

/// The service's binary, as cargo built it for these tests.
const SECKILL: &str = env!("CARGO_BIN_EXE_seckill");

/// One Redis and `instances` instances on it.
fn service(instances: usize, args: &[&str]) -> Service {
    Service::start(SECKILL, instances, args)
}

/// One instance on `redis_url`.
fn instance(redis_url: &str, args: &[&str]) -> Instance {
    Instance::start(SECKILL, redis_url, args)
}

/// A product's keys, as the service builds them.
fn keys(product: &str) -> ProductKeys {
    ProductKeys::new(&ProductId::parse(product).expect("a valid product id"))
}

/// Deductions of `product` spread over every instance in turn, their order ids kept; add
/// requests and concurrency, then run it with any instance's [`Api::run`].
fn spread(service: &Service, product: &str, variant_and_knobs: &str) -> Load {
    Api::load_over(&service.apis(), product, variant_and_knobs).keeping_orders()
}

/// Every order recorded in `redis` for `product`, over all its shards.
async fn recorded_orders(redis: &RedisServer, product: &str) -> BTreeMap<String, String> {
    let product = ProductId::parse(product).expect("a valid product id");
    seckill::product::recorded_orders(&mut redis.conn().await, &product)
        .await
        .expect("the orders, read from Redis")
}

/// Script calls Redis has run so far (`EVAL` and `EVALSHA`), from `INFO commandstats`.
pub(crate) async fn script_calls(redis: &RedisServer) -> u64 {
    let info: String = redis::cmd("INFO")
        .arg("commandstats")
        .query_async(&mut redis.conn().await)
        .await
        .unwrap();
    info.lines()
        .filter(|l| l.starts_with("cmdstat_eval:") || l.starts_with("cmdstat_evalsha:"))
        .filter_map(|l| {
            l.split("calls=")
                .nth(1)?
                .split(',')
                .next()?
                .parse::<u64>()
                .ok()
        })
        .sum()
}

/// Waits until a holder is inside a critical section on `redis` (a shard's `inside` set,
/// which the audit keeps, is not empty), and its instance has the answer that let it in: a
/// fault aimed at a request's work lands in it. The bound says a hang.
///
/// The answer: Redis writes the replies of one turn of its event loop together, after the
/// turn, the latest first, so the look that saw the holder inside may be answered before
/// the script that let it in; a Redis frozen between the two writes (SIGSTOP, on a busy
/// machine) would cut the holder's entry off instead of its work. One more round trip
/// after the look is answered in a later turn, after every reply of the earlier one was
/// written.
pub(crate) async fn someone_inside(redis: &RedisServer) {
    let mut conn = redis.conn().await;
    let until = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        let inside: Vec<String> = redis::cmd("KEYS")
            .arg("seckill:*:inside")
            .query_async(&mut conn)
            .await
            .unwrap();
        if !inside.is_empty() {
            let _: () = redis::cmd("PING").query_async(&mut conn).await.unwrap();
            return;
        }
        assert!(
            std::time::Instant::now() < until,
            "nobody got inside a critical section"
        );
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    }
}
