//! From the measured rows to the figures: each row's medians over the rounds, each scaling
//! comparison beside the model's, and the plans for the chapter's sales.

use seckill::variants::Variant;
use serde::Serialize;

use super::model::{self, Layout};
use super::plan::{self, Plan, RATES, Split};
use super::{
    Measured, NO_DATABASE, ONE_INSTANCE, ONE_MASTER, PRODUCTS, THREE_MASTERS, TWO_INSTANCES,
};
use crate::args::BenchArgs;
use crate::parts_cpu::{PerPart, Spent, median};
use crate::ratio::Ratio;
use crate::scenario::{Key, variant};

/// A row of the suite over its rounds: medians.
#[derive(Debug, Clone, Serialize)]
pub struct Summary {
    pub label: String,
    pub variant: Variant,
    pub shards: u32,
    pub products: u32,
    pub setup: &'static str,
    /// Units sold a second, the median round, and each round's.
    pub units_per_s: f64,
    pub rounds: Vec<f64>,
    /// CPU µs per unit sold, by part, during the load.
    pub costs: PerPart,
    /// PostgreSQL's µs per unit outside the load: the drain after it until the orders
    /// were in, and the reset before it (which deletes the product's last orders).
    pub postgres_after: Option<f64>,
    /// Cores the machine spent on processes that are no part of the sale, and left idle.
    pub others_cores: f64,
    pub idle_cores: f64,
    /// The real work inside the lock, µs (the lock variants).
    pub work_us: Option<f64>,
    /// Orders not yet in PostgreSQL when the load ended (the largest of the rounds).
    pub backlog_at_end: Option<i64>,
}

/// A setup as the model sees it, and what it predicts there against what was measured.
#[derive(Debug, Clone, Serialize)]
pub struct Prediction {
    pub setup: &'static str,
    pub layout: Layout,
    pub units_per_s: f64,
    pub limit: &'static str,
    pub measured: f64,
    pub error: f64,
}

/// One scaling comparison: the same row on two setups, measured and predicted.
#[derive(Debug, Clone, Serialize)]
pub struct Scaling {
    pub name: String,
    /// The larger setup's units/s over the smaller's, the median of the rounds, and each.
    pub measured: f64,
    pub rounds: Vec<f64>,
    /// The same ratio, predicted from the smaller setup's costs.
    pub model: f64,
    pub base: Prediction,
    pub other: Prediction,
}

/// Everything the suite found.
#[derive(Debug, Clone, Serialize)]
pub struct Figures {
    /// The machine's cores.
    pub cores: f64,
    /// What a lock's hand-off adds to its work, µs: one watchdog lock's time per unit
    /// (1 instance, where the lock is what binds) less the work in it.
    pub handoff_us: f64,
    pub rows: Vec<Summary>,
    pub scalings: Vec<Scaling>,
    /// What streaming the orders into PostgreSQL adds to each part, per unit (`lua`).
    pub orders: Option<PerPart>,
    pub plans: Vec<Plan>,
}

