//! The bench's suites: which scenarios each runs. Their ratios are in [`crate::ratios`].

use seckill::variants::Variant;

use crate::args::{BenchArgs, Suite};
use crate::scenario::{Key, Scenario, WAITERS, knobs, progression, variant};

/// Past 16 the curve bends on this 2-core machine: 32 and 64 show where.
pub const SHARD_CURVE: [u32; 7] = [1, 2, 4, 8, 16, 32, 64];

/// The contention suite's steps: products the same load is spread over, at random. Past 64
/// because 100 connections with 2 ms of work still conflict often over 64 products.
pub const PRODUCT_CURVE: [u32; 11] = [1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024];

/// The variants the contention suite compares: the optimistic lock, the pessimistic one,
/// and the lock-free script as the ceiling — and, when the instances have PostgreSQL
/// (`--pg-url`), the optimistic rule on a database row, `pg_version`.
pub const CONTENDERS: [&str; 3] = ["optimistic", "watchdog", "lua"];

fn contenders(args: &BenchArgs) -> Vec<&'static str> {
    let mut names = CONTENDERS.to_vec();
    if args.pg_url.is_some() {
        names.push("pg_version");
    }
    names
}

/// The scenarios of the suite the flags ask for.
pub fn scenarios(args: &BenchArgs) -> Vec<Scenario> {
    match args.suite {
        Suite::Progression => progression(args),
        Suite::Ceiling => ceiling(args),
        Suite::Waiting => waiting(args),
        Suite::Shards => shards(args),
        Suite::Latency => latency(args),
        Suite::Memory => memory(),
        Suite::Handoff => handoff(args),
        Suite::Fair => fair(args),
        Suite::Shares => shares(args),
        Suite::Orders => orders(args),
        Suite::Contention => contention(args),
        Suite::Stores => stores(args),
        Suite::Seed003 => seed003(args),
        // Its rows are loads side by side, run by `partial.rs`.
        Suite::Partial => Vec::new(),
        // Buyers on their own schedules, run by `admission.rs`.
        Suite::Admission => Vec::new(),
        // Its own parts, started and measured by `capacity/`.
        Suite::Capacity => Vec::new(),
        // (`orders` is not in it: it needs the database.)
        Suite::Performance => [
            ceiling(args),
            waiting(args),
            shards(args),
            latency(args),
            memory(),
            handoff(args),
            fair(args),
            shares(args),
            contention(args),
        ]
        .concat(),
    }
}

/// Ten times `--requests` each round: cheap requests, and throughput wants a long run.
fn ceiling(args: &BenchArgs) -> Vec<Scenario> {
    let requests = args.requests * 10;
    let lua = |batched: bool| {
        let knobs = if batched { "" } else { "batch=off" };
        let key = Key::Ceiling { batched };
        Scenario::selling(
            key,
            variant("lua"),
            knobs.into(),
            requests,
            args.concurrency,
        )
    };
    (0..args.rounds)
        .flat_map(|_| {
            [
                Scenario::baseline("/healthz", requests, args.concurrency),
                Scenario::baseline("/readyz", requests, args.concurrency),
                lua(true),
                lua(false),
            ]
        })
        .collect()
}

fn waiting(args: &BenchArgs) -> Vec<Scenario> {
    let mut rows = Vec::new();
    for variant in [variant("watchdog"), variant("token")] {
        let knobs = knobs(variant, args.work_ms, 10_000, "");
        for (clients, requests) in [(1, 300), (WAITERS, 1_000)] {
            let key = Key::Clients { variant, clients };
            rows.push(Scenario::selling(
                key,
                variant,
                knobs.clone(),
                requests,
                clients,
            ));
        }
    }
    rows
}

fn shards(args: &BenchArgs) -> Vec<Scenario> {
    let (watchdog, segmented) = (variant("watchdog"), variant("segmented"));
    let selling = |key, variant| {
        let knobs = knobs(variant, args.work_ms, 10_000, "");
        Scenario::selling(key, variant, knobs, args.requests, args.concurrency)
    };
    let mut rows = vec![selling(Key::OneLock, watchdog)];
    for shards in SHARD_CURVE {
        rows.push(selling(Key::Shards(shards), segmented).on_shards(shards));
    }
    rows
}

fn latency(args: &BenchArgs) -> Vec<Scenario> {
    Variant::progression()
        .map(|variant| {
            let key = Key::At {
                variant,
                connections: 200,
            };
            let knobs = knobs(variant, args.work_ms, 10_000, "");
            let row = Scenario::selling(key, variant, knobs, args.requests, 200);
            if variant.spec().splits_stock {
                row.on_shards(args.shards)
            } else {
                row
            }
        })
        .collect()
}

fn memory() -> Vec<Scenario> {
    ["lua", "watchdog"]
        .map(|name| {
            let variant = variant(name);
            let knobs = if variant.takes("wait_ms") {
                "wait_ms=10000"
            } else {
                ""
            };
            let key = Key::At {
                variant,
                connections: 2_000,
            };
            Scenario::selling(key, variant, knobs.into(), 4_000, 2_000)
        })
        .into()
}

