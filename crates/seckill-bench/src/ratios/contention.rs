//! The contention suite's ratios: seed 000's rule that an optimistic lock pays below about
//! 20 % conflict probability, measured — at each step, optimistic's goodput against the
//! watchdog lock's and lua's, with its conflict rate and the units it left unsold; then
//! the highest conflict rate at which it still serves its buyers, and what it sells below
//! 20 %.

use super::{median, row};
use crate::ratio::Ratio;
use crate::row::Row;
use crate::scenario::Key;
use crate::scenario::variant;
use crate::suites::PRODUCT_CURVE;

/// The conflict rate of a row's optimistic transactions (0 without any).
fn conflict_rate(row: &Row) -> f64 {
    row.stats["optimistic"]["conflict_rate"]
        .as_f64()
        .unwrap_or(0.0)
}

fn count(row: &Row, path: &[&str]) -> i64 {
    let mut value = &row.stats;
    for field in path {
        value = &value[*field];
    }
    value.as_i64().unwrap_or(0)
}

pub(super) fn ratios(rows: &[Row]) -> Vec<Ratio> {
    let at = |name: &str, products| {
        row(
            rows,
            Key::Contention {
                variant: variant(name),
                products,
            },
        )
    };
    let mut ratios = Vec::new();
    let mut steps = Vec::new();
    for products in PRODUCT_CURVE {
        let (Some(optimistic), Some(watchdog)) =
            (at("optimistic", products), at("watchdog", products))
        else {
            continue;
        };
        let lua =
            at("lua", products).map_or(String::new(), |lua| format!(", lua {:.0}", lua.goodput));
        let pg_version = at("pg_version", products).map_or(String::new(), |pg| {
            format!(
                "; pg_version {:.0} units/s at {:.1} % conflicts",
                pg.goodput,
                conflict_rate(pg) * 100.0
            )
        });
        let rate = conflict_rate(optimistic);
        ratios.push(Ratio::new(
            format!("contention over {products} product(s): optimistic / watchdog goodput"),
            optimistic.goodput / watchdog.goodput,
            None,
            format!(
                "conflict rate {:.1} %; optimistic {:.0} units/s, {} turned away (429), {} \
                 undersold; watchdog {:.0}{lua}{pg_version}",
                rate * 100.0,
                optimistic.goodput,
                count(optimistic, &["optimistic", "conflict"]),
                count(optimistic, &["undersold"]),
                watchdog.goodput,
            ),
        ));
        steps.push((
            products,
            rate,
            count(optimistic, &["undersold"]),
            optimistic.goodput / watchdog.goodput,
            i64::try_from(optimistic.scenario.requests).unwrap_or(i64::MAX),
        ));
    }
    ratios.extend(summary(&steps));
    ratios
}

/// One step of the curve: products, optimistic's conflict rate, the units it left unsold,
/// its goodput over watchdog's, its requests.
type Step = (u32, f64, i64, f64, i64);

/// Where optimistic stops paying: the highest conflict rate at which it still served its
/// buyers (against the lowest at which it turned them away), and its goodput against
/// watchdog's where fewer than the seed's 20 % of tries conflict.
fn summary(steps: &[Step]) -> Vec<Ratio> {
    let mut ratios = Vec::new();
    // Turned away: more than one buyer in a thousand left without the unit they could
    // have had (a single unlucky buyer is noise at these counts).
    let turns_away = |(_, _, undersold, _, requests): &&Step| *undersold * 1_000 > *requests;
    let serves_all = steps
        .iter()
        .filter(|step| !turns_away(step))
        .max_by(|a, b| a.1.total_cmp(&b.1));
    let above = steps
        .iter()
        .filter(turns_away)
        .min_by(|a, b| a.1.total_cmp(&b.1));
    if let Some(&(products, rate, undersold, _, _)) = serves_all {
        let above = above.map_or("it never did on this curve".into(), |s| {
            format!(
                "at {:.1} % ({} products) {} were turned away",
                s.1 * 100.0,
                s.0,
                s.2
            )
        });
        ratios.push(Ratio::new(
            "optimistic serves its buyers up to conflict rate".into(),
            rate,
            None,
            format!(
                "at {:.1} % ({products} products) it turned away {undersold} (at most one \
                 buyer in a thousand); {above}; seed 000: prefer optimistic below about 0.20",
                rate * 100.0
            ),
        ));
    }
    let low: Vec<f64> = steps
        .iter()
        .filter(|(_, rate, _, _, _)| *rate < 0.2)
        .map(|(_, _, _, ratio, _)| *ratio)
        .collect();
    if !low.is_empty() {
        ratios.push(Ratio::new(
            "optimistic / watchdog goodput below 20 % conflicts".into(),
            median(low.clone()),
            None,
            format!(
                "median of {} step(s): both take two round trips per unit here (the \
                 watchdog lock is fused into its enter and commit scripts), so below the \
                 seed's 20 % the optimistic lock saves no trip, it only never waits",
                low.len()
            ),
        ));
    }
    ratios
}
