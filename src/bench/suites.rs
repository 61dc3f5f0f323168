//! The bench's suites: which scenarios each runs, and the ratio each reports. Every ratio
//! is taken between rows of the same run, because figures on a shared machine drift from
//! run to run and ratios in one run do not (much).

use std::fmt;

use anyhow::Context;
use serde::Serialize;

use super::{BenchArgs, Row, Scenario, progression};
use crate::variant::Variant;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum Suite {
    /// Every variant under the same load (and the lessons with --lessons).
    Progression,
    /// lua against the no-Redis /healthz through the same Nginx: the lock-free ceiling.
    Ceiling,
    /// Redis commands per unit sold with 200 waiters against one client: watchdog's
    /// pub/sub wait, and token's spin-and-retry for contrast.
    Waiting,
    /// watchdog against segmented with 1 to 64 shards, 2 ms of work in the lock.
    Shards,
    /// Every variant at 200 connections, for p50/p99, every request selling a unit.
    Latency,
    /// 2,000 connections at lua and watchdog; peak RSS per instance (needs --instance-urls).
    Memory,
    /// All of the performance suites, one after the other.
    Performance,
}

impl Suite {
    pub fn reads_memory(self) -> bool {
        matches!(self, Self::Memory | Self::Performance)
    }
}

/// A ratio a suite reports, against its target.
#[derive(Debug, Clone, Serialize)]
pub struct Ratio {
    pub name: String,
    pub value: f64,
    pub target: String,
    pub met: Option<bool>,
    /// What it is the ratio of.
    pub of: String,
}

impl fmt::Display for Ratio {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let verdict = match self.met {
            Some(true) => "met",
            Some(false) => "NOT met",
            None => "reported",
        };
        write!(
            f,
            "{}: {:.2} (target {}: {verdict}) = {}",
            self.name, self.value, self.target, self.of
        )
    }
}

/// One scenario where every request sells a unit: stock = requests, one shard unless given.
fn selling(
    label: String,
    variant: Variant,
    knobs: String,
    requests: u64,
    concurrency: u64,
) -> Scenario {
    Scenario {
        label,
        variant: Some(variant),
        baseline: None,
        knobs,
        stock: i64::try_from(requests).unwrap_or(i64::MAX),
        shards: 1,
        requests,
        concurrency,
        first: None,
    }
}

/// A GET of `path` with no deduction: what the path through Nginx costs by itself.
fn baseline(label: &str, path: &'static str, requests: u64, concurrency: u64) -> Scenario {
    Scenario {
        label: label.into(),
        variant: None,
        baseline: Some(path),
        knobs: String::new(),
        stock: 0,
        shards: 1,
        requests,
        concurrency,
        first: None,
    }
}

/// The ceiling suite's rows besides lua: the baselines, and lua with `batch=off` (one script
/// call per request), to show what sharing the round trip buys.
const HEALTHZ: &str = "healthz (no Redis)";
const READYZ: &str = "readyz (one PING)";
const CEILING: &str = "lua (ceiling)";
const CEILING_UNBATCHED: &str = "lua, batch=off";

/// Ten times `--requests` each round: cheap requests, and throughput wants a long run.
fn ceiling(args: &BenchArgs) -> Vec<Scenario> {
    let requests = args.requests * 10;
    let lua = |label: &str, knobs: &str| {
        selling(
            label.into(),
            Variant::Lua,
            knobs.into(),
            requests,
            args.concurrency,
        )
    };
    (0..args.rounds)
        .flat_map(|_| {
            [
                baseline(HEALTHZ, "/healthz", requests, args.concurrency),
                baseline(READYZ, "/readyz", requests, args.concurrency),
                lua(CEILING, ""),
                lua(CEILING_UNBATCHED, "batch=off"),
            ]
        })
        .collect()
}

