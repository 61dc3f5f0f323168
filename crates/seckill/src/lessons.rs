//! Lessons a teacher starts from the page: reset a product and drive one step of the
//! progression at the cluster through `--bench-url` (Nginx), from inside the instance, so
//! the class needs no load tool. One lesson at a time per instance, bounded in requests and
//! time, cancellable.
//!
//! Each lesson uses the bench's settings, and its text is the README's explanation of what
//! to watch for.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use indicatif::ProgressBar;
use serde::Serialize;
use tokio::time::Instant;

use crate::bench::load::{self, Method};
use crate::error::AppError;
use crate::keys::ProductId;
use crate::product;
use crate::store::Store;

/// No lesson runs longer than this; its load is cut short after it.
pub const MAX_LESSON_TIME: Duration = Duration::from_secs(60);

/// One phase of a lesson: a reset, an optional first request (a fault), then the load.
#[derive(Debug, Clone, Serialize)]
pub struct Phase {
    pub stock: i64,
    pub shards: u32,
    /// `variant?knobs`, sent alone before the load.
    pub first: Option<&'static str>,
    /// `variant?knobs` the load goes to.
    pub path: &'static str,
    pub requests: usize,
    pub concurrency: usize,
}

#[derive(Debug, Clone, Serialize)]
pub struct Lesson {
    pub name: &'static str,
    pub title: &'static str,
    /// What to watch for, and why it happens.
    pub watch: &'static str,
    pub phases: &'static [Phase],
    /// Needs instances started with `--faults`.
    pub needs_faults: bool,
}

const fn phase(
    stock: i64,
    shards: u32,
    path: &'static str,
    requests: usize,
    concurrency: usize,
) -> Phase {
    Phase {
        stock,
        shards,
        first: None,
        path,
        requests,
        concurrency,
    }
}

/// The lessons, in the progression's order.
pub const LESSONS: &[Lesson] = &[
    Lesson {
        name: "naive",
        title: "naive: GET, then SET, from two instances",
        watch: "Watch sold run past the stock and oversold and lost updates climb. Two instances \
                read the same stock, each writes stock-1 back, and one sale vanishes from the \
                stock: a lost update. Every request is answered 200, so the stock runs out on \
                paper long after it ran out for real.",
        phases: &[phase(500, 1, "naive?work_ms=2", 2_000, 100)],
        needs_faults: false,
    },
    Lesson {
        name: "setnx",
        title: "setnx: a holder dies with the lock",
        watch: "The first buyer takes the SETNX lock and dies before its DEL. The lock has no \
                TTL: it shows held, never expires, and every later buyer is 429 lock busy. \
                Nothing sells until an operator deletes the lock. A lock needs a TTL.",
        phases: &[Phase {
            first: Some("setnx?fault=abandon"),
            ..phase(10, 1, "setnx", 40, 10)
        }],
        needs_faults: true,
    },
    Lesson {
        name: "token",
        title: "token: the work outlasts the TTL",
        watch: "Each holder works 300 ms under a 200 ms TTL. The lock expires under its holder, \
                the next buyer gets in while the first is still inside: overlaps climb, and with \
                10 units a unit can sell twice. The token only keeps a holder from deleting \
                someone else's lock; it does not keep the lock.",
        phases: &[phase(
            10,
            1,
            "token?work_ms=300&ttl_ms=200&wait_ms=3000",
            40,
            10,
        )],
        needs_faults: false,
    },
    Lesson {
        name: "watchdog",
        title: "watchdog: the same work, a lease that is renewed",
        watch: "The same 300 ms of work. Watch the lock's TTL count down and jump back up: the \
                watchdog renews the lease every third of it while the holder works. No overlap, \
                exactly the stock sold, one holder at a time.",
        phases: &[phase(10, 1, "watchdog?work_ms=300&wait_ms=5000", 40, 10)],
        needs_faults: false,
    },
    Lesson {
        name: "segmented",
        title: "segmented x8 against one lock",
        watch: "First one watchdog lock for the whole stock, then the same stock split into 8 \
                shards with a lock each. Watch the goodput line: eight holders work at once, so \
                the split stock sells several times faster, and the shard bars drain together.",
        phases: &[
            phase(500, 1, "watchdog?work_ms=2&wait_ms=5000", 1_000, 100),
            phase(500, 8, "segmented?work_ms=2&wait_ms=5000", 1_000, 100),
        ],
        needs_faults: false,
    },
    Lesson {
        name: "lua",
        title: "lua: no lock at all",
        watch: "One script checks, takes a unit and records the order atomically inside Redis: \
                no lock, nothing to wait for. Exactly the stock sold, the fastest line on the \
                chart: the ceiling every lock is measured against.",
        phases: &[phase(500, 1, "lua", 2_000, 100)],
        needs_faults: false,
    },
];

