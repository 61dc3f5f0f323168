//! A row of the comparison, as asked for: what is sent, and which row it is.

use std::fmt;

use seckill::variants::Variant;
use seckill_lessons::{LESSONS, Lesson, Phase};
use serde::Serialize;

use crate::args::BenchArgs;

/// Waiters on one lock in the suites that measure waiting.
pub const WAITERS: u64 = 200;

/// Which row a scenario is, so that a suite finds its rows again by what they are rather
/// than by their labels. Its `Display` is the row's label.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum Key {
    /// The progression's row for a variant, on `shards` shards.
    Step { variant: Variant, shards: u32 },
    /// A lesson's phase, by its label.
    Lesson(&'static str),
    /// GETs with no deduction: `/healthz` (no Redis) or `/readyz` (one `PING`).
    Baseline(&'static str),
    /// lua in the ceiling suite: its calls shared (`batch=on`) or one each.
    Ceiling { batched: bool },
    /// One client, or [`WAITERS`] at once, on one lock (the waiting suite; lua's one client
    /// in the hand-off suite).
    Clients { variant: Variant, clients: u64 },
    /// Every request selling a unit, from `connections` at once (latency, memory).
    At { variant: Variant, connections: u64 },
    /// The shards suite: one watchdog lock for the whole stock.
    OneLock,
    /// The shards suite: the stock split into this many shards.
    Shards(u32),
    /// [`WAITERS`] at once on `variant` over `shards`, with `work_ms` in the lock and
    /// `extra` knobs (the hand-off, fair and shares suites).
    Waiters {
        variant: Variant,
        shards: u32,
        work_ms: u64,
        extra: &'static str,
    },
    /// One of the loads side by side while the stock store's replica is up, or stopped
    /// (the partial suite): `probe` says which.
    Stall { probe: &'static str, stopped: bool },
    /// Redlock at 100 connections with this many of its five servers up (the partial
    /// suite).
    RedlockUp(u32),
    /// The contention suite: `variant` with the same load spread over `products`
    /// products.
    Contention { variant: Variant, products: u32 },
    /// The orders suite: `variant` with its orders streamed to the database (`on`) or
    /// kept in Redis only, in round `round`.
    Orders {
        variant: Variant,
        on: bool,
        round: u64,
    },
    /// The capacity suite: `variant` over `shards`, its load spread over `products`, on
    /// `setup` (`1 instance`, `3 masters`, …) in round `round`; `db`: its orders streamed
    /// into PostgreSQL (the row waits for them to land).
    Capacity {
        variant: Variant,
        shards: u32,
        products: u32,
        setup: &'static str,
        round: u64,
        db: bool,
    },
}

impl fmt::Display for Key {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Self::Step { variant, shards } => write!(f, "{}", named(variant, shards)),
            Self::Lesson(label) => f.write_str(label),
            Self::Baseline("/healthz") => f.write_str("healthz (no Redis)"),
            Self::Baseline("/readyz") => f.write_str("readyz (one PING)"),
            Self::Baseline(path) => f.write_str(path),
            Self::Ceiling { batched: true } => f.write_str("lua (ceiling)"),
            Self::Ceiling { batched: false } => f.write_str("lua, batch=off"),
            Self::Clients {
                variant,
                clients: 1,
            } => write!(f, "{variant}, 1 client"),
            Self::Clients { variant, clients } => write!(f, "{variant}, {clients} waiters"),
            Self::At {
                variant,
                connections,
            } => write!(f, "{variant} @{connections}"),
            Self::OneLock => f.write_str("watchdog (one lock)"),
            Self::Shards(shards) => write!(f, "segmented x{shards}"),
            Self::Stall { probe, stopped } => {
                let replica = if stopped { "stopped" } else { "up" };
                write!(f, "{probe}, replica {replica}")
            }
            Self::RedlockUp(up) => write!(f, "redlock @100, {up} of 5 up"),
            Self::Contention {
                variant,
                products: 1,
            } => write!(f, "{variant}, 1 product"),
            Self::Contention { variant, products } => {
                write!(f, "{variant}, {products} products")
            }
            Self::Capacity {
                variant,
                shards,
                products,
                setup,
                ..
            } => {
                write!(f, "{}", named(variant, shards))?;
                if products > 1 {
                    write!(f, ", {products} products")?;
                }
                write!(f, ", {setup}")
            }
            Self::Orders { variant, on, .. } => {
                write!(f, "{variant}, orders db {}", if on { "on" } else { "off" })
            }
            Self::Waiters {
                variant,
                shards,
                work_ms,
                extra,
            } => {
                write!(f, "{} @{WAITERS}, work {work_ms}", named(variant, shards))?;
                if !extra.is_empty() {
                    write!(f, ", {extra}")?;
                }
                Ok(())
            }
        }
    }
}