fn waiting(args: &BenchArgs) -> Vec<Scenario> {
    let work = format!("work_ms={}", args.work_ms);
    let mut rows = Vec::new();
    for variant in [Variant::Watchdog, Variant::Token] {
        let knobs = format!("{work}&wait_ms=10000");
        rows.push(selling(
            format!("{variant}, 1 client"),
            variant,
            knobs.clone(),
            300,
            1,
        ));
        rows.push(selling(
            format!("{variant}, 200 waiters"),
            variant,
            knobs,
            1_000,
            200,
        ));
    }
    rows
}

/// Past 16 the curve bends on this 2-core machine: 32 and 64 show where.
const SHARD_CURVE: [u32; 7] = [1, 2, 4, 8, 16, 32, 64];

fn shards(args: &BenchArgs) -> Vec<Scenario> {
    let requests = args.requests;
    let knobs = format!("work_ms={}&wait_ms=10000", args.work_ms);
    let mut rows = vec![selling(
        "watchdog (one lock)".into(),
        Variant::Watchdog,
        knobs.clone(),
        requests,
        args.concurrency,
    )];
    for shards in SHARD_CURVE {
        let mut scenario = selling(
            format!("segmented x{shards}"),
            Variant::Segmented,
            knobs.clone(),
            requests,
            args.concurrency,
        );
        scenario.shards = shards;
        rows.push(scenario);
    }
    rows
}

fn latency(args: &BenchArgs) -> Vec<Scenario> {
    Variant::PROGRESSION
        .into_iter()
        .map(|variant| {
            let knobs = match variant {
                Variant::Lua => String::new(),
                Variant::Naive | Variant::Setnx => format!("work_ms={}", args.work_ms),
                _ => format!("work_ms={}&wait_ms=10000", args.work_ms),
            };
            let mut scenario = selling(
                format!("{variant} @200"),
                variant,
                knobs,
                args.requests,
                200,
            );
            if variant == Variant::Segmented {
                scenario.shards = args.shards;
            }
            scenario
        })
        .collect()
}

fn memory() -> Vec<Scenario> {
    [Variant::Lua, Variant::Watchdog]
        .into_iter()
        .map(|variant| {
            let knobs = if variant == Variant::Lua {
                ""
            } else {
                "wait_ms=10000"
            };
            selling(
                format!("{variant} @2000"),
                variant,
                knobs.into(),
                4_000,
                2_000,
            )
        })
        .collect()
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
        Suite::Performance => [
            ceiling(args),
            waiting(args),
            shards(args),
            latency(args),
            memory(),
        ]
        .concat(),
    }
}

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    match values.len() {
        0 => f64::NAN,
        n if n % 2 == 1 => values[n / 2],
        n => (values[n / 2 - 1] + values[n / 2]) / 2.0,
    }
}

fn row<'a>(rows: &'a [Row], label: &str) -> Option<&'a Row> {
    rows.iter().find(|r| r.scenario.label == label)
}

