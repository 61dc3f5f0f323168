//! The ratios the suites report. Every ratio is taken between rows of the same run,
//! because figures on a shared machine drift from run to run and ratios in one run do not
//! (much). Rows are found by their [`Key`], never by their labels.

use std::fmt;

use serde::Serialize;

use crate::args::BenchArgs;
use crate::report::Row;
use crate::scenario::{Key, WAITERS};
use crate::suites::{SHARD_CURVE, variant};

mod contention;
mod orders;
mod stores;
mod waiting;

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

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    match values.len() {
        0 => f64::NAN,
        n if n % 2 == 1 => values[n / 2],
        n => (values[n / 2 - 1] + values[n / 2]) / 2.0,
    }
}

fn row(rows: &[Row], key: Key) -> Option<&Row> {
    rows.iter().find(|r| r.scenario.key == key)
}

/// The ratios the suite's rows allow.
pub fn ratios(args: &BenchArgs, rows: &[Row], peak_rss: &[(String, u64)]) -> Vec<Ratio> {
    let mut ratios = ceiling_ratios(args, rows);
    ratios.extend(waiting::ratios(rows));
    ratios.extend(shard_ratios(args, rows));
    ratios.extend(handoff_ratios(args, rows));
    ratios.extend(wait_ratios(args, rows));
    ratios.extend(shares_ratios(args, rows));
    ratios.extend(orders::ratios(args, rows));
    ratios.extend(contention::ratios(rows));
    ratios.extend(stores::ratios(args, rows));
    ratios.extend(crate::seed003::ratios(args, rows));
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

/// Ceiling: each lua row against the baselines of its round; the median round.
fn ceiling_ratios(args: &BenchArgs, rows: &[Row]) -> Vec<Ratio> {
    let (mut batched, mut unbatched, mut ping, mut over_ping) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    let (mut healthz, mut readyz) = (None, None);
    for row in rows {
        let of_healthz = healthz.map(|h| row.throughput / h);
        match row.scenario.key {
            Key::Baseline("/healthz") => healthz = Some(row.throughput),
            Key::Baseline("/readyz") => {
                readyz = Some(row.throughput);
                ping.extend(of_healthz);
            }
            Key::Ceiling { batched: true } => {
                batched.extend(of_healthz);
                over_ping.extend(readyz.map(|r| row.throughput / r));
            }
            Key::Ceiling { batched: false } => unbatched.extend(of_healthz),
            _ => {}
        }
    }
    let mut ratios = Vec::new();
    if !over_ping.is_empty() {
        let value = median(over_ping.clone());
        ratios.push(Ratio::new(
            "lock-free ceiling".into(),
            value,
            Some((">= 0.95", value >= 0.95)),
            format!(
                "lua req/s / readyz (one PING per request) req/s through the same Nginx at {} connections, median of rounds {over_ping:.2?}",
                args.concurrency
            ),
        ));
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
    ratios
}

/// Shards: segmented over 8 shards against one watchdog lock, and the whole curve.
fn shard_ratios(args: &BenchArgs, rows: &[Row]) -> Vec<Ratio> {
    let (Some(single), Some(eight)) = (row(rows, Key::OneLock), row(rows, Key::Shards(8))) else {
        return Vec::new();
    };
    let value = eight.goodput / single.goodput;
    let curve: Vec<String> = SHARD_CURVE
        .iter()
        .filter_map(|&n| row(rows, Key::Shards(n)).map(|r| format!("x{n} {:.0}/s", r.goodput)))
        .collect();
    vec![Ratio::new(
        "segmented goodput".into(),
        value,
        Some((">= 5", value >= 5.0)),
        format!(
            "units/s, 8 shards / one watchdog lock ({:.0}/s), {} ms of work in the lock; curve: {}",
            single.goodput,
            args.work_ms,
            curve.join(", ")
        ),
    )]
}

/// The row of [`WAITERS`] at once on `name` over `shards`, with `work_ms` and `extra`.
fn at_waiters<'a>(
    rows: &'a [Row],
    name: &str,
    shards: u32,
    work_ms: u64,
    extra: &'static str,
) -> Option<&'a Row> {
    let key = Key::Waiters {
        variant: variant(name),
        shards,
        work_ms,
        extra,
    };
    row(rows, key)
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
        ("segmented", ""),
        ("redlock", ""),
        ("zookeeper", ""),
    ];
    for (name, extra) in utilization_rows {
        let Some(row) = at_waiters(rows, name, 1, args.work_ms, extra) else {
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
    let one_client = Key::Clients {
        variant: variant("lua"),
        clients: 1,
    };
    let Some(lua) = row(rows, one_client) else {
        return ratios;
    };
    for extra in ["", "handoff=off"] {
        let Some(watchdog) = at_waiters(rows, "watchdog", 1, 0, extra) else {
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
    let waits = [
        ("watchdog", 1, "fair=on"),
        ("watchdog", 1, ""),
        ("watchdog", 1, "handoff=off"),
        ("segmented", args.shards, "fair=on"),
        ("segmented", args.shards, ""),
    ];
    let mut ratios = Vec::new();
    for (name, shards, extra) in waits {
        let Some(row) = at_waiters(rows, name, shards, args.work_ms, extra) else {
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
    for (name, shards) in [("watchdog", 1), ("segmented", args.shards)] {
        let fair = at_waiters(rows, name, shards, args.work_ms, "fair=on");
        let unfair = at_waiters(rows, name, shards, args.work_ms, "");
        if let (Some(fair), Some(unfair)) = (fair, unfair) {
            let label = unfair.scenario.label.split(" @").next().unwrap_or(name);
            ratios.push(Ratio::new(
                format!("fairness cost, {label}"),
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
    [args.work_ms, 0]
        .into_iter()
        .filter_map(|work_ms| {
            let shares = at_waiters(rows, "shares", 1, work_ms, "")?;
            let against = at_waiters(rows, "segmented", args.shards, work_ms, "")?;
            let segmented = against.scenario.label.split(" @").next().unwrap_or("segmented");
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

/// The partial suite: what a stopped replica does to what runs beside the sales it
/// cannot confirm, and what two of five servers down do to Redlock.
pub fn partial_ratios(rows: &[Row]) -> Vec<Ratio> {
    use crate::partial::{CONFIRMED, OTHER, READYZ, STATS};
    let stall = |probe, stopped| row(rows, Key::Stall { probe, stopped });
    let mut ratios = Vec::new();
    for probe in [READYZ, STATS, OTHER] {
        if let (Some(up), Some(stopped)) = (stall(probe, false), stall(probe, true)) {
            let value = stopped.p99_ms / up.p99_ms.max(1e-9);
            ratios.push(Ratio::new(
                format!("stalled replica: {probe} p99"),
                value,
                Some(("<= 3", value <= 3.0)),
                format!(
                    "p99 with the replica stopped ({:.1} ms) / up ({:.1} ms); answers {} / {}",
                    stopped.p99_ms,
                    up.p99_ms,
                    stopped.statuses.values().sum::<usize>(),
                    up.statuses.values().sum::<usize>()
                ),
            ));
        }
    }
    if let (Some(up), Some(stopped)) = (stall(CONFIRMED, false), stall(CONFIRMED, true)) {
        let value = stopped.throughput / up.throughput.max(1e-9);
        ratios.push(Ratio::new(
            "stalled replica: confirmed answers/s".into(),
            value,
            Some((">= 0.5", value >= 0.5)),
            format!(
                "answers/s with the replica stopped ({:.0}: {} 200, {} 503) / up ({:.0}: {} 200); p99 {:.0} / {:.0} ms, slowest {:.0} / {:.0} ms",
                stopped.throughput,
                stopped.count(200),
                stopped.count(503),
                up.throughput,
                up.count(200),
                stopped.p99_ms,
                up.p99_ms,
                stopped.max_ms,
                up.max_ms
            ),
        ));
    }
    if let (Some(five), Some(three)) = (row(rows, Key::RedlockUp(5)), row(rows, Key::RedlockUp(3)))
    {
        let value = three.goodput / five.goodput.max(1e-9);
        ratios.push(Ratio::new(
            "redlock, 3 of 5 servers up".into(),
            value,
            Some((">= 0.5", value >= 0.5)),
            format!(
                "units/s with 3 of 5 up ({:.0}; {} sold, {} 429) / all 5 up ({:.0}); 100 connections, no work",
                three.goodput,
                three.sold,
                three.count(429),
                five.goodput
            ),
        ));
    }
    ratios
}
