//! `--suite capacity`: a capacity model from measured parts.
//!
//! The suite starts its own parts on loopback ([`parts`]) and measures, with `/proc`
//! ([`crate::parts_cpu`]), the CPU one unit sold costs each of them — the load generator, Nginx, the
//! instances, Redis and PostgreSQL — for `lua`, `watchdog` and `segmented`, and how the
//! units/s move:
//!
//! 1. **Instances, 1 → 2.** One durable redis-server, PostgreSQL for the orders (when it
//!    can run here), two instances, and two Nginx: one in front of the first instance,
//!    one in front of both. Each round, each variant through the first Nginx, then the
//!    second (the order flips every round); and `lua` once more with its orders kept in
//!    Redis, for what the orders' consumer costs.
//! 2. **Masters, 1 → 3.** A Redis Cluster of one master and one of three (no replicas),
//!    two instances and an Nginx on each: `segmented` (its shards spread over the
//!    masters), `lua` over [`PRODUCTS`] products, and `lua` on one hot product (one slot,
//!    so one master whatever the count), each on one Cluster then the other.
//!
//! Every ratio is taken within a round and the median kept. The [`model`] predicts each
//! setup's units/s from the costs measured on the smaller one; [`plan`] turns it around
//! for the chapter's sales of 10k, 100k and 1M buyers a second.

use std::path::Path;
use std::time::Duration;

use anyhow::{Context, bail};
use seckill::variants::Variant;

mod analysis;
pub mod model;
mod parts;
pub mod plan;
mod render;

pub use analysis::Figures;
pub use render::render;

use self::parts::{OnCluster, TwoInstances, blocking};
use crate::admin::Service;
use crate::args::BenchArgs;
use crate::measure::run_one;
use crate::parts_cpu::{Pids, Reading, Spent};
use crate::ratio::Ratio;
use crate::redis_usage::Masters;
use crate::row::Row;
use crate::scenario::{Key, Scenario, knobs, variant};

pub const ONE_INSTANCE: &str = "1 instance";
pub const TWO_INSTANCES: &str = "2 instances";
/// `lua` through one instance with its orders kept in Redis: against [`ONE_INSTANCE`],
/// what streaming the orders into PostgreSQL costs each part.
pub const NO_DATABASE: &str = "1 instance, orders in Redis only";
pub const ONE_MASTER: &str = "1 master";
pub const THREE_MASTERS: &str = "3 masters";

/// Products the many-products rows spread their load over (at random): enough that every
/// master of three gets about a third.
pub const PRODUCTS: u32 = 64;

/// The whole suite, starts and stops included, is stopped after this long.
const WITHIN: Duration = Duration::from_secs(30 * 60);

/// One load measured: its row (with what each part spent during the load), and what each
/// part spent from the reset before it until its orders were in PostgreSQL.
pub struct Measured {
    pub row: Row,
    pub whole: Spent,
}

/// What the suite produced: a row per load, the scaling ratios, and the figures.
pub struct Capacity {
    pub rows: Vec<Row>,
    pub ratios: Vec<Ratio>,
    pub figures: Figures,
}

/// Runs the suite: starts the parts, measures, stops them (also on Ctrl-C, SIGTERM or
/// SIGHUP, or after [`WITHIN`]), and analyses.
pub async fn run(args: &BenchArgs) -> anyhow::Result<Capacity> {
    let bin = parts::seckill_binary(args.seckill_bin.as_ref())?;
    let http = reqwest::Client::builder()
        .pool_max_idle_per_host(usize::try_from(args.concurrency).unwrap_or(usize::MAX))
        .timeout(Duration::from_secs(120))
        .build()?;
    let measured = tokio::select! {
        measured = tokio::time::timeout(WITHIN, both_phases(args, &http, &bin)) => {
            measured.with_context(|| format!("the capacity suite took more than {WITHIN:?}"))??
        }
        signal = interrupted() => bail!("{signal}: every part it started is stopped"),
    };
    let figures = analysis::analyse(args, &measured);
    Ok(Capacity {
        rows: measured.into_iter().map(|m| m.row).collect(),
        ratios: figures.ratios(),
        figures,
    })
}

/// Ctrl-C, or the SIGTERM or SIGHUP that `timeout`, `kill` or a closed terminal sends:
/// whichever comes first. The suite then drops what it started, which stops it, where
/// dying of the signal would leave its servers running.
async fn interrupted() -> &'static str {
    use tokio::signal::unix::{SignalKind, signal};
    let (Ok(mut term), Ok(mut hup)) = (
        signal(SignalKind::terminate()),
        signal(SignalKind::hangup()),
    ) else {
        let _ = tokio::signal::ctrl_c().await;
        return "interrupted";
    };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => "interrupted",
        _ = term.recv() => "terminated (SIGTERM)",
        _ = hup.recv() => "hung up (SIGHUP)",
    }
}

async fn both_phases(
    args: &BenchArgs,
    http: &reqwest::Client,
    bin: &Path,
) -> anyhow::Result<Vec<Measured>> {
    let mut measured = instances_phase(args, http, bin).await?;
    measured.extend(masters_phase(args, http, bin).await?);
    Ok(measured)
}

/// The rows one round of a phase runs: (variant, shards, products), each on both setups.
fn rows_of(args: &BenchArgs, phase: &[&str]) -> Vec<(Variant, u32, u32)> {
    phase
        .iter()
        .map(|&row| match row {
            "segmented" => (variant("segmented"), args.shards, 1),
            "products" => (variant("lua"), 1, PRODUCTS),
            name => (variant(name), 1, 1),
        })
        .collect()
}

