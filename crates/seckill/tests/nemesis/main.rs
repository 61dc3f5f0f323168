//! The nemesis: every variant at once, buyers with keys and resends, orders of record on,
//! while Redis is paused and killed, an instance is killed or paused and PostgreSQL stops;
//! then a checker that trusts only what the buyers were answered and what it reads back
//! from Redis and PostgreSQL.
//!
//! - [`world`] — the servers: the stock on one durable Redis (beside three Redlock servers
//!   and a one-server ZooKeeper) or on a Redis Cluster of three durable masters,
//!   PostgreSQL, two instances and Nginx; and the sales, one product per variant.
//! - [`faults`] — the fault schedule, drawn from a seed.
//! - [`buyers`] — buyers clicking through Nginx, each click under its own
//!   `Idempotency-Key` (most of them; all on a Cluster) and sent again with that key while
//!   the answer is a 503, 502, 504, 423 or none; every send's answer recorded.
//! - [`check`] — what must hold afterwards; [`again`] — its rule on keys that sold,
//!   asked again after the run.
//!
//! A failure prints its seed; `NEMESIS_SEED=<seed> cargo test -p seckill --test nemesis
//! -- --nocapture` draws the same fault schedule again (the buyers' timing, as any load's,
//! differs from run to run). `NEMESIS_SECONDS` sets how long the load runs (default 40 on
//! one Redis, 45 on a Cluster, 30 on a Cluster failing over).

mod again;
mod buyers;
mod check;
mod faults;
mod world;

use std::time::Duration;

use faults::Schedule;
use world::{Topology, World};

/// The service's binary, as cargo built it for these tests.
const SECKILL: &str = env!("CARGO_BIN_EXE_seckill");

/// Every variant at once under the seed's faults: every 200 is an order in Redis and once
/// in PostgreSQL, no key answers two orders, no buyer has more than the limit, and every
/// product's sold + remaining is its initial stock (naive aside: it oversells by design).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_sale_twice_whatever_fails() {
    nemesis(Topology::OneRedis, 40).await;
}

/// The same on a Redis Cluster of three masters, each killed and restarted on its AOF or
/// paused in turn: lua, watchdog, segmented on four shards and on one, a cart across the
/// three masters.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_sale_twice_on_a_cluster_whatever_fails() {
    nemesis(Topology::Cluster { replicas: 0 }, 45).await;
}

/// The same on a Cluster with a replica per master, a sale answered once its replica has
/// it: a killed master's replica takes over, and the old master comes back as a replica.
/// A short run here (30 s of load: failovers take seconds each); `scripts/nemesis.sh
/// --failover` runs it longer and again and again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_sale_twice_on_a_failing_over_cluster() {
    nemesis(Topology::Cluster { replicas: 1 }, 30).await;
}

/// The seed's faults played on `topology` while the buyers click, for `NEMESIS_SECONDS`
/// (or `seconds`); then the checker.
async fn nemesis(topology: Topology, seconds: u64) {
    let _turn = seckill_testkit::heavy_turn().await;
    let seed = seed();
    let seconds = std::env::var("NEMESIS_SECONDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(seconds);
    let load = Duration::from_secs(seconds);
    eprintln!(
        "nemesis on {topology:?}: seed {seed}, {seconds} s of load (NEMESIS_SEED={seed} draws \
         it again)"
    );
    let schedule = Schedule::draw(seed, load, topology);
    eprintln!("{schedule}");

    // Each phase's time is printed, never asserted: where a slow run spent it.
    let phase = std::time::Instant::now();
    let mut world = World::start(topology);
    world.reset().await;
    eprintln!("started in {:.1} s", phase.elapsed().as_secs_f64());
    let buyers = buyers::start(&world, seed, load);
    schedule.play(&mut world).await;
    let phase = std::time::Instant::now();
    let history = buyers.finish().await;
    eprintln!(
        "the last click ended {:.1} s after the load",
        phase.elapsed().as_secs_f64()
    );
    eprintln!("{}", history.summary());

    let phase = std::time::Instant::now();
    world.settle().await;
    eprintln!("settled in {:.1} s", phase.elapsed().as_secs_f64());
    let phase = std::time::Instant::now();
    let found = check::check(&world, &history).await;
    eprintln!("checked in {:.1} s", phase.elapsed().as_secs_f64());
    eprintln!("{}", found.summary());
    assert!(
        found.violations.is_empty(),
        "nemesis on {topology:?}, seed {seed}: {} violation(s) (NEMESIS_SEED={seed} draws the \
         same faults):\n{}",
        found.violations.len(),
        found
            .violations
            .iter()
            .take(30)
            .map(|v| format!("- {v}"))
            .collect::<Vec<_>>()
            .join("\n")
    );
}

/// `NEMESIS_SEED`, or a new one.
fn seed() -> u64 {
    std::env::var("NEMESIS_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| fastrand::u64(1..1_000_000))
}
