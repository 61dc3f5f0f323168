//! The capacity suite's figures as text: the CPU per unit of each part, the scalings beside
//! the model's, and the plans.

use std::fmt::Write as _;

use super::analysis::{Figures, Prediction, Scaling, Summary};
use super::plan::{self, BUSY, CORES_PER_INSTANCE, MIN_INSTANCES, Plan};
use crate::parts_cpu::PerPart;

/// Every section, with the assumptions the model and the plans make.
pub fn render(figures: &Figures) -> String {
    let mut out = String::new();
    costs(&mut out, figures);
    model(&mut out, figures);
    if !figures.plans.is_empty() {
        plans(&mut out, &figures.plans);
    }
    out
}

/// A table (`seckill_load::table`): the first column and those in `left` left-aligned.
fn table(out: &mut String, header: &[&str], rows: &[Vec<String>], left: &[usize]) {
    out.push_str(&seckill_load::table(header, rows, left));
}

fn cost_cells(costs: &PerPart) -> Vec<String> {
    let us = |v: f64| format!("{v:.1}");
    vec![
        us(costs.load),
        us(costs.nginx),
        us(costs.instances),
        us(costs.redis),
        costs.postgres.map_or("-".into(), us),
        us(costs.total()),
    ]
}

fn costs(out: &mut String, figures: &Figures) {
    let _ = writeln!(
        out,
        "\ncapacity: CPU per unit sold, µs, by part (/proc utime+stime; median of the rounds), on {} cores",
        figures.cores
    );
    let rows: Vec<Vec<String>> = figures
        .rows
        .iter()
        .map(|row: &Summary| {
            let mut cells = vec![row.label.clone(), format!("{:.0}", row.units_per_s)];
            cells.extend(cost_cells(&row.costs));
            cells.push(row.postgres_after.map_or("-".into(), |p| format!("{p:.1}")));
            cells.push(format!("{:.2}", row.others_cores));
            cells.push(format!("{:.2}", row.idle_cores));
            cells.push(row.backlog_at_end.map_or("-".into(), |b| b.to_string()));
            cells
        })
        .collect();
    let header = [
        "row",
        "units/s",
        "load",
        "nginx",
        "instances",
        "redis",
        "postgres",
        "total",
        "postgres after",
        "others cores",
        "idle cores",
        "backlog",
    ];
    table(out, &header, &rows, &[]);
    if let Some(orders) = &figures.orders {
        let _ = writeln!(
            out,
            "the orders streamed into PostgreSQL add, per unit: instances {:.1} µs (the consumer), redis {:.1} µs (the stream), postgres {:.1} µs during the load and after it (lua, against the same with its orders in Redis only)",
            orders.instances,
            orders.redis,
            orders.postgres.unwrap_or(f64::NAN)
        );
    }
}

fn prediction_cells(p: &Prediction) -> [String; 4] {
    [
        format!("{:.0}", p.units_per_s),
        format!("{:.0}", p.measured),
        format!("{:+.0} %", p.error * 100.0),
        p.limit.to_string(),
    ]
}

fn model(out: &mut String, figures: &Figures) {
    let _ = writeln!(
        out,
        "\nmodel: units/s = the least of: the shared cores, (cores - others) x 1e6 / every part's µs; \
         the instances' cores, instances x cores x 1e6 / the instances' µs; the busiest master, 1e6 / (redis µs x its share of the units); \
         the locks, locks x 1e6 / (work + a hand-off of {:.0} µs, from watchdog on 1 instance). \
         Every input is the smaller setup's, the larger one assumed to cost the same per unit.",
        figures.handoff_us
    );
    let mut rows = Vec::new();
    for s in &figures.scalings {
        let Scaling {
            name, base, other, ..
        } = s;
        for (p, ratios) in [(base, None), (other, Some(s))] {
            let mut cells = vec![if ratios.is_some() {
                String::new()
            } else {
                name.clone()
            }];
            cells.push(p.setup.to_string());
            cells.extend(prediction_cells(p));
            cells.push(ratios.map_or(String::new(), |s| {
                format!("{:.2} {:.2?}", s.measured, s.rounds)
            }));
            cells.push(ratios.map_or(String::new(), |s| format!("{:.2}", s.model)));
            rows.push(cells);
        }
    }
    let header = [
        "scaling",
        "setup",
        "model units/s",
        "measured",
        "error",
        "limit",
        "measured ratio",
        "model ratio",
    ];
    table(out, &header, &rows, &[1, 5]);
    let errors: Vec<f64> = figures.scalings.iter().map(|s| s.other.error).collect();
    let (low, high) = errors
        .iter()
        .fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), &e| {
            (lo.min(e), hi.max(e))
        });
    if !errors.is_empty() {
        let _ = writeln!(
            out,
            "the model on the larger setups: from {:+.0} % to {:+.0} % of what was measured",
            low * 100.0,
            high * 100.0
        );
    }
}

fn plans(out: &mut String, plans: &[Plan]) {
    let _ = writeln!(
        out,
        "\nplan, one hot product: every buyer one lua deduction that reaches Redis; each part on its own machines at most {:.0} % busy; \
         instances of {CORES_PER_INSTANCE} cores, at least {MIN_INSTANCES}; a master is one core; a box {} cores",
        BUSY * 100.0,
        plan::BOX_CORES
    );
    let rows: Vec<Vec<String>> = plans
        .iter()
        .map(|p| {
            let split = p.split.map_or("-".into(), |s| {
                format!(
                    "{} shards, {} masters, {} instances",
                    s.shards, s.masters, s.instances
                )
            });
            vec![
                format!("{:.0}", p.buyers_per_s),
                p.instances.to_string(),
                p.nginx_cores.to_string(),
                format!("{:.2}", p.hot_slot_cores),
                split,
                p.postgres_cores.map_or("-".into(), |c| format!("{c:.1}")),
                if p.stops.is_empty() {
                    "nothing".into()
                } else {
                    p.stops.join("; ")
                },
            ]
        })
        .collect();
    let header = [
        "buyers/s",
        "instances",
        "nginx cores",
        "hot slot cores",
        "split (segmented)",
        "postgres cores",
        "what stops",
    ];
    table(out, &header, &rows, &[4, 6]);
}