/// Phase 1: one Redis, one instance against two; PostgreSQL when it can run here.
async fn instances_phase(
    args: &BenchArgs,
    http: &reqwest::Client,
    bin: &Path,
) -> anyhow::Result<Vec<Measured>> {
    let postgres = match parts::postgres_missing() {
        Some(why) => {
            eprintln!("capacity: no PostgreSQL ({why}): the postgres column is left out");
            None
        }
        None => match blocking("starting PostgreSQL", parts::start_postgres).await {
            Ok(postgres) => Some(postgres),
            Err(err) => {
                eprintln!("capacity: {err:#}: the postgres column is left out");
                None
            }
        },
    };
    let bin = bin.to_owned();
    let setup = blocking("starting Redis, two instances and Nginx", move || {
        TwoInstances::start(&bin, postgres)
    })
    .await?;
    let db = setup.has_postgres();
    let mut measured = Vec::new();
    for round in 0..args.rounds {
        for row in rows_of(args, &["lua", "watchdog", "segmented"]) {
            for (name, instances) in in_turn(round, [(ONE_INSTANCE, 1), (TWO_INSTANCES, 2)]) {
                let target = Target {
                    url: setup.url(instances),
                    redis: setup.redis(),
                    pids: &setup.pids,
                };
                let scenario = scenario(args, row, name, round, db);
                measured.push(measure(args, http, &target, scenario).await?);
            }
        }
        if db {
            let target = Target {
                url: setup.url(1),
                redis: setup.redis(),
                pids: &setup.pids,
            };
            let lua = (variant("lua"), 1, 1);
            let scenario = scenario(args, lua, NO_DATABASE, round, false);
            measured.push(measure(args, http, &target, scenario).await?);
        }
    }
    parts::stop("stopping phase 1", setup).await?;
    Ok(measured)
}

/// Phase 2: two instances on a Cluster of one master against one of three.
async fn masters_phase(
    args: &BenchArgs,
    http: &reqwest::Client,
    bin: &Path,
) -> anyhow::Result<Vec<Measured>> {
    let (one_bin, three_bin) = (bin.to_owned(), bin.to_owned());
    let one = blocking("starting a one-master Cluster", move || {
        OnCluster::start(&one_bin, 1)
    })
    .await?;
    let three = blocking("starting a three-master Cluster", move || {
        OnCluster::start(&three_bin, 3)
    })
    .await?;
    let mut measured = Vec::new();
    for round in 0..args.rounds {
        for row in rows_of(args, &["segmented", "products", "lua"]) {
            for (name, cluster) in in_turn(round, [(ONE_MASTER, &one), (THREE_MASTERS, &three)]) {
                let target = Target {
                    url: cluster.url(),
                    redis: cluster.redis(),
                    pids: &cluster.pids,
                };
                let scenario = scenario(args, row, name, round, false);
                measured.push(measure(args, http, &target, scenario).await?);
            }
        }
    }
    parts::stop("stopping phase 2", (one, three)).await?;
    Ok(measured)
}

/// The two setups in order in even rounds, swapped in odd ones: a drift of the machine
/// over a round then favours neither.
fn in_turn<T>(round: u64, mut setups: [T; 2]) -> [T; 2] {
    if round % 2 == 1 {
        setups.reverse();
    }
    setups
}

/// The scenario of `row` on `setup` in `round` (orders into PostgreSQL when `db`): every
/// request selling a unit, `--work-ms` in the lock. `lua`'s requests are cheap, so it
/// sends ten times `--requests` (as the ceiling suite does), `segmented` twice: long
/// enough for `/proc`'s 10 ms ticks.
fn scenario(
    args: &BenchArgs,
    (variant, shards, products): (Variant, u32, u32),
    setup: &'static str,
    round: u64,
    db: bool,
) -> Scenario {
    let key = Key::Capacity {
        variant,
        shards,
        products,
        setup,
        round,
        db,
    };
    let requests = match variant.name() {
        "lua" => args.requests * 10,
        "segmented" => args.requests * 2,
        _ => args.requests,
    };
    let knobs = knobs(variant, args.work_ms, 10_000, "");
    Scenario {
        orders: setup != NO_DATABASE,
        ..Scenario::selling(key, variant, knobs, requests, args.concurrency)
            .on_shards(shards)
            .over_products(products)
    }
}

/// Where a row's load goes: an Nginx, the store behind it, the parts' processes.
struct Target<'a> {
    url: String,
    redis: seckill::config::RedisArgs,
    pids: &'a Pids,
}

/// One row on `target`, with the parts' CPU read before and after it.
async fn measure(
    args: &BenchArgs,
    http: &reqwest::Client,
    target: &Target<'_>,
    scenario: Scenario,
) -> anyhow::Result<Measured> {
    let args = BenchArgs {
        url: target.url.clone(),
        admin_url: None,
        redis: target.redis.clone(),
        ..args.clone()
    };
    let service = Service {
        args: &args,
        http,
        parts: Some(target.pids),
    };
    let masters = Masters::connect(&args.redis).await;
    let mut info = Some(masters.with_context(|| format!("reading {}", args.redis.redis_url))?);
    let before = Reading::now(target.pids)?;
    let row = run_one(&service, &mut info, scenario).await?;
    let whole = Reading::now(target.pids)?.since(&before);
    Ok(Measured { row, whole })
}