/// The ratios the suite's rows allow.
pub fn ratios(args: &BenchArgs, rows: &[Row], peak_rss: &[(String, u64)]) -> Vec<Ratio> {
    let mut ratios = Vec::new();
    // Ceiling: each row against the baselines of its round; the median round.
    let (mut batched, mut unbatched, mut ping, mut over_ping) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    let (mut healthz, mut readyz) = (None, None);
    for row in rows {
        let of_healthz = healthz.map(|h| row.throughput / h);
        match row.scenario.label.as_str() {
            HEALTHZ => healthz = Some(row.throughput),
            READYZ => {
                readyz = Some(row.throughput);
                ping.extend(of_healthz);
            }
            CEILING => {
                batched.extend(of_healthz);
                over_ping.extend(readyz.map(|r| row.throughput / r));
            }
            CEILING_UNBATCHED => unbatched.extend(of_healthz),
            _ => {}
        }
    }
    if !batched.is_empty() {
        let value = median(batched.clone());
        ratios.push(Ratio {
            name: "lock-free ceiling".into(),
            value,
            target: ">= 0.85".into(),
            met: Some(value >= 0.85),
            of: format!(
                "lua req/s / healthz req/s through the same Nginx at {} connections, median of rounds {batched:.2?}",
                args.concurrency
            ),
        });
    }
    for (name, rounds, of) in [
        (
            "lua with batch=off",
            unbatched,
            "one script call per request / healthz",
        ),
        ("readyz", ping, "one PING per request, no script / healthz"),
        ("lua over readyz", over_ping, "lua / one PING per request"),
    ] {
        if !rounds.is_empty() {
            ratios.push(Ratio {
                name: name.into(),
                value: median(rounds.clone()),
                target: "none, for contrast".into(),
                met: None,
                of: format!("req/s, {of}, median of rounds {rounds:.2?}"),
            });
        }
    }
    for (variant, target) in [(Variant::Watchdog, Some(2.0)), (Variant::Token, None)] {
        let one = row(rows, &format!("{variant}, 1 client"));
        let many = row(rows, &format!("{variant}, 200 waiters"));
        if let (Some(one), Some(many)) = (one, many)
            && let (Some(a), Some(b)) = (one.redis_commands_per_unit, many.redis_commands_per_unit)
        {
            let value = b / a;
            ratios.push(Ratio {
                name: format!("{variant} waiting"),
                value,
                target: target.map_or("none: spin-and-retry, for contrast".into(), |t| format!("<= {t}")),
                met: target.map(|t| value <= t),
                of: format!(
                    "Redis commands per unit sold, 200 waiters ({b:.1}) / one client ({a:.1}); Redis CPU per unit {:.1} / {:.1} us",
                    many.redis_cpu_us_per_unit.unwrap_or(f64::NAN),
                    one.redis_cpu_us_per_unit.unwrap_or(f64::NAN)
                ),
            });
        }
    }
    if let (Some(single), Some(eight)) =
        (row(rows, "watchdog (one lock)"), row(rows, "segmented x8"))
    {
        let value = eight.goodput / single.goodput;
        let curve: Vec<String> = SHARD_CURVE
            .iter()
            .filter_map(|n| {
                row(rows, &format!("segmented x{n}")).map(|r| format!("x{n} {:.0}/s", r.goodput))
            })
            .collect();
        ratios.push(Ratio {
            name: "segmented goodput".into(),
            value,
            target: ">= 5".into(),
            met: Some(value >= 5.0),
            of: format!(
                "units/s, 8 shards / one watchdog lock ({:.0}/s), {} ms of work in the lock; curve: {}",
                single.goodput,
                args.work_ms,
                curve.join(", ")
            ),
        });
    }
    for (url, bytes) in peak_rss {
        ratios.push(Ratio {
            name: format!("peak RSS {url}"),
            value: *bytes as f64 / 1_048_576.0,
            target: "MiB under 2,000 connections, bounded".into(),
            met: None,
            of: "the instance's VmHWM, from its /metrics".into(),
        });
    }
    ratios
}

/// Each instance's peak resident memory, from its `/metrics`.
pub async fn peak_rss(
    http: &reqwest::Client,
    instances: &[String],
) -> anyhow::Result<Vec<(String, u64)>> {
    let mut peaks = Vec::new();
    for url in instances {
        let text = http
            .get(format!("{}/metrics", url.trim_end_matches('/')))
            .send()
            .await?
            .error_for_status()?
            .text()
            .await?;
        let bytes = text
            .lines()
            .find_map(|line| {
                // `name{instance="…"} value`, or `name value`.
                let rest = line.strip_prefix("seckill_process_peak_resident_memory_bytes")?;
                let value = rest.rsplit_once(' ')?.1;
                (rest.starts_with('{') || rest.starts_with(' ')).then_some(value)
            })
            .and_then(|v| v.trim().parse().ok())
            .with_context(|| format!("{url}/metrics has no peak RSS: {:.300}", text))?;
        peaks.push((url.clone(), bytes));
    }
    Ok(peaks)
}
