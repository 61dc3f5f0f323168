//! Lessons a teacher starts from the page: reset a product and drive one step of the
//! progression at the cluster through `--bench-url` (Nginx), from inside the instance, so
//! the class needs no load tool. One lesson at a time per instance, bounded in requests and
//! time, cancellable.
//!
//! The lessons are defined once, in [`catalogue`] (what a lesson is: `lesson.rs`); the bench runs the same ones as rows,
//! with the same load generator (`seckill-load`).

pub mod catalogue;
mod door;
mod lesson;
mod run;
mod stores;

pub use catalogue::{LESSONS, find};
pub use door::DoorResult;
pub use lesson::{Lesson, Needs, Phase};

use std::sync::{Arc, Mutex};
use std::time::Duration;

use seckill_load::Control;
use serde::Serialize;
use tokio::time::Instant;

use crate::error::AppError;
use crate::keys::ProductId;
use crate::product;
use crate::state::AppState;

/// No lesson runs longer than this; its load is cut short after it.
pub const MAX_LESSON_TIME: Duration = Duration::from_secs(60);

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
    pub statuses: std::collections::BTreeMap<u16, usize>,
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

impl PhaseResult {
    /// A phase's row: `/stats` at its end, and its load's figures (`elapsed`, p99 in ms,
    /// requests answered).
    fn of(
        lesson: &'static str,
        phase: &Phase,
        stats: &product::Stats,
        elapsed: Duration,
        p99_ms: f64,
        requests: usize,
        door: Option<DoorResult>,
    ) -> Self {
        Self {
            lesson,
            phase: phase.label,
            variant: phase.variant.name(),
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

struct Running {
    status: Arc<Mutex<Status>>,
    control: Control,
    started: Instant,
}

/// The instance's lesson runner. Cheap to clone.
#[derive(Clone)]
pub struct Lessons {
    http: reqwest::Client,
    bench_url: Arc<str>,
    current: Arc<Mutex<Option<Running>>>,
}

impl Lessons {
    pub fn new(bench_url: &str) -> Self {
        Self {
            http: reqwest::Client::builder()
                .timeout(Duration::from_secs(30))
                .pool_max_idle_per_host(128)
                .build()
                .unwrap_or_default(),
            bench_url: bench_url.trim_end_matches('/').into(),
            current: Arc::new(Mutex::new(None)),
        }
    }

    fn current(&self) -> std::sync::MutexGuard<'_, Option<Running>> {
        // Held for a few field reads and writes, never across an await.
        self.current.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Starts `lesson` on `product`, unless one is running or the instance lacks what
    /// it needs.
    pub fn start(
        &self,
        lesson: &'static Lesson,
        product: ProductId,
        state: AppState,
    ) -> Result<Status, AppError> {
        if !available(lesson, &state) {
            return Err(AppError::BadRequest(format!(
                "the {} lesson needs instances started with {}",
                lesson.name,
                lesson.needs.flag()
            )));
        }
        let mut current = self.current();
        if current.as_ref().is_some_and(|r| r.status_now().running) {
            return Err(AppError::Conflict(
                "a lesson is already running; cancel it first".into(),
            ));
        }
        let total = lesson.phases.iter().map(|p| p.requests as u64).sum();
        let status = Arc::new(Mutex::new(Status {
            run: uuid::Uuid::new_v4().to_string(),
            lesson: lesson.name,
            product: product.to_string(),
            running: true,
            cancelled: false,
            sent: 0,
            total,
            phase: 0,
            elapsed_ms: 0,
            statuses: Default::default(),
            error: None,
            results: Vec::new(),
        }));
        let running = Running {
            status: status.clone(),
            control: Control::default(),
            started: Instant::now(),
        };
        let control = running.control.clone();
        let snapshot = running.status_now();
        *current = Some(running);
        drop(current);
        let (http, base) = (self.http.clone(), self.bench_url.clone());
        tokio::spawn(async move {
            let outcome = tokio::time::timeout(
                MAX_LESSON_TIME,
                run::run(lesson, &product, &state, &http, &base, &control, &status),
            )
            .await;
            let mut status = status.lock().unwrap_or_else(|e| e.into_inner());
            status.running = false;
            match outcome {
                Ok(Ok(())) => {}
                Ok(Err(err)) => status.error = Some(err),
                Err(_) => {
                    control.stop();
                    status.error = Some(format!("cut short after {} s", MAX_LESSON_TIME.as_secs()));
                }
            }
        });
        Ok(snapshot)
    }

    /// The lesson running, or the last one; `None` before the first.
    pub fn status(&self) -> Option<Status> {
        self.current().as_ref().map(Running::status_now)
    }

    /// Stops the running lesson's load; requests in flight finish.
    pub fn cancel(&self) -> Option<Status> {
        let current = self.current();
        let running = current.as_ref()?;
        running.control.stop();
        running
            .status
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .cancelled = true;
        Some(running.status_now())
    }
}

impl Running {
    fn status_now(&self) -> Status {
        let mut status = self
            .status
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        if status.running {
            status.elapsed_ms =
                u64::try_from(self.started.elapsed().as_millis()).unwrap_or(u64::MAX);
        }
        status.sent = status.sent.max(self.control.answered());
        status
    }
}

/// Whether the instance has what `lesson` needs.
pub fn available(lesson: &Lesson, state: &AppState) -> bool {
    match lesson.needs {
        Needs::Nothing => true,
        Needs::Faults => state.settings.faults,
        Needs::RedlockServers => state.redlock.is_some(),
        Needs::ZooKeeper => state.zookeeper.is_some(),
        Needs::OrdersDb => state.orders.is_some(),
        Needs::OrdersDbAndFaults => state.orders.is_some() && state.settings.faults,
    }
}

#[cfg(test)]
mod tests;