/// What a row is, over its rounds: variant, shards, products and setup.
type Which = (Variant, u32, u32, &'static str);

/// A scaling comparison: its name; the row's variant, shards and products; its smaller
/// and larger setups.
type Comparison = (String, (Variant, u32, u32), [&'static str; 2]);

fn which(key: Key) -> Option<Which> {
    match key {
        Key::Capacity {
            variant,
            shards,
            products,
            setup,
            ..
        } => Some((variant, shards, products, setup)),
        _ => None,
    }
}

/// The rounds of one row, in round order.
fn rounds_of(measured: &[Measured], row: Which) -> Vec<&Measured> {
    measured
        .iter()
        .filter(|m| which(m.row.scenario.key) == Some(row))
        .collect()
}

fn summary(rounds: &[&Measured]) -> Option<Summary> {
    let first = rounds.first()?;
    let (variant, shards, products, setup) = which(first.row.scenario.key)?;
    let during: Vec<(&Spent, f64)> = rounds
        .iter()
        .filter(|m| m.row.sold > 0)
        .filter_map(|m| Some((m.row.parts_cpu.as_ref()?, 1e6 / m.row.sold as f64)))
        .collect();
    let costs: Vec<PerPart> = during.iter().map(|(s, per)| s.parts.scaled(*per)).collect();
    let per_wall =
        |f: fn(&Spent) -> f64| median(during.iter().map(|(s, _)| f(s) / s.wall).collect());
    let after: Vec<f64> = rounds
        .iter()
        .filter(|m| m.row.sold > 0)
        .filter_map(|m| {
            let (whole, load) = (m.whole.parts.postgres?, m.row.parts_cpu?.parts.postgres?);
            Some((whole - load).max(0.0) * 1e6 / m.row.sold as f64)
        })
        .collect();
    let goodputs: Vec<f64> = rounds.iter().map(|m| m.row.goodput).collect();
    let works: Vec<f64> = rounds.iter().filter_map(|m| m.row.work_mean_ms).collect();
    Some(Summary {
        label: first.row.scenario.label.clone(),
        variant,
        shards,
        products,
        setup,
        units_per_s: median(goodputs.clone()),
        rounds: goodputs,
        costs: PerPart::median(&costs),
        postgres_after: (!after.is_empty()).then(|| median(after)),
        others_cores: per_wall(|s| s.others),
        idle_cores: per_wall(|s| s.idle),
        work_us: (!works.is_empty()).then(|| median(works) * 1000.0),
        backlog_at_end: rounds
            .iter()
            .filter_map(|m| Some(m.row.drain.as_ref()?.backlog_at_end))
            .max(),
    })
}

/// The model's layout of `setup` for `row` on this machine of `cores`: every part on them,
/// less what other processes took while the smaller setup ran (`others`); a lock variant's
/// unit holds a lock `hold_us`.
fn layout(cores: f64, others: f64, row: Which, hold_us: Option<f64>) -> Layout {
    let (variant, shards, products, setup) = row;
    let masters = if setup == THREE_MASTERS { 3 } else { 1 };
    // A hot product is one slot; shards are placed evenly (at most ⌈S/M⌉ on a master);
    // products are assumed to spread evenly by their hash slots.
    let busiest_master_share = match (shards, products) {
        (1, 1) => 1.0,
        (1, products) => 1.0 / f64::from(masters.min(products)),
        (shards, _) => f64::from(shards.div_ceil(masters)) / f64::from(shards),
    };
    let locks = match variant.name() {
        "lua" => None,
        _ => hold_us.map(|hold| (shards, hold)),
    };
    Layout {
        shared_cores: Some((cores - others).max(0.1)),
        instances: if setup == ONE_INSTANCE { 1 } else { 2 },
        cores_per_instance: cores,
        nginx_cores: None,
        busiest_master_share,
        locks,
    }
}

fn predicted(costs: &PerPart, layout: Layout, setup: &'static str, measured: f64) -> Prediction {
    let limits = model::limits(costs, &layout);
    let (units_per_s, limit) = model::predict(&limits)
        .map(|(units, limit)| (units, limit.name))
        .unwrap_or((f64::NAN, "none"));
    Prediction {
        setup,
        layout,
        units_per_s,
        limit,
        measured,
        error: model::error(units_per_s, measured),
    }
}

/// `row` on `base` against `other`: the ratio of each round, and the model's, from the
/// base's costs.
fn scaling(
    (cores, handoff_us): (f64, f64),
    measured: &[Measured],
    name: String,
    row: (Variant, u32, u32),
    [base, other]: [&'static str; 2],
) -> Option<Scaling> {
    let (variant, shards, products) = row;
    let base_rows = rounds_of(measured, (variant, shards, products, base));
    let other_rows = rounds_of(measured, (variant, shards, products, other));
    let each: Vec<f64> = base_rows
        .iter()
        .zip(&other_rows)
        .map(|(b, o)| o.row.goodput / b.row.goodput.max(1e-9))
        .collect();
    let (b, o) = (summary(&base_rows)?, summary(&other_rows)?);
    let at = |setup| (variant, shards, products, setup);
    let hold = b.work_us.map(|work| work + handoff_us);
    let base_layout = layout(cores, b.others_cores, at(base), hold);
    let other_layout = layout(cores, b.others_cores, at(other), hold);
    let base = predicted(&b.costs, base_layout, base, b.units_per_s);
    let other = predicted(&b.costs, other_layout, other, o.units_per_s);
    Some(Scaling {
        name,
        measured: median(each.clone()),
        rounds: each,
        model: other.units_per_s / base.units_per_s,
        base,
        other,
    })
}

/// The scaling comparisons: a name, the row, its smaller and larger setups.
fn comparisons(s: u32) -> [Comparison; 6] {
    let (lua, watchdog, segmented) = (variant("lua"), variant("watchdog"), variant("segmented"));
    let instances = [ONE_INSTANCE, TWO_INSTANCES];
    let masters = [ONE_MASTER, THREE_MASTERS];
    [
        ("instances 1 -> 2, lua".into(), (lua, 1, 1), instances),
        (
            "instances 1 -> 2, watchdog".into(),
            (watchdog, 1, 1),
            instances,
        ),
        (
            format!("instances 1 -> 2, segmented x{s}"),
            (segmented, s, 1),
            instances,
        ),
        (
            format!("masters 1 -> 3, segmented x{s}"),
            (segmented, s, 1),
            masters,
        ),
        (
            format!("masters 1 -> 3, lua over {PRODUCTS} products"),
            (lua, 1, PRODUCTS),
            masters,
        ),
        (
            "masters 1 -> 3, lua on one hot product".into(),
            (lua, 1, 1),
            masters,
        ),
    ]
}

/// The rows' medians, the scalings beside the model's, and the plans.
pub fn analyse(args: &BenchArgs, measured: &[Measured]) -> Figures {
    let cores = std::thread::available_parallelism().map_or(1.0, |n| n.get() as f64);
    let mut order: Vec<Which> = Vec::new();
    for m in measured {
        if let Some(row) = which(m.row.scenario.key)
            && !order.contains(&row)
        {
            order.push(row);
        }
    }
    let rows: Vec<Summary> = order
        .iter()
        .filter_map(|&row| summary(&rounds_of(measured, row)))
        .collect();
    let (lua, watchdog, segmented) = (variant("lua"), variant("watchdog"), variant("segmented"));
    let s = args.shards;
    let find = |row: Which| {
        rows.iter()
            .find(|r| (r.variant, r.shards, r.products, r.setup) == row)
    };
    let handoff_us = find((watchdog, 1, 1, ONE_INSTANCE)).map_or(0.0, handoff);
    let comparisons = comparisons(args.shards);
    let scalings = comparisons
        .into_iter()
        .filter_map(|(name, row, setups)| scaling((cores, handoff_us), measured, name, row, setups))
        .collect();
    let orders = match (
        find((lua, 1, 1, ONE_INSTANCE)),
        find((lua, 1, 1, NO_DATABASE)),
    ) {
        (Some(on), Some(off)) if on.costs.postgres.is_some() => Some(PerPart {
            load: 0.0,
            nginx: 0.0,
            instances: (on.costs.instances - off.costs.instances).max(0.0),
            redis: (on.costs.redis - off.costs.redis).max(0.0),
            // All it takes PostgreSQL, during the load and outside it (the drain; the
            // reset's delete too, which is small beside it).
            postgres: on
                .costs
                .postgres
                .map(|during| during + on.postgres_after.unwrap_or(0.0)),
        }),
        _ => None,
    };
    let plans = plans(
        find((lua, 1, 1, THREE_MASTERS)),
        find((segmented, s, 1, THREE_MASTERS)),
        orders,
        handoff_us,
    );
    Figures {
        cores,
        handoff_us,
        rows,
        scalings,
        orders,
        plans,
    }
}

/// A lock's hand-off, from a row where one lock is what binds: its time per unit less the
/// work done in it.
fn handoff(one_lock: &Summary) -> f64 {
    let hold = 1e6 / one_lock.units_per_s.max(1e-9);
    (hold - one_lock.work_us.unwrap_or(0.0)).max(0.0)
}

/// The chapter's sales, from `lua` on one hot product and `segmented` on the three-master
/// Cluster (as a sale would run: instances in cluster mode), with what the orders add.
fn plans(
    hot: Option<&Summary>,
    split: Option<&Summary>,
    orders: Option<PerPart>,
    handoff_us: f64,
) -> Vec<Plan> {
    let (Some(hot), Some(split)) = (hot, split) else {
        return Vec::new();
    };
    let add = |costs: PerPart| match orders {
        Some(orders) => PerPart {
            instances: costs.instances + orders.instances,
            redis: costs.redis + orders.redis,
            postgres: orders.postgres,
            ..costs
        },
        None => costs,
    };
    let split = Split {
        costs: add(split.costs),
        shards: split.shards,
        hold_us: split.work_us.unwrap_or(0.0) + handoff_us,
    };
    RATES
        .iter()
        .map(|&rate| plan::plan(&add(hot.costs), &split, rate))
        .collect()
}

impl Figures {
    /// The scaling ratios, as the bench reports ratios: measured, beside the model's.
    pub fn ratios(&self) -> Vec<Ratio> {
        self.scalings
            .iter()
            .map(|s| {
                Ratio::new(
                    s.name.clone(),
                    s.measured,
                    None,
                    format!(
                        "units/s {} ({:.0}) / {} ({:.0}), median of rounds {:.2?}; the model's ratio {:.2}, its error {:+.0} % and {:+.0} % (limit: {})",
                        s.other.setup,
                        s.other.measured,
                        s.base.setup,
                        s.base.measured,
                        s.rounds,
                        s.model,
                        s.base.error * 100.0,
                        s.other.error * 100.0,
                        s.other.limit
                    ),
                )
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One master holds everything; on three, a hot product stays on one, six shards put
    /// two on each, eight put three on the busiest, and products spread evenly.
    #[test]
    fn the_busiest_master_share_follows_the_placement() {
        let (lua, segmented) = (variant("lua"), variant("segmented"));
        let share = |row| layout(2.0, 0.0, row, Some(2_000.0)).busiest_master_share;
        assert_eq!(share((lua, 1, 1, ONE_MASTER)), 1.0);
        assert_eq!(share((lua, 1, 1, THREE_MASTERS)), 1.0);
        assert_eq!(share((segmented, 6, 1, THREE_MASTERS)), 1.0 / 3.0);
        assert_eq!(share((segmented, 8, 1, THREE_MASTERS)), 3.0 / 8.0);
        assert_eq!(share((lua, 1, 64, THREE_MASTERS)), 1.0 / 3.0);
        let watchdog = layout(
            2.0,
            0.5,
            (variant("watchdog"), 1, 1, ONE_INSTANCE),
            Some(2e3),
        );
        assert_eq!(watchdog.locks, Some((1, 2_000.0)));
        assert_eq!(watchdog.shared_cores, Some(1.5));
    }
}
