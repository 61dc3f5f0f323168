//! The orders suite's ratios: what streaming the orders into PostgreSQL costs each variant,
//! and whether the consumers keep up with lua's sales.

use super::{median, row};
use crate::args::BenchArgs;
use crate::ratio::Ratio;
use crate::row::{Drain, Row};
use crate::scenario::Key;
use crate::scenario::variant;

/// Orders of record: each variant's units/s with its orders streamed into the database
/// over the same without, round by round (the median); what the stream adds in Redis
/// commands and CPU per unit; and whether the consumers keep up with lua's sales.
pub(super) fn ratios(args: &BenchArgs, rows: &[Row]) -> Vec<Ratio> {
    let mut ratios = Vec::new();
    for (name, target) in [("lua", Some(0.9)), ("watchdog", None)] {
        let variant = variant(name);
        let pair = |round| {
            let on = row(
                rows,
                Key::Orders {
                    variant,
                    on: true,
                    round,
                },
            )?;
            let off = row(
                rows,
                Key::Orders {
                    variant,
                    on: false,
                    round,
                },
            )?;
            Some((on, off))
        };
        let pairs: Vec<(&Row, &Row)> = (0..args.rounds).filter_map(pair).collect();
        if pairs.is_empty() {
            continue;
        }
        let each: Vec<f64> = pairs
            .iter()
            .map(|(on, off)| on.goodput / off.goodput)
            .collect();
        let value = median(each.clone());
        let per_unit = |f: fn(&Row) -> Option<f64>, on: bool| {
            median(
                pairs
                    .iter()
                    .filter_map(|(a, b)| f(if on { a } else { b }))
                    .collect(),
            )
        };
        let goodput = |on: bool| {
            median(
                pairs
                    .iter()
                    .map(|(a, b)| if on { a.goodput } else { b.goodput })
                    .collect(),
            )
        };
        ratios.push(Ratio::new(
            format!("orders of record cost, {name}"),
            value,
            target.map(|t| (">= 0.9", value >= t)),
            format!(
                "units/s with the orders streamed into PostgreSQL ({:.0}) / kept in Redis only ({:.0}), median of rounds {each:.2?}; Redis cmds/unit {:.1} / {:.1}, cpu us/unit {:.1} / {:.1}",
                goodput(true),
                goodput(false),
                per_unit(|r| r.redis_commands_per_unit, true),
                per_unit(|r| r.redis_commands_per_unit, false),
                per_unit(|r| r.redis_cpu_us_per_unit, true),
                per_unit(|r| r.redis_cpu_us_per_unit, false),
            ),
        ));
        if name != "lua" {
            continue;
        }
        let drains: Vec<(&Row, &Drain)> = pairs
            .iter()
            .filter_map(|(on, _)| Some((*on, on.drain.as_ref()?)))
            .collect();
        if drains.is_empty() {
            continue;
        }
        let each: Vec<f64> = drains
            .iter()
            .map(|(row, drain)| drain.orders_per_s / row.goodput.max(1e-9))
            .collect();
        let value = median(each.clone());
        let worst_backlog = drains
            .iter()
            .map(|(_, d)| d.backlog_at_end)
            .max()
            .unwrap_or(0);
        let worst_tail = drains
            .iter()
            .map(|(_, d)| d.drained_after_s)
            .fold(0.0, f64::max);
        ratios.push(Ratio::new(
            "orders drain, lua".into(),
            value,
            Some((">= 0.9", value >= 0.9)),
            format!(
                "orders into PostgreSQL per second ({:.0}, from the first sale until the last order was in) / lua's units/s ({:.0}), median of rounds {each:.2?}; backlog when the load ended at most {worst_backlog}, drained {worst_tail:.2} s after",
                median(drains.iter().map(|(_, d)| d.orders_per_s).collect()),
                goodput(true),
            ),
        ));
    }
    ratios
}
