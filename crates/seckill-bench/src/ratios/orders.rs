//! The orders suite's ratios: what streaming the orders into PostgreSQL costs each variant,
//! and whether the consumers keep up with lua's sales.

use seckill::variants::Variant;

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
        let pairs = pairs(args, rows, variant(name));
        if pairs.is_empty() {
            continue;
        }
        ratios.push(cost(name, target, &pairs));
        if name == "lua" {
            ratios.extend(drain(&pairs));
        }
    }
    ratios
}

/// A round's two rows of a variant: its orders streamed into the database, and kept in
/// Redis only.
#[derive(Clone, Copy)]
struct Pair<'a> {
    on: &'a Row,
    off: &'a Row,
}

impl<'a> Pair<'a> {
    /// The row with the orders streamed (`on`) or kept in Redis only.
    fn side(self, on: bool) -> &'a Row {
        if on { self.on } else { self.off }
    }
}

/// The variant's pairs, round by round (a round without both rows left out).
fn pairs<'a>(args: &BenchArgs, rows: &'a [Row], variant: Variant) -> Vec<Pair<'a>> {
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
        Some(Pair { on, off })
    };
    (0..args.rounds).filter_map(pair).collect()
}

/// The median over the rounds of the streamed (`on`) or Redis-only rows' units/s.
fn goodput(pairs: &[Pair], on: bool) -> f64 {
    median(pairs.iter().map(|p| p.side(on).goodput).collect())
}

/// The median over the rounds of a per-unit figure of the streamed (`on`) or Redis-only
/// rows, those without it left out.
fn per_unit(pairs: &[Pair], on: bool, figure: fn(&Row) -> Option<f64>) -> f64 {
    median(pairs.iter().filter_map(|p| figure(p.side(on))).collect())
}

/// What streaming the orders costs `name`: its units/s streamed over Redis-only, the
/// median of the rounds, against `target` when it has one.
fn cost(name: &str, target: Option<f64>, pairs: &[Pair]) -> Ratio {
    let each: Vec<f64> = pairs.iter().map(|p| p.on.goodput / p.off.goodput).collect();
    let value = median(each.clone());
    Ratio::new(
        format!("orders of record cost, {name}"),
        value,
        target.map(|t| (">= 0.9", value >= t)),
        format!(
            "units/s with the orders streamed into PostgreSQL ({:.0}) / kept in Redis only ({:.0}), median of rounds {each:.2?}; Redis cmds/unit {:.1} / {:.1}, cpu us/unit {:.1} / {:.1}",
            goodput(pairs, true),
            goodput(pairs, false),
            per_unit(pairs, true, |r| r.redis_commands_per_unit),
            per_unit(pairs, false, |r| r.redis_commands_per_unit),
            per_unit(pairs, true, |r| r.redis_cpu_us_per_unit),
            per_unit(pairs, false, |r| r.redis_cpu_us_per_unit),
        ),
    )
}

/// Whether the consumers keep up: orders into the database per second over the streamed
/// rows' units/s, the median of the rounds; `None` when no row drained.
fn drain(pairs: &[Pair]) -> Option<Ratio> {
    let drains: Vec<(&Row, &Drain)> = pairs
        .iter()
        .filter_map(|p| Some((p.on, p.on.drain.as_ref()?)))
        .collect();
    if drains.is_empty() {
        return None;
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
    Some(Ratio::new(
        "orders drain, lua".into(),
        value,
        Some((">= 0.9", value >= 0.9)),
        format!(
            "orders into PostgreSQL per second ({:.0}, from the first sale until the last order was in) / lua's units/s ({:.0}), median of rounds {each:.2?}; backlog when the load ended at most {worst_backlog}, drained {worst_tail:.2} s after",
            median(drains.iter().map(|(_, d)| d.orders_per_s).collect()),
            goodput(pairs, true),
        ),
    ))
}
