//! The lessons a teacher starts from seckill's page: each resets a product and drives one
//! step of the progression at the cluster through `--bench-url` (Nginx), from inside the
//! instance, so the class needs no load tool. One lesson at a time per instance, bounded in
//! requests and time, cancellable.
//!
//! The lessons are defined once, here: the page starts them, and `seckill-bench --lessons`
//! runs their failure modes as rows, with the same load generator (`seckill-load`). The
//! crate does not know the service: a phase names its variant by name (`"watchdog"`), and
//! what a lesson asks of the instance it runs in (a reset, a close, the audit, a payment)
//! is the [`Service`] trait, which the service implements over its state.
//!
//! # Layout
//!
//! - [`lesson`] — what a lesson is: [`Lesson`], its [`Phase`]s, what it [`Needs`], and the
//!   front door a phase's reset opens ([`Opening`]).
//! - [`catalogue`] — the lessons ([`LESSONS`], [`find`]); `stores.rs` those on the stores
//!   beside the stock Redis, `door.rs` the front door's (and its buyers' arrivals).
//! - [`service`] — [`Service`], what the runner asks of the instance, and the [`Audit`]'s
//!   figures it reads.
//! - [`status`] — what the page shows: [`Status`], a [`PhaseResult`] per phase.
//! - `run.rs` — one lesson run, phase after phase; [`Lessons`] (here) — the instance's
//!   runner: one lesson at a time, started, watched, cancelled.

pub mod catalogue;
mod door;
pub mod lesson;
mod run;
pub mod service;
pub mod status;
mod stores;

pub use catalogue::{LESSONS, LONG_WORK_MS, SHORT_TTL_MS, find};
pub use lesson::{Flag, Lesson, Needs, Opening, Phase, Room};
pub use run::second_product;
pub use service::{Audit, Service};
pub use status::{DoorResult, PhaseResult, Status};

use std::fmt;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use seckill_load::Control;
use tokio::time::Instant;

/// No lesson runs longer than this; its load is cut short after it.
pub const MAX_LESSON_TIME: Duration = Duration::from_secs(60);

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
    pub fn start<S: Service>(
        &self,
        lesson: &'static Lesson,
        product: &str,
        service: S,
    ) -> Result<Status, Refused> {
        if !service.has(lesson.needs) {
            return Err(Refused::Unavailable(lesson));
        }
        let mut current = self.current();
        if current.as_ref().is_some_and(|r| r.status_now().running) {
            return Err(Refused::Running);
        }
        let total = lesson.phases.iter().map(|p| p.requests as u64).sum();
        let status = Arc::new(Mutex::new(Status {
            run: uuid::Uuid::new_v4().to_string(),
            lesson: lesson.name,
            product: product.to_owned(),
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
        let product = product.to_owned();
        tokio::spawn(async move {
            let outcome = tokio::time::timeout(
                MAX_LESSON_TIME,
                run::run(lesson, &product, &service, &http, &base, &control, &status),
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

/// Why a lesson did not start.
#[derive(Debug, Clone, Copy)]
pub enum Refused {
    /// The instance lacks what the lesson needs (`lesson.needs`).
    Unavailable(&'static Lesson),
    /// A lesson is running; cancel it first.
    Running,
}

impl fmt::Display for Refused {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Refused::Unavailable(lesson) => write!(
                f,
                "the {} lesson needs instances started with {}",
                lesson.name,
                lesson.needs.flag()
            ),
            Refused::Running => f.write_str("a lesson is already running; cancel it first"),
        }
    }
}

impl std::error::Error for Refused {}

#[cfg(test)]
mod tests;
