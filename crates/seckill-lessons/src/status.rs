//! What the page shows of a lesson: its [`Status`] (`/admin/lesson`), a row per phase
//! ([`PhaseResult`]), and a front door's side of one ([`DoorResult`]).

use std::collections::BTreeMap;
use std::time::Duration;

use serde::Serialize;

use crate::lesson::{Lesson, Phase};
use crate::service::Audit;

/// What the page shows about the lesson running (or the last one).
#[derive(Debug, Clone, Serialize)]
pub struct Status {
    /// This run of the lesson: behind Nginx, the page asks whichever instance and keeps
    /// the answers of the one running its lesson.
    pub run: String,
    pub lesson: &'static str,
    pub product: String,
    pub running: bool,
    pub cancelled: bool,
    /// Requests answered so far, over all phases.
    pub sent: u64,
    pub total: u64,
    pub phase: usize,
    pub elapsed_ms: u64,
    /// Answers by status code, over all phases so far.
    pub statuses: BTreeMap<u16, usize>,
    pub error: Option<String>,
    /// Each phase run so far: the product's audit at its end, and its load's figures.
    pub results: Vec<PhaseResult>,
}

/// One phase's result, as the page's side by side table shows it: `/stats` at the end of
/// the phase, the units sold per second of its load, and its p99.
#[derive(Debug, Clone, Serialize)]
pub struct PhaseResult {
    pub lesson: &'static str,
    pub phase: &'static str,
    pub variant: &'static str,
    pub sold: i64,
    pub oversold: i64,
    pub lost_updates: i64,
    pub lock_overlaps: i64,
    /// Units sold per second of the load.
    pub goodput: f64,
    pub p99_ms: f64,
    pub requests: usize,
    /// A phase at the front door: what the buyers saw of it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub door: Option<DoorResult>,
}

/// The front door's side of a phase (`door.rs`).
#[derive(Debug, Clone, Default, Serialize)]
pub struct DoorResult {
    /// Share of the units sold that went to the first arrivals (as many as the stock).
    pub first_share: f64,
    /// The most buyers waiting in the room at once.
    pub queue: usize,
    /// Buyers let in a second.
    pub admitted_per_s: f64,
    /// Buyers told the product was sold out.
    pub told_sold_out: usize,
    /// 409s answered from a sold-out flag.
    pub flagged: i64,
    /// Units left while buyers were turned away (`/stats`' `undersold`).
    pub undersold: i64,
    pub remaining: i64,
}

impl PhaseResult {
    /// A phase's row: `/stats` at its end, and its load's figures (`elapsed`, p99 in ms,
    /// requests answered).
    pub(crate) fn of(
        lesson: &'static str,
        phase: &Phase,
        stats: &Audit,
        elapsed: Duration,
        p99_ms: f64,
        requests: usize,
        door: Option<DoorResult>,
    ) -> Self {
        Self {
            lesson,
            phase: phase.label,
            variant: phase.variant,
            sold: stats.sold,
            oversold: stats.oversold,
            lost_updates: stats.lost_updates,
            lock_overlaps: stats.lock_overlaps,
            goodput: stats.sold as f64 / elapsed.as_secs_f64().max(1e-3),
            p99_ms,
            requests,
            door,
        }
    }
}

/// What an arrivals phase came to: its row, its answers by status, its requests.
pub(crate) struct Arrived {
    pub phase: PhaseResult,
    pub statuses: BTreeMap<u16, usize>,
    pub requests: usize,
}

impl Status {
    /// An arrivals phase's result: its row, its answers counted.
    pub(crate) fn arrived(&mut self, result: Arrived, elapsed: Duration) {
        self.results.push(result.phase);
        for (code, count) in result.statuses {
            *self.statuses.entry(code).or_default() += count;
        }
        self.sent += result.requests as u64;
        self.elapsed_ms = u64::try_from(elapsed.as_millis()).unwrap_or(u64::MAX);
    }

    /// A phase's result, from its audit (`stats`) and its load's report: a row of the side
    /// by side, its answers counted, and an error when requests got no answer from `base`.
    pub(crate) fn record(
        &mut self,
        lesson: &Lesson,
        phase: &Phase,
        stats: &Audit,
        result: seckill_load::Report,
        base: &str,
    ) {
        let door = (!phase.door.is_wide_open()).then(|| DoorResult {
            flagged: stats.flagged,
            undersold: stats.undersold,
            remaining: stats.remaining,
            told_sold_out: result.count(409),
            ..DoorResult::default()
        });
        let (p99_ms, requests) = (result.percentile_ms(0.99), result.answered());
        let phase_result = PhaseResult::of(
            lesson.name,
            phase,
            stats,
            result.elapsed,
            p99_ms,
            requests,
            door,
        );
        self.results.push(phase_result);
        for (code, count) in result.statuses {
            *self.statuses.entry(code).or_default() += count;
        }
        if result.transport_errors > 0 {
            self.error = Some(format!(
                "{} requests got no answer from {base}: is --bench-url the Nginx in front?",
                result.transport_errors
            ));
        }
    }
}
