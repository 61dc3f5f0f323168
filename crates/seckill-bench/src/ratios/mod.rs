//! The ratios the suites report. Every ratio is taken between rows of the same run,
//! because figures on a shared machine drift from run to run and ratios in one run do not
//! (much). Rows are found by their [`Key`], never by their labels.

use crate::args::BenchArgs;
use crate::ratio::Ratio;
use crate::row::Row;
use crate::scenario::variant;
use crate::scenario::{Key, WAITERS};
use crate::suites::SHARD_CURVE;

mod contention;
mod orders;
mod stores;
mod waiting;

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    match values.len() {
        0 => f64::NAN,
        n if n % 2 == 1 => values[n / 2],
        n => (values[n / 2 - 1] + values[n / 2]) / 2.0,
    }
}

fn row(rows: &[Row], key: Key) -> Option<&Row> {
    crate::row::find(rows, key)
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