/// A variant's name, with its shard count when it splits the stock: `segmented x8`.
fn named(variant: Variant, shards: u32) -> String {
    if variant.spec().splits_stock {
        format!("{variant} x{shards}")
    } else {
        variant.to_string()
    }
}

/// One row of the comparison: what was asked for.
#[derive(Debug, Clone, Serialize)]
pub struct Scenario {
    pub key: Key,
    pub label: String,
    /// The variant to POST to; `None` for a baseline.
    pub variant: Option<Variant>,
    /// The baseline's path, sent as GETs.
    pub baseline: Option<&'static str>,
    /// Knobs, as a query string.
    pub knobs: String,
    pub stock: i64,
    pub shards: u32,
    pub requests: u64,
    pub concurrency: u64,
    /// Knobs of a request sent alone before the load (a fault).
    pub first: Option<String>,
    /// Whether the reset lets the orders go to the database (with `--orders-db`; `false`
    /// keeps them in Redis only, for the orders suite's comparison).
    pub orders: bool,
    /// Products the load is spread over, each request's drawn at random (`--product` and
    /// `<product>-1`, …), each with the whole stock.
    pub products: u32,
}

impl Scenario {
    /// Deductions at `variant` with `knobs`, every request selling a unit: stock =
    /// requests, one shard.
    pub fn selling(
        key: Key,
        variant: Variant,
        knobs: String,
        requests: u64,
        concurrency: u64,
    ) -> Self {
        Self {
            label: key.to_string(),
            key,
            variant: Some(variant),
            baseline: None,
            knobs,
            stock: i64::try_from(requests).unwrap_or(i64::MAX),
            shards: 1,
            requests,
            concurrency,
            first: None,
            orders: true,
            products: 1,
        }
    }

    /// GETs of `path` with no deduction: what the path through Nginx costs by itself.
    pub fn baseline(path: &'static str, requests: u64, concurrency: u64) -> Self {
        let key = Key::Baseline(path);
        Self {
            label: key.to_string(),
            key,
            variant: None,
            baseline: Some(path),
            knobs: String::new(),
            stock: 0,
            shards: 1,
            requests,
            concurrency,
            first: None,
            orders: true,
            products: 1,
        }
    }

    /// A lesson's phase, as the page runs it.
    fn lesson(lesson: &Lesson, phase: &'static Phase) -> Self {
        let key = Key::Lesson(phase.label);
        let variant = Variant::parse(phase.variant).unwrap_or_else(|| {
            panic!(
                "no variant {} in the registry (lesson {}, phase {})",
                phase.variant, lesson.name, phase.label
            )
        });
        Self {
            label: key.to_string(),
            key,
            variant: Some(variant),
            baseline: None,
            knobs: phase.knobs.to_owned(),
            stock: phase.stock,
            shards: phase.shards,
            requests: phase.requests as u64,
            concurrency: phase.concurrency as u64,
            first: phase.first.map(str::to_owned),
            orders: true,
            products: 1,
        }
    }

    /// The same load spread over `products` products, each with its share of the stock.
    pub fn over_products(mut self, products: u32) -> Self {
        self.products = products.max(1);
        self
    }

    pub fn on_shards(mut self, shards: u32) -> Self {
        self.shards = shards;
        self.label = self.key.to_string();
        self
    }
}

/// `work_ms` for the variants that take it, a long `wait_ms` for those that wait, and
/// `extra`: the knobs of a row where every request should sell.
pub fn knobs(variant: Variant, work_ms: u64, wait_ms: u64, extra: &str) -> String {
    let mut knobs = Vec::new();
    if variant.takes("work_ms") {
        knobs.push(format!("work_ms={work_ms}"));
    }
    if variant.takes("wait_ms") {
        knobs.push(format!("wait_ms={wait_ms}"));
    }
    if !extra.is_empty() {
        knobs.push(extra.to_owned());
    }
    knobs.join("&")
}

