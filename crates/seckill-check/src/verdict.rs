//! The verdict on one row: the audit's rules (`seckill-audit`) applied to what the clients
//! saw, with every unknown answer counted as a bound — it may have sold, or not — and the
//! per-request rules (a key's two orders, a buyer past the limit, a sale with no order).
//! A rule is broken only when it is broken whatever the unknown answers were; each finding
//! names the requests that show it.

use std::collections::{BTreeMap, BTreeSet};

use seckill_audit::{Bounds, Sale};

use crate::run::{Op, Row};
use crate::target::Meaning;

/// How many requests a finding names.
const SHOWN: usize = 10;

/// A rule broken, and the requests (indices into [`Row::ops`]) that show it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Finding {
    pub rule: &'static str,
    pub what: String,
    pub requests: Vec<usize>,
}

/// What one row's history says.
#[derive(Debug, Clone)]
pub struct Verdict {
    /// Units sold, as the clients were told: distinct orders (or keys, or requests).
    pub sold: i64,
    pub sold_out: i64,
    pub refused: i64,
    pub busy: i64,
    pub unknown: i64,
    pub oversold: Bounds,
    pub lost_updates: Bounds,
    pub unaccounted: Bounds,
    pub undersold: i64,
    pub findings: Vec<Finding>,
}

impl Verdict {
    pub fn passed(&self) -> bool {
        self.findings.is_empty()
    }
}

/// The sales the clients were told of, one per unit: a sale's order when it names one,
/// else its key, else the request; a resend answered with an earlier sale is the same unit.
pub fn sales(ops: &[Op]) -> Vec<usize> {
    let mut seen = BTreeSet::new();
    let mut first = Vec::new();
    for (i, op) in ops.iter().enumerate() {
        if op.meaning != Meaning::Sold {
            continue;
        }
        let unit = match (&op.order, &op.key) {
            (Some(order), _) => format!("order {order}"),
            (None, Some(key)) => format!("key {key}"),
            (None, None) => format!("request {i}"),
        };
        if seen.insert(unit) {
            first.push(i);
        }
    }
    first
}

pub fn judge(row: &Row) -> Verdict {
    let count = |m: Meaning| row.ops.iter().filter(|op| op.meaning == m).count() as i64;
    let sales = sales(&row.ops);
    let unknown = count(Meaning::Unknown);
    let sale = Sale {
        initial: row.initial,
        held: sales.len() as i64,
        remaining: row.left,
        turned_away: count(Meaning::SoldOut) + count(Meaning::Busy),
    };
    let mut verdict = Verdict {
        sold: sale.held,
        sold_out: count(Meaning::SoldOut),
        refused: count(Meaning::Refused),
        busy: count(Meaning::Busy),
        unknown,
        oversold: Bounds::of(sale, unknown, Sale::oversold),
        lost_updates: Bounds::of(sale, unknown, Sale::lost_updates),
        unaccounted: Bounds::of(sale, unknown, Sale::unaccounted),
        undersold: sale.undersold(),
        findings: Vec::new(),
    };
    stock_rules(row, &sales, &mut verdict);
    verdict.findings.extend(keys_with_two_orders(&row.ops));
    verdict.findings.extend(past_the_limit(row, &sales));
    verdict.findings.extend(missing_orders(row, &sales));
    for (name, value) in &row.own {
        if *value != 0 {
            verdict.findings.push(Finding {
                rule: "own audit",
                what: format!("the service's own {name} reads {value}"),
                requests: Vec::new(),
            });
        }
    }
    verdict
}

