//! One row of the comparison: what came of a scenario.

use std::collections::BTreeMap;

use serde::Serialize;
use serde_json::Value;

use crate::scenario::Scenario;

/// One row of the comparison: what came of a scenario.
#[derive(Debug, Clone, Serialize)]
pub struct Row {
    #[serde(flatten)]
    pub scenario: Scenario,
    pub statuses: BTreeMap<u16, usize>,
    pub transport_errors: usize,
    pub sold: i64,
    pub remaining: i64,
    pub oversold: i64,
    pub lost_updates: i64,
    pub lock_overlaps: i64,
    pub lock_lost: i64,
    pub elapsed_s: f64,
    /// Answers per second, whatever they said.
    pub throughput: f64,
    /// Time from the first request to the last 200, when the stock ran out.
    pub sell_out_s: Option<f64>,
    /// Units that really left the stock, per second (orders beyond them are oversell).
    pub goodput: f64,
    pub p50_ms: f64,
    pub p99_ms: f64,
    /// The slowest answer.
    pub max_ms: f64,
    /// The real time spent in the work inside the lock, mean and p99, as the 200s
    /// reported it (`work_ms` is what was asked for).
    pub work_mean_ms: Option<f64>,
    pub work_p99_ms: Option<f64>,
    /// Redis commands per unit sold, as Redis's INFO counts them (calls inside scripts too).
    pub redis_commands_per_unit: Option<f64>,
    /// Redis CPU time (user + sys) per unit sold, in microseconds, over every master.
    pub redis_cpu_us_per_unit: Option<f64>,
    /// The watchdog locks' tries (lock scripts sent by acquires) and wake-ups per unit
    /// sold, every instance's (`seckill_lock_tries_total`, `seckill_lock_wakeups_total`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub lock_tries_per_unit: Option<(f64, f64)>,
    /// Lock scripts acquires sent with no reason to (beyond one, one per wake-up and one
    /// per nap that ran out), every instance's (`seckill_lock_tries_without_reason_total`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub lock_tries_without_reason: Option<u64>,
    /// The most lock scripts one acquire sent, over the instances, since they started
    /// (`seckill_lock_most_tries`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub lock_most_tries: Option<u64>,
    /// The same, master by master (`host:port`), when the store has more than one.
    pub redis_cpu_us_per_unit_by_master: Vec<(String, f64)>,
    /// The stores suite: the CPU time (user + sys) the lock's own servers spent per unit
    /// sold, in microseconds (the ensemble, Redlock's servers; for a lock in the stock
    /// store, its CPU per unit).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub lock_store_cpu_us_per_unit: Option<f64>,
    /// What each part spent on the load, from `/proc` (the capacity suite, which knows the
    /// parts' processes).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub parts_cpu: Option<crate::parts_cpu::Spent>,
    /// The orders suite, a row whose orders went to the database: how they drained.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub drain: Option<Drain>,
    /// `/stats` after the load, as the service returned it (null for a baseline).
    pub stats: Value,
}

/// How a row's orders reached the database.
#[derive(Debug, Clone, Serialize)]
pub struct Drain {
    /// Stream entries not yet in the database when the load ended.
    pub backlog_at_end: i64,
    /// From the load's end until every order was in the database (backlog 0, drift 0).
    pub drained_after_s: f64,
    /// Orders into the database per second, over the load and that tail.
    pub orders_per_s: f64,
}

impl Row {
    /// A row of what the clients saw alone: no stock, no audit, no Redis counters (a
    /// baseline, or a probe beside another load).
    pub fn from_load(scenario: Scenario, load: seckill_load::Report) -> Self {
        let ok = load.count(200) as f64;
        Self {
            throughput: load.throughput(),
            elapsed_s: load.elapsed.as_secs_f64(),
            p50_ms: load.percentile_ms(0.50),
            p99_ms: load.percentile_ms(0.99),
            max_ms: load.percentile_ms(1.0),
            work_mean_ms: None,
            work_p99_ms: None,
            goodput: if scenario.variant.is_some() {
                ok / load.elapsed.as_secs_f64().max(1e-9)
            } else {
                0.0
            },
            statuses: load.statuses,
            transport_errors: load.transport_errors,
            sold: 0,
            remaining: 0,
            oversold: 0,
            lost_updates: 0,
            lock_overlaps: 0,
            lock_lost: 0,
            sell_out_s: None,
            redis_commands_per_unit: None,
            redis_cpu_us_per_unit: None,
            lock_tries_per_unit: None,
            lock_tries_without_reason: None,
            lock_most_tries: None,
            redis_cpu_us_per_unit_by_master: Vec::new(),
            lock_store_cpu_us_per_unit: None,
            parts_cpu: None,
            drain: None,
            stats: Value::Null,
            scenario,
        }
    }

    pub fn count(&self, status: u16) -> usize {
        self.statuses.get(&status).copied().unwrap_or(0)
    }

    pub fn server_errors(&self) -> usize {
        self.statuses
            .iter()
            .filter(|(status, _)| **status >= 500)
            .map(|(_, n)| n)
            .sum()
    }
}

/// The row of `rows` measured for `key` (rows are found by their key, never their label).
pub fn find(rows: &[Row], key: crate::scenario::Key) -> Option<&Row> {
    rows.iter().find(|r| r.scenario.key == key)
}
