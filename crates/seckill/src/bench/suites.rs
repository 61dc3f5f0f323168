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
    /// Lock hand-off: 200 waiters on one lock, with 2 ms of work (lock utilization) and
    /// with none (units/s against one client's lua requests/s).
    Handoff,
    /// The fair lock against the unfair one at 200 waiters: p99 wait against the queue's
    /// length in time, and what fairness costs.
    Fair,
    /// The seed's per-instance shares against segmented x8, with and without work.
    Shares,
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

impl Ratio {
    /// A ratio held against `target` (its text, and whether `value` meets it), or only
    /// reported when there is none.
    fn new(name: String, value: f64, target: Option<(&str, bool)>, of: String) -> Self {
        Self {
            name,
            value,
            target: target.map_or("reported".into(), |(text, _)| text.into()),
            met: target.map(|(_, met)| met),
            of,
        }
    }
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

/// Waiters on one lock in the hand-off and fair suites.
const WAITERS: u64 = 200;

/// Knobs of a lock variant's row: the work, a long wait, and any extra.
fn lock_knobs(variant: Variant, work_ms: u64, extra: &str) -> String {
    let mut knobs = format!("work_ms={work_ms}");
    if variant != Variant::Setnx {
        knobs.push_str("&wait_ms=10000");
    }
    if !extra.is_empty() {
        knobs.push('&');
        knobs.push_str(extra);
    }
    knobs
}

const LUA_ONE_CLIENT: &str = "lua, 1 client";

/// The label of a hand-off row: `watchdog @200, work 2` and so on.
fn at_waiters(variant: &str, work_ms: u64, extra: &str) -> String {
    let extra = if extra.is_empty() {
        String::new()
    } else {
        format!(", {extra}")
    };
    format!("{variant} @{WAITERS}, work {work_ms}{extra}")
}

fn handoff(args: &BenchArgs) -> Vec<Scenario> {
    let mut rows = vec![selling(
        LUA_ONE_CLIENT.into(),
        Variant::Lua,
        String::new(),
        args.requests.max(1_000),
        1,
    )];
    let requests_at = |work_ms: u64| {
        if work_ms == 0 {
            args.requests * 2
        } else {
            args.requests
        }
    };
    let work = args.work_ms;
    for (work_ms, extra) in [
        (0, ""),
        (0, "handoff=off"),
        (work, ""),
        (work, "handoff=off"),
    ] {
        rows.push(selling(
            at_waiters("watchdog", work_ms, extra),
            Variant::Watchdog,
            lock_knobs(Variant::Watchdog, work_ms, extra),
            requests_at(work_ms),
            WAITERS,
        ));
    }
    let mut others = vec![Variant::Token, Variant::Segmented];
    if args.with_redlock {
        others.push(Variant::Redlock);
    }
    for variant in others {
        let name = if variant == Variant::Segmented {
            "segmented x1".to_string()
        } else {
            variant.to_string()
        };
        rows.push(selling(
            at_waiters(&name, work, ""),
            variant,
            lock_knobs(variant, work, ""),
            requests_at(work),
            WAITERS,
        ));
    }
    rows
}

fn fair(args: &BenchArgs) -> Vec<Scenario> {
    let mut rows = Vec::new();
    for (variant, shards) in [(Variant::Watchdog, 1), (Variant::Segmented, args.shards)] {
        for extra in ["", "fair=on"] {
            let name = if shards > 1 {
                format!("{variant} x{shards}")
            } else {
                variant.to_string()
            };
            let mut scenario = selling(
                at_waiters(&name, args.work_ms, extra),
                variant,
                lock_knobs(variant, args.work_ms, extra),
                args.requests,
                WAITERS,
            );
            scenario.shards = shards;
            rows.push(scenario);
        }
    }
    rows
}

fn shares_suite(args: &BenchArgs) -> Vec<Scenario> {
    let mut rows = Vec::new();
    for work_ms in [args.work_ms, 0] {
        for (variant, shards) in [(Variant::Segmented, args.shards), (Variant::Shares, 1)] {
            let name = if shards > 1 {
                format!("{variant} x{shards}")
            } else {
                variant.to_string()
            };
            let requests = if work_ms == 0 {
                args.requests * 2
            } else {
                args.requests
            };
            let mut scenario = selling(
                at_waiters(&name, work_ms, ""),
                variant,
                lock_knobs(variant, work_ms, ""),
                requests,
                WAITERS,
            );
            scenario.shards = shards;
            rows.push(scenario);
        }
    }
    rows
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
        Suite::Handoff => handoff(args),
        Suite::Fair => fair(args),
        Suite::Shares => shares_suite(args),
        Suite::Performance => [
            ceiling(args),
            waiting(args),
            shards(args),
            latency(args),
            memory(),
            handoff(args),
            fair(args),
            shares_suite(args),
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
    if !over_ping.is_empty() {
        let value = median(over_ping.clone());
        ratios.push(Ratio {
            name: "lock-free ceiling".into(),
            value,
            target: ">= 0.95".into(),
            met: Some(value >= 0.95),
            of: format!(
                "lua req/s / readyz (one PING per request) req/s through the same Nginx at {} connections, median of rounds {over_ping:.2?}",
                args.concurrency
            ),
        });
    }
    for (name, rounds, of) in [
        (
            "lua over healthz",
            batched,
            "lua / healthz (no Redis at all)",
        ),
        (
            "lua with batch=off",
            unbatched,
            "one script call per request / healthz",
        ),
        ("readyz", ping, "one PING per request, no script / healthz"),
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
    ratios.extend(handoff_ratios(args, rows));
    ratios.extend(wait_ratios(args, rows));
    ratios.extend(shares_ratios(args, rows));
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

/// Units/s times the mean real work: the share of the time the lock was busy with work
/// rather than changing hands.
fn utilization(row: &Row) -> Option<f64> {
    row.work_mean_ms.map(|work| row.goodput * work / 1000.0)
}

fn handoff_ratios(args: &BenchArgs, rows: &[Row]) -> Vec<Ratio> {
    let mut ratios = Vec::new();
    let utilization_rows = [
        ("watchdog", ""),
        ("watchdog", "handoff=off"),
        ("token", ""),
        ("segmented x1", ""),
        ("redlock", ""),
    ];
    for (name, extra) in utilization_rows {
        let Some(row) = row(rows, &at_waiters(name, args.work_ms, extra)) else {
            continue;
        };
        let Some(value) = utilization(row) else {
            continue;
        };
        let headline = name == "watchdog" && extra.is_empty();
        ratios.push(Ratio::new(
            format!("lock utilization, {}", row.scenario.label),
            value,
            headline.then_some((">= 0.8", value >= 0.8)),
            format!(
                "units/s ({:.0}) x mean real work ({:.3} ms, p99 {:.3})",
                row.goodput,
                row.work_mean_ms.unwrap_or_default(),
                row.work_p99_ms.unwrap_or_default(),
            ),
        ));
    }
    let Some(lua) = row(rows, LUA_ONE_CLIENT) else {
        return ratios;
    };
    for extra in ["", "handoff=off"] {
        let Some(watchdog) = row(rows, &at_waiters("watchdog", 0, extra)) else {
            continue;
        };
        let value = watchdog.goodput / lua.throughput;
        let headline = extra.is_empty();
        ratios.push(Ratio::new(
            format!("hand-off, {}", watchdog.scenario.label),
            value,
            headline.then_some((">= 1.0", value >= 1.0)),
            format!(
                "watchdog units/s at {WAITERS} waiters, no work ({:.0}) / lua req/s at one client ({:.0}), same Nginx; p99 {:.0} ms",
                watchdog.goodput, lua.throughput, watchdog.p99_ms
            ),
        ));
    }
    ratios
}

/// Waits against the queue they stood in: p99 (and max) latency over the queue's length
/// in time. Every waiter ahead holds the lock once, and a hold (hand-over included) lasts
/// 1 / units-per-second; segmented has one queue per shard, 1/shards as long and served
/// 1/shards as fast, which comes to the same.
fn wait_ratios(args: &BenchArgs, rows: &[Row]) -> Vec<Ratio> {
    let segmented = format!("segmented x{}", args.shards);
    let waits = [
        ("watchdog", "fair=on"),
        ("watchdog", ""),
        ("watchdog", "handoff=off"),
        (segmented.as_str(), "fair=on"),
        (segmented.as_str(), ""),
    ];
    let mut ratios = Vec::new();
    for (name, extra) in waits {
        let Some(row) = row(rows, &at_waiters(name, args.work_ms, extra)) else {
            continue;
        };
        let queue_ms = WAITERS as f64 / row.goodput.max(1e-9) * 1000.0;
        let value = row.p99_ms / queue_ms;
        let headline = name == "watchdog" && extra == "fair=on";
        ratios.push(Ratio::new(
            format!("p99 wait / queue, {}", row.scenario.label),
            value,
            headline.then_some(("<= 1.3", value <= 1.3)),
            format!(
                "p99 {:.0} ms / ({WAITERS} waiters x {:.2} ms a hold = {:.0} ms); max {:.0} ms ({:.2} of the queue)",
                row.p99_ms,
                1000.0 / row.goodput.max(1e-9),
                queue_ms,
                row.max_ms,
                row.max_ms / queue_ms
            ),
        ));
    }
    for name in ["watchdog", segmented.as_str()] {
        let fair = row(rows, &at_waiters(name, args.work_ms, "fair=on"));
        let unfair = row(rows, &at_waiters(name, args.work_ms, ""));
        if let (Some(fair), Some(unfair)) = (fair, unfair) {
            ratios.push(Ratio::new(
                format!("fairness cost, {name}"),
                fair.goodput / unfair.goodput,
                None,
                format!(
                    "units/s fair ({:.0}) / unfair ({:.0})",
                    fair.goodput, unfair.goodput
                ),
            ));
        }
    }
    ratios
}

fn shares_ratios(args: &BenchArgs, rows: &[Row]) -> Vec<Ratio> {
    let segmented = format!("segmented x{}", args.shards);
    [args.work_ms, 0]
        .into_iter()
        .filter_map(|work_ms| {
            let shares = row(rows, &at_waiters("shares", work_ms, ""))?;
            let against = row(rows, &at_waiters(&segmented, work_ms, ""))?;
            Some(Ratio::new(
                format!("shares / {segmented}, work {work_ms}"),
                shares.goodput / against.goodput,
                None,
                format!(
                    "units/s at {WAITERS} connections: shares {:.0} (one local lock per instance), {segmented} {:.0}",
                    shares.goodput, against.goodput
                ),
            ))
        })
        .collect()
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