/// The progression: every chosen variant under the same load, then the failure lessons
/// if asked.
pub fn progression(args: &BenchArgs) -> Vec<Scenario> {
    let variants: Vec<Variant> = if args.variants.is_empty() {
        Variant::progression().collect()
    } else {
        args.variants.clone()
    };
    let mut rows: Vec<Scenario> = variants
        .into_iter()
        .map(|variant| {
            let shards = if variant.spec().splits_stock {
                args.shards
            } else {
                1
            };
            let key = Key::Step { variant, shards };
            Scenario {
                stock: args.stock,
                requests: args.requests,
                ..Scenario::selling(
                    key,
                    variant,
                    knobs(variant, args.work_ms, args.wait_ms, ""),
                    args.requests,
                    args.concurrency,
                )
                .on_shards(shards)
            }
        })
        .collect();
    if args.lessons {
        let failure_modes = LESSONS.iter().filter(|l| l.failure_mode);
        let phases = failure_modes.flat_map(|l| l.phases.iter().map(move |p| (l, p)));
        rows.extend(phases.map(|(lesson, phase)| Scenario::lesson(lesson, phase)));
    }
    rows
}

/// A variant the suites are about, by name.
pub fn variant(name: &str) -> Variant {
    Variant::parse(name).unwrap_or_else(|| panic!("no variant {name} in the registry"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn variant(name: &str) -> Variant {
        Variant::parse(name).unwrap()
    }

    #[test]
    fn labels_read_as_before() {
        let segmented = variant("segmented");
        let watchdog = variant("watchdog");
        let cases = [
            (
                Key::Step {
                    variant: segmented,
                    shards: 8,
                },
                "segmented x8",
            ),
            (
                Key::Step {
                    variant: watchdog,
                    shards: 1,
                },
                "watchdog",
            ),
            (Key::Baseline("/readyz"), "readyz (one PING)"),
            (
                Key::Orders {
                    variant: watchdog,
                    on: false,
                    round: 1,
                },
                "watchdog, orders db off",
            ),
            (
                Key::Clients {
                    variant: watchdog,
                    clients: WAITERS,
                },
                "watchdog, 200 waiters",
            ),
            (
                Key::Waiters {
                    variant: segmented,
                    shards: 1,
                    work_ms: 2,
                    extra: "",
                },
                "segmented x1 @200, work 2",
            ),
            (
                Key::Waiters {
                    variant: watchdog,
                    shards: 1,
                    work_ms: 0,
                    extra: "handoff=off",
                },
                "watchdog @200, work 0, handoff=off",
            ),
        ];
        for (key, label) in cases {
            assert_eq!(key.to_string(), label);
        }
    }

    #[test]
    fn knobs_follow_what_each_variant_takes() {
        assert_eq!(knobs(variant("lua"), 2, 10_000, ""), "");
        assert_eq!(knobs(variant("setnx"), 2, 10_000, ""), "work_ms=2");
        assert_eq!(
            knobs(variant("watchdog"), 2, 10_000, "fair=on"),
            "work_ms=2&wait_ms=10000&fair=on"
        );
    }

    /// `--lessons` adds each failure lesson's phases as rows, on its variant and terms.
    #[test]
    fn the_failure_lessons_are_rows_on_their_variants() {
        use clap::Parser;
        let args = crate::args::Cli::parse_from(["seckill-bench", "--lessons"]).args;
        let rows = progression(&args);
        let failure_modes = LESSONS.iter().filter(|l| l.failure_mode);
        let phases: Vec<&Phase> = failure_modes.flat_map(|l| l.phases).collect();
        assert!(!phases.is_empty());
        for phase in phases {
            let row = rows.iter().find(|r| r.key == Key::Lesson(phase.label));
            let row = row.unwrap_or_else(|| panic!("no row for {}", phase.label));
            assert_eq!(row.variant.map(Variant::name), Some(phase.variant));
            assert_eq!((row.knobs.as_str(), row.stock), (phase.knobs, phase.stock));
        }
    }
}