pub fn find(name: &str) -> Option<&'static Lesson> {
    LESSONS.iter().find(|l| l.name == name)
}

/// What the page shows about the lesson running (or the last one).
#[derive(Debug, Clone, Serialize)]
pub struct Status {
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
}

struct Running {
    status: Arc<Mutex<Status>>,
    progress: ProgressBar,
    stop: Arc<AtomicBool>,
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

    /// Starts `lesson` on `product`, unless one is running.
    pub fn start(
        &self,
        lesson: &'static Lesson,
        product: ProductId,
        store: Store,
        locks: Store,
        faults: bool,
    ) -> Result<Status, AppError> {
        if lesson.needs_faults && !faults {
            return Err(AppError::BadRequest(format!(
                "the {} lesson needs instances started with --faults",
                lesson.name
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
        }));
        let running = Running {
            status: status.clone(),
            progress: ProgressBar::hidden(),
            stop: Arc::new(AtomicBool::new(false)),
            started: Instant::now(),
        };
        let (progress, stop) = (running.progress.clone(), running.stop.clone());
        let snapshot = running.status_now();
        *current = Some(running);
        drop(current);
        let (http, base) = (self.http.clone(), self.bench_url.clone());
        tokio::spawn(async move {
            let outcome = tokio::time::timeout(
                MAX_LESSON_TIME,
                run(
                    lesson, &product, &store, &locks, &http, &base, &progress, &stop, &status,
                ),
            )
            .await;
            let mut status = status.lock().unwrap_or_else(|e| e.into_inner());
            status.running = false;
            match outcome {
                Ok(Ok(())) => {}
                Ok(Err(err)) => status.error = Some(err),
                Err(_) => {
                    stop.store(true, Ordering::Relaxed);
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
        running.stop.store(true, Ordering::Relaxed);
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
        status.sent = status.sent.max(self.progress.position());
        status
    }
}

#[allow(clippy::too_many_arguments)] // one lesson's whole context, used once
async fn run(
    lesson: &Lesson,
    product: &ProductId,
    store: &Store,
    locks: &Store,
    http: &reqwest::Client,
    base: &str,
    progress: &ProgressBar,
    stop: &Arc<AtomicBool>,
    status: &Mutex<Status>,
) -> Result<(), String> {
    let started = Instant::now();
    for (index, phase) in lesson.phases.iter().enumerate() {
        if stop.load(Ordering::Relaxed) {
            break;
        }
        status.lock().unwrap_or_else(|e| e.into_inner()).phase = index;
        product::reset(store, locks, product, phase.stock, phase.shards)
            .await
            .map_err(|err| format!("reset: {err}"))?;
        let url = |path: &str| {
            let sep = if path.contains('?') { '&' } else { '?' };
            format!("{base}/deduct_stock/{path}{sep}product={product}")
        };
        if let Some(first) = phase.first {
            http.post(url(first))
                .send()
                .await
                .map_err(|err| format!("{}: {err}", lesson.name))?;
        }
        let result = load::drive(
            http,
            Method::Post,
            &url(phase.path),
            phase.requests,
            phase.concurrency,
            progress,
            stop,
        )
        .await;
        let mut status = status.lock().unwrap_or_else(|e| e.into_inner());
        for (code, count) in result.statuses {
            *status.statuses.entry(code).or_default() += count;
        }
        status.sent = progress.position();
        status.elapsed_ms = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX);
        if result.transport_errors > 0 {
            status.error = Some(format!(
                "{} requests got no answer from {base}: is --bench-url the Nginx in front?",
                result.transport_errors
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_lesson_is_bounded_and_found_by_name() {
        for lesson in LESSONS {
            assert_eq!(find(lesson.name).map(|l| l.name), Some(lesson.name));
            for phase in lesson.phases {
                assert!(
                    phase.requests <= 2_000 && phase.concurrency <= 100,
                    "{}",
                    lesson.name
                );
            }
        }
        assert!(find("nope").is_none());
    }
}
