//! What the audit (`/stats`) must say of a sale that went right, said once: nothing
//! oversold, no update lost, no two lock holders inside at once, the stock and the orders
//! adding up, and as many orders as the clients got 200s.
//!
//! Each assertion prints `what` (the variant, the phase) and the whole `/stats` when it
//! fails. A test that expects an overlap or an oversell (the lessons, the faults) says so
//! itself, field by field.

use std::collections::BTreeMap;

use seckill_load::Report;
use serde_json::Value;

use crate::int;

/// Nothing oversold, no update lost, and the stock and the orders add up to `initial`
/// (`sold + remaining`). For a sale where a lock's overlap is beside the point (a lock-free
/// variant, a holder killed inside its critical section); else [`assert_exact`].
pub fn assert_adds_up(stats: &Value, initial: i64, what: &str) {
    assert_eq!(int(stats, "oversold"), 0, "{what}: oversold: {stats}");
    assert_eq!(
        int(stats, "lost_updates"),
        0,
        "{what}: lost updates: {stats}"
    );
    assert_eq!(
        int(stats, "sold") + int(stats, "remaining"),
        initial,
        "{what}: sold + remaining is the initial stock: {stats}"
    );
}

/// The audit is exact: [`assert_adds_up`] to `initial`, and no two holders were ever
/// inside a critical section at once (`lock_overlaps`).
pub fn assert_exact(stats: &Value, initial: i64, what: &str) {
    assert_adds_up(stats, initial, what);
    assert_eq!(
        int(stats, "lock_overlaps"),
        0,
        "{what}: two holders inside at once: {stats}"
    );
}

/// [`assert_exact`], sold out: every one of `stock` units sold, none left.
pub fn assert_sold_out(stats: &Value, stock: i64, what: &str) {
    assert_exact(stats, stock, what);
    assert_eq!(int(stats, "sold"), stock, "{what}: all sold: {stats}");
}

/// Every 200 is one order: `/stats` counts as many units sold as `report` has 200s.
pub fn assert_every_200_an_order(report: &Report, stats: &Value, what: &str) {
    assert_eq!(
        int(stats, "sold") as usize,
        report.count(200),
        "{what}: one order per 200 ({:?}): {stats}",
        report.statuses
    );
}

/// Every order a 200 named (a load [`keeping_orders`](seckill_load::Load::keeping_orders))
/// is among the orders `recorded` in the store: no acknowledged sale lost.
pub fn assert_orders_recorded(report: &Report, recorded: &BTreeMap<String, String>, what: &str) {
    let missing: Vec<&String> = report
        .orders
        .iter()
        .filter(|order| !recorded.contains_key(*order))
        .collect();
    assert!(
        missing.is_empty(),
        "{what}: {} of {} orders answered 200 are not recorded, e.g. {:?}",
        missing.len(),
        report.orders.len(),
        missing.first()
    );
}