/// Oversold, lost updates, units taken unsold, undersold: the counts' rules.
fn stock_rules(row: &Row, sales: &[usize], verdict: &mut Verdict) {
    let by_done = |mut list: Vec<usize>| {
        list.sort_by_key(|&i| row.ops[i].done);
        list
    };
    if verdict.oversold.certain() || row.left < 0 {
        let past: Vec<usize> = by_done(sales.to_vec())
            .into_iter()
            .skip(row.initial.max(0) as usize)
            .collect();
        verdict.findings.push(Finding {
            rule: "oversold",
            what: format!(
                "{} units sold of {} (oversold {}), stock left {}",
                verdict.sold, row.initial, verdict.oversold, row.left
            ),
            requests: past.into_iter().take(SHOWN).collect(),
        });
    }
    if verdict.lost_updates.certain() {
        verdict.findings.push(Finding {
            rule: "lost updates",
            what: format!(
                "{} sales acknowledged but only {} units left the stock: {} updates lost",
                verdict.sold,
                row.initial - row.left,
                verdict.lost_updates
            ),
            requests: overlapping(row, sales),
        });
    }
    if verdict.unaccounted.certain() {
        verdict.findings.push(Finding {
            rule: "unaccounted",
            what: format!(
                "{} units left the stock, {} sales at most: {} taken and never sold",
                row.initial - row.left,
                verdict.sold + verdict.unknown,
                verdict.unaccounted
            ),
            requests: Vec::new(),
        });
    }
    if verdict.undersold > 0 {
        let refused = row.ops.iter().enumerate();
        let refused =
            refused.filter(|(_, op)| matches!(op.meaning, Meaning::SoldOut | Meaning::Busy));
        verdict.findings.push(Finding {
            rule: "undersold",
            what: format!(
                "{} units left while {} buyers were told sold out or busy",
                row.left,
                verdict.sold_out + verdict.busy
            ),
            requests: by_done(refused.map(|(i, _)| i).collect())
                .into_iter()
                .rev()
                .take(SHOWN)
                .collect(),
        });
    }
}

/// Acknowledged sales that ran at the same time as another: where an update can be lost.
fn overlapping(row: &Row, sales: &[usize]) -> Vec<usize> {
    let mut by_sent: Vec<usize> = sales.to_vec();
    by_sent.sort_by_key(|&i| row.ops[i].sent);
    let mut shown = Vec::new();
    for pair in by_sent.windows(2) {
        let (a, b) = (&row.ops[pair[0]], &row.ops[pair[1]]);
        if b.sent < a.done {
            for i in pair {
                if !shown.contains(i) && shown.len() < SHOWN {
                    shown.push(*i);
                }
            }
        }
    }
    shown
}

/// Keys whose sales named two different orders: one finding for all of them.
fn keys_with_two_orders(ops: &[Op]) -> Vec<Finding> {
    let mut by_key: BTreeMap<&str, (BTreeSet<&str>, Vec<usize>)> = BTreeMap::new();
    for (i, op) in ops.iter().enumerate() {
        if let (Meaning::Sold, Some(key), Some(order)) = (op.meaning, &op.key, &op.order) {
            let entry = by_key.entry(key).or_default();
            entry.0.insert(order);
            entry.1.push(i);
        }
    }
    let twice: Vec<_> = by_key
        .into_values()
        .filter(|(orders, _)| orders.len() > 1)
        .collect();
    if twice.is_empty() {
        return Vec::new();
    }
    vec![Finding {
        rule: "two orders for a key",
        what: format!(
            "{} keys each answered more than one order (a resend sold again)",
            twice.len()
        ),
        requests: twice.into_iter().flat_map(|(_, r)| r).take(SHOWN).collect(),
    }]
}

/// Buyers told they bought more units than the limit: one finding for all of them.
fn past_the_limit(row: &Row, sales: &[usize]) -> Vec<Finding> {
    if row.limit <= 0 {
        return Vec::new();
    }
    let mut by_buyer: BTreeMap<usize, Vec<usize>> = BTreeMap::new();
    for &i in sales {
        by_buyer.entry(row.ops[i].buyer).or_default().push(i);
    }
    let past: Vec<Vec<usize>> = by_buyer
        .into_values()
        .filter(|bought| bought.len() as i64 > row.limit)
        .collect();
    if past.is_empty() {
        return Vec::new();
    }
    let most = past.iter().map(Vec::len).max().unwrap_or(0);
    vec![Finding {
        rule: "past the limit",
        what: format!(
            "{} buyers bought more than the limit of {} (one bought {most})",
            past.len(),
            row.limit
        ),
        requests: past.into_iter().flatten().take(SHOWN).collect(),
    }]
}

/// Acknowledged sales whose order the service's look-up says is not there.
fn missing_orders(row: &Row, sales: &[usize]) -> Vec<Finding> {
    let missing: Vec<usize> = sales
        .iter()
        .copied()
        .filter(|&i| {
            let order = row.ops[i].order.as_ref();
            order.is_some_and(|o| row.lookups.get(o) == Some(&false))
        })
        .collect();
    if missing.is_empty() {
        return Vec::new();
    }
    vec![Finding {
        rule: "missing orders",
        what: format!(
            "{} acknowledged sales have no order of record",
            missing.len()
        ),
        requests: missing.into_iter().take(SHOWN).collect(),
    }]
}
