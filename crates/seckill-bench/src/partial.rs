//! The partial suite: a failure of one part must stay partial.
//!
//! 1. **A stalled replica.** With the instances on `--redis-wait-replicas 1`, four loads
//!    run side by side for `--phase-seconds`: confirmed sales of product 101 (40 clients,
//!    watchdog and lua), sales of product 102, `/readyz` and `/stats` (2 clients each).
//!    Once with the replica up, once with it stopped (SIGSTOP of `--replica-pid`). Then the
//!    replica is let go (SIGCONT), and the time to the next confirmed sale is measured.
//! 2. **Redlock with two of five servers down.** 300 requests from 100 connections, no
//!    work, `wait_ms=3000`, with all five up, then with two killed (SIGKILL of
//!    `--redlock-down-pids`).

use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{Context, bail, ensure};
use seckill::variants::Variant;
use seckill_load::{Control, Load, Method};

use crate::admin::Service;
use crate::measure::run_one;
use crate::ratio::Ratio;
use crate::redis_usage::Masters;
use crate::row::{Row, find};
use crate::scenario::{Key, Scenario};

pub const CONFIRMED: &str = "confirmed sales @40";
pub const OTHER: &str = "product 102 @2";
pub const READYZ: &str = "/readyz @2";
pub const STATS: &str = "/stats @2";

/// What the suite produced: its rows, and how long confirmations took to come back.
pub struct Partial {
    pub rows: Vec<Row>,
    pub ratios: Vec<Ratio>,
}

pub async fn run(service: &Service<'_>, info: &mut Option<Masters>) -> anyhow::Result<Partial> {
    let args = service.args;
    let replica = args
        .replica_pid
        .context("the partial suite needs --replica-pid (scripts/partial-failure.sh gives it)")?;
    ensure!(
        args.redlock_down_pids.len() == 2,
        "the partial suite needs two --redlock-down-pids (scripts/partial-failure.sh gives them)"
    );
    let mut rows = Vec::new();
    for stopped in [false, true] {
        for (product, _) in PRODUCTS {
            service.reset_product(product, 100_000_000, 1, 0).await?;
        }
        if stopped {
            signal(replica, "STOP")?;
        }
        let mut phase = side_by_side(service, stopped).await;
        audit(service, &mut phase).await?;
        rows.extend(phase);
    }
    signal(replica, "CONT")?;
    let back = first_confirmed_sale(service).await;
    let mut ratios = vec![Ratio {
        name: "confirmations back after SIGCONT".into(),
        value: back.map_or(f64::NAN, |b| b.as_secs_f64()),
        target: "<= 1 s".into(),
        met: Some(back.is_some_and(|b| b <= Duration::from_secs(1))),
        of: "seconds from the replica's SIGCONT to the next 200 of product 101".into(),
    }];

    let redlock = Variant::parse("redlock").context("the redlock variant")?;
    for up in [5, 3] {
        if up == 3 {
            for pid in &args.redlock_down_pids {
                signal(*pid, "KILL")?;
            }
        }
        let key = Key::RedlockUp(up);
        let mut scenario = Scenario::selling(key, redlock, "wait_ms=3000".into(), 300, 100);
        scenario.stock = 1_000_000;
        rows.push(run_one(service, info, scenario).await?);
    }
    ratios.extend(self::ratios(&rows));
    Ok(Partial { rows, ratios })
}

/// The products the phases sell, and the row each is audited in.
const PRODUCTS: [(&str, &str); 2] = [("101", CONFIRMED), ("102", OTHER)];

/// Each product's audit after a phase, in its row: what was sold, oversold, lost.
async fn audit(service: &Service<'_>, rows: &mut [Row]) -> anyhow::Result<()> {
    for (product, probe) in PRODUCTS {
        let stats = service.stats_of(product).await?;
        let field = |name: &str| stats[name].as_i64().unwrap_or_default();
        for row in rows.iter_mut() {
            if matches!(row.scenario.key, Key::Stall { probe: p, .. } if p == probe) {
                row.sold = field("sold");
                row.remaining = field("remaining");
                row.oversold = field("oversold");
                row.lost_updates = field("lost_updates");
                row.lock_overlaps = field("lock_overlaps");
            }
        }
    }
    Ok(())
}

/// The four loads side by side for the phase's seconds; a row each.
async fn side_by_side(service: &Service<'_>, stopped: bool) -> Vec<Row> {
    let base = service.args.url.trim_end_matches('/');
    let url = |path: &str| format!("{base}{path}");
    let lua = Variant::parse("lua");
    let loads = [
        (
            CONFIRMED,
            lua,
            Load::to(
                vec![
                    url("/deduct_stock/watchdog?product=101&wait_ms=3000"),
                    url("/deduct_stock/lua?product=101"),
                ],
                Method::Post,
            )
            .concurrency(40),
        ),
        (
            OTHER,
            lua,
            Load::post(url("/deduct_stock/lua?product=102")).concurrency(2),
        ),
        (READYZ, None, Load::get(url("/readyz")).concurrency(2)),
        (
            STATS,
            None,
            Load::get(url("/stats?product=101")).concurrency(2),
        ),
    ];
    let control = Control::default();
    let running: Vec<_> = loads
        .into_iter()
        .map(|(probe, variant, load)| {
            let (http, control) = (service.http.clone(), control.clone());
            let load = load.requests(usize::MAX);
            (
                probe,
                variant,
                tokio::spawn(async move { load.run(&http, &control).await }),
            )
        })
        .collect();
    tokio::time::sleep(Duration::from_secs(service.args.phase_seconds)).await;
    control.stop();
    let mut rows = Vec::new();
    for (probe, variant, load) in running {
        let Ok(load) = load.await else { continue };
        let key = Key::Stall { probe, stopped };
        let scenario = Scenario {
            label: key.to_string(),
            key,
            variant,
            baseline: None,
            knobs: String::new(),
            stock: 0,
            shards: 1,
            requests: load.answered() as u64,
            concurrency: 0,
            first: None,
            orders: true,
            products: 1,
        };
        rows.push(Row::from_load(scenario, load));
    }
    rows
}

/// How long until product 101 sells with a 200 again, asked every 20 ms for up to 10 s.
async fn first_confirmed_sale(service: &Service<'_>) -> Option<Duration> {
    let base = service.args.url.trim_end_matches('/');
    let url = format!("{base}/deduct_stock/lua?product=101");
    let started = Instant::now();
    while started.elapsed() < Duration::from_secs(10) {
        if let Ok(answer) = service.http.post(&url).send().await
            && answer.status() == 200
        {
            return Some(started.elapsed());
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    None
}

/// `kill -<signal> <pid>`.
fn signal(pid: u32, signal: &str) -> anyhow::Result<()> {
    let sent = Command::new("kill")
        .args([&format!("-{signal}"), &pid.to_string()])
        .status()
        .context("kill")?;
    if !sent.success() {
        bail!("kill -{signal} {pid} failed");
    }
    Ok(())
}

/// The partial suite: what a stopped replica does to what runs beside the sales it
/// cannot confirm, and what two of five servers down do to Redlock.
fn ratios(rows: &[Row]) -> Vec<Ratio> {
    let stall = |probe, stopped| find(rows, Key::Stall { probe, stopped });
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
    if let (Some(five), Some(three)) =
        (find(rows, Key::RedlockUp(5)), find(rows, Key::RedlockUp(3)))
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
