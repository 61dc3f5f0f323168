//! The verdict on one row: the audit's rules (`seckill-audit`) applied to what the clients
//! saw, purchase by purchase ([`crate::purchase`]), with every purchase whose outcome is
//! unknown counted as a bound — it may have sold, or not — and the per-request rules (a
//! key's two orders, a buyer past the limit, a sale with no order). A rule is broken only
//! when it is broken whatever the unknowns were (FAIL); when it might be, the verdict is
//! inconclusive, never a pass. Each finding names the requests that show it.

use std::collections::{BTreeMap, BTreeSet};

use seckill_audit::{Bounds, Sale};

use crate::purchase::{Outcome, Purchase, purchases, sales};
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

/// What a row comes to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Conclusion {
    /// No rule broken, whatever the unknowns were.
    Pass,
    /// A rule broken, whatever the unknowns were.
    Fail,
    /// No rule broken for certain, but one might be: unknowns could hide it.
    Inconclusive,
}

impl Conclusion {
    pub fn word(self) -> &'static str {
        match self {
            Conclusion::Pass => "pass",
            Conclusion::Fail => "FAIL",
            Conclusion::Inconclusive => "inconclusive",
        }
    }
}

/// What one row's history says.
#[derive(Debug, Clone)]
pub struct Verdict {
    /// Units sold, as the clients were told: a purchase's distinct orders (one when its
    /// answers named none).
    pub sold: i64,
    /// Purchases whose latest answer was sold out, refused, busy.
    pub sold_out: i64,
    pub refused: i64,
    pub busy: i64,
    /// Purchases no answer settled.
    pub unknown: i64,
    pub oversold: Bounds,
    pub lost_updates: Bounds,
    pub unaccounted: Bounds,
    pub undersold: i64,
    pub findings: Vec<Finding>,
}

impl Verdict {
    pub fn conclusion(&self) -> Conclusion {
        let open = [self.oversold, self.lost_updates, self.unaccounted];
        if !self.findings.is_empty() {
            Conclusion::Fail
        } else if open.iter().any(|b| b.most > 0) {
            Conclusion::Inconclusive
        } else {
            Conclusion::Pass
        }
    }

    pub fn passed(&self) -> bool {
        self.conclusion() == Conclusion::Pass
    }
}

pub fn judge(row: &Row) -> Verdict {
    let purchases = purchases(&row.ops);
    let ended = |m: Meaning| {
        let ended_so = |p: &&Purchase| p.outcome == Outcome::NotSold(m);
        purchases.iter().filter(ended_so).count() as i64
    };
    let sales = sales(&purchases);
    let unknown = purchases.iter().filter(|p| p.is_unknown()).count() as i64;
    let (sold_out, refused, busy) = (
        ended(Meaning::SoldOut),
        ended(Meaning::Refused),
        ended(Meaning::Busy),
    );
    // A busy answer leaves a unit unsold only when the buyers wanted them all: with fewer
    // purchases than units, units are left whatever the service does.
    let wanted = purchases.len() as i64 - refused;
    let busy_counts = if wanted >= row.initial { busy } else { 0 };
    let sale = Sale {
        initial: row.initial,
        held: sales.len() as i64,
        remaining: row.left,
        turned_away: sold_out + busy_counts,
    };
    let mut verdict = Verdict {
        sold: sale.held,
        sold_out,
        refused,
        busy,
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
                "{} units left while {} purchases were told sold out or busy",
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
    let mut findings = Vec::new();
    if !missing.is_empty() {
        findings.push(Finding {
            rule: "missing orders",
            what: format!(
                "{} acknowledged sales have no order of record",
                missing.len()
            ),
            requests: missing.into_iter().take(SHOWN).collect(),
        });
    }
    // Where the file says a sale names its order, one that does not is a sale of record
    // nobody can look up.
    let unnamed: Vec<usize> = (0..row.ops.len())
        .filter(|&i| row.ops[i].meaning == Meaning::Sold && row.ops[i].order.is_none())
        .collect();
    if row.names_orders && !unnamed.is_empty() {
        findings.push(Finding {
            rule: "sale names no order",
            what: format!(
                "{} answers said sold and named no order at buy.order",
                unnamed.len()
            ),
            requests: unnamed.into_iter().take(SHOWN).collect(),
        });
    }
    findings
}
