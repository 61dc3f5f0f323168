//! The stores suite: Redis against ZooKeeper, as the seeds compare them — the same lock
//! (200 waiters, one product) kept in the stock Redis (watchdog), on five Redis servers of
//! its own (redlock) and on a ZooKeeper ensemble (zookeeper), with no work and with
//! `--work-ms`.

use super::row;
use crate::args::BenchArgs;
use crate::ratio::Ratio;
use crate::row::Row;
use crate::scenario::Key;
use crate::scenario::variant;

fn at(rows: &[Row], name: &str, work_ms: u64) -> Option<Row> {
    let key = Key::Waiters {
        variant: variant(name),
        shards: 1,
        work_ms,
        extra: "",
    };
    row(rows, key).cloned()
}

pub(super) fn ratios(args: &BenchArgs, rows: &[Row]) -> Vec<Ratio> {
    let mut ratios = Vec::new();
    for work_ms in [0, args.work_ms] {
        let (Some(watchdog), Some(zookeeper)) = (
            at(rows, "watchdog", work_ms),
            at(rows, "zookeeper", work_ms),
        ) else {
            continue;
        };
        let value = zookeeper.goodput / watchdog.goodput;
        // The seeds' claim, held as a target: Redis is faster.
        ratios.push(Ratio::new(
            format!("zookeeper / watchdog units/s, work {work_ms}"),
            value,
            Some(("< 1.0 (the seeds: Redis is faster)", value < 1.0)),
            format!(
                "{:.0} / {:.0} units/s at 200 waiters; p99 {:.0} / {:.0} ms",
                zookeeper.goodput, watchdog.goodput, zookeeper.p99_ms, watchdog.p99_ms
            ),
        ));
        let mut contenders = vec![watchdog, zookeeper];
        contenders.extend(at(rows, "redlock", work_ms));
        for row in &contenders {
            let Some(cpu) = row.lock_store_cpu_us_per_unit else {
                continue;
            };
            ratios.push(Ratio::new(
                format!("lock store cpu us/unit, {}", row.scenario.label),
                cpu,
                None,
                format!(
                    "{:.0} units/s, p99 {:.0} ms, {} overlaps, {} oversold",
                    row.goodput, row.p99_ms, row.lock_overlaps, row.oversold
                ),
            ));
        }
        if let Some(redlock) = contenders.get(2) {
            let value = contenders[1].goodput / redlock.goodput;
            ratios.push(Ratio::new(
                format!("zookeeper / redlock units/s, work {work_ms}"),
                value,
                None,
                format!(
                    "{:.0} / {:.0} units/s",
                    contenders[1].goodput, redlock.goodput
                ),
            ));
        }
    }
    ratios
}