/// [`WAITERS`] at once on `variant` over `shards`, with `work_ms` and `extra` knobs.
fn at_waiters(
    variant: Variant,
    shards: u32,
    work_ms: u64,
    extra: &'static str,
    requests: u64,
) -> Scenario {
    let key = Key::Waiters {
        variant,
        shards,
        work_ms,
        extra,
    };
    let knobs = knobs(variant, work_ms, 10_000, extra);
    Scenario::selling(key, variant, knobs, requests, WAITERS).on_shards(shards)
}

/// With no work a row sells twice as many units: each takes less time.
fn requests_at(args: &BenchArgs, work_ms: u64) -> u64 {
    if work_ms == 0 {
        args.requests * 2
    } else {
        args.requests
    }
}

fn handoff(args: &BenchArgs) -> Vec<Scenario> {
    let lua = variant("lua");
    let one_client = Key::Clients {
        variant: lua,
        clients: 1,
    };
    let mut rows = vec![Scenario::selling(
        one_client,
        lua,
        String::new(),
        args.requests.max(1_000),
        1,
    )];
    let work = args.work_ms;
    for (work_ms, extra) in [
        (0, ""),
        (0, "handoff=off"),
        (work, ""),
        (work, "handoff=off"),
    ] {
        let requests = requests_at(args, work_ms);
        rows.push(at_waiters(variant("watchdog"), 1, work_ms, extra, requests));
    }
    let mut others = vec![variant("token"), variant("segmented")];
    if args.with_redlock {
        others.push(variant("redlock"));
    }
    for other in others {
        rows.push(at_waiters(other, 1, work, "", requests_at(args, work)));
    }
    rows
}

fn fair(args: &BenchArgs) -> Vec<Scenario> {
    let mut rows = Vec::new();
    for (variant, shards) in [
        (variant("watchdog"), 1),
        (variant("segmented"), args.shards),
    ] {
        for extra in ["", "fair=on"] {
            rows.push(at_waiters(
                variant,
                shards,
                args.work_ms,
                extra,
                args.requests,
            ));
        }
    }
    rows
}

fn shares(args: &BenchArgs) -> Vec<Scenario> {
    let mut rows = Vec::new();
    for work_ms in [args.work_ms, 0] {
        for (variant, shards) in [(variant("segmented"), args.shards), (variant("shares"), 1)] {
            let requests = requests_at(args, work_ms);
            rows.push(at_waiters(variant, shards, work_ms, "", requests));
        }
    }
    rows
}

/// Each round: lua (ten times `--requests`, as the ceiling) and watchdog at [`WAITERS`]
/// (with `--work-ms`), each with the database off, then on.
fn orders(args: &BenchArgs) -> Vec<Scenario> {
    let mut rows = Vec::new();
    for round in 0..args.rounds {
        for name in ["lua", "watchdog"] {
            let variant = variant(name);
            for on in [false, true] {
                let key = Key::Orders { variant, on, round };
                let row = if name == "lua" {
                    Scenario::selling(
                        key,
                        variant,
                        String::new(),
                        args.requests * 10,
                        args.concurrency,
                    )
                } else {
                    let knobs = knobs(variant, args.work_ms, 10_000, "");
                    Scenario::selling(key, variant, knobs, args.requests, WAITERS)
                };
                rows.push(Scenario { orders: on, ..row });
            }
        }
    }
    rows
}

/// The lock stores compared: watchdog (the lock in the stock Redis), redlock (five Redis
/// servers of its own, with --redlock-pids) and zookeeper (the ensemble), each at
/// [`WAITERS`] on one lock with no work and with `--work-ms`.
fn stores(args: &BenchArgs) -> Vec<Scenario> {
    let mut names = vec!["watchdog"];
    if !args.redlock_pids.is_empty() {
        names.push("redlock");
    }
    names.push("zookeeper");
    let mut rows = Vec::new();
    for work_ms in [0, args.work_ms] {
        for name in &names {
            rows.push(at_waiters(
                variant(name),
                1,
                work_ms,
                "",
                requests_at(args, work_ms),
            ));
        }
    }
    rows
}

/// Seed 003's rows: each lock scheme at [`WAITERS`] on one lock, with no work and with
/// `--work-ms`; the stock variants beside them (lua and pg_update take no work).
fn seed003(args: &BenchArgs) -> Vec<Scenario> {
    let mut rows = Vec::new();
    for work_ms in [0, args.work_ms] {
        for name in crate::seed003::schemes(args)
            .iter()
            .chain(crate::seed003::STOCK.iter())
            .map(|scheme| scheme.variant)
        {
            let variant = variant(name);
            if work_ms > 0 && !variant.takes("work_ms") {
                continue;
            }
            rows.push(at_waiters(
                variant,
                1,
                work_ms,
                "",
                requests_at(args, work_ms),
            ));
        }
    }
    rows
}

/// At each step of [`PRODUCT_CURVE`], each of [`CONTENDERS`] under the same load (`--requests`
/// from `--concurrency` connections, `--work-ms` where the variant takes it) spread over
/// that many products, with stock for every request.
fn contention(args: &BenchArgs) -> Vec<Scenario> {
    let mut rows = Vec::new();
    for products in PRODUCT_CURVE {
        for name in contenders(args) {
            let variant = variant(name);
            let key = Key::Contention { variant, products };
            let knobs = knobs(variant, args.work_ms, args.wait_ms, "");
            let row = Scenario::selling(key, variant, knobs, args.requests, args.concurrency);
            rows.push(row.over_products(products));
        }
    }
    rows
}
