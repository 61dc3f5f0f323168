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
mod stores;

pub use catalogue::{LESSONS, find};
pub use door::DoorResult;
pub use lesson::{Lesson, Needs, Phase};

use std::sync::{Arc, Mutex};
use std::time::Duration;

use seckill_load::{Control, Load};
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
                run(lesson, &product, &state, &http, &base, &control, &status),
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

/// The second product of a phase's carts (`{cart}`): `<product>-b`.
fn second_product(product: &ProductId) -> Result<ProductId, String> {
    ProductId::parse(&format!("{product}-b"))
        .map_err(|err| format!("the cart's second product: {err}"))
}

/// `knobs` with the cart's placeholders filled in.
fn fill_cart(path: &str, product: &ProductId, second: Option<&ProductId>) -> String {
    let Some(second) = second else {
        return path.to_owned();
    };
    path.replace("{cart_reversed}", &format!("{second},{product}"))
        .replace("{cart}", &format!("{product},{second}"))
}

/// One lesson, phase after phase: each resets the product (traced, so that the page can
/// draw its timeline) and drives the phase's load through `base`.
async fn run(
    lesson: &Lesson,
    product: &ProductId,
    state: &AppState,
    http: &reqwest::Client,
    base: &str,
    control: &Control,
    status: &Mutex<Status>,
) -> Result<(), String> {
    let started = Instant::now();
    for (index, phase) in lesson.phases.iter().enumerate() {
        if control.is_stopped() {
            break;
        }
        status.lock().unwrap_or_else(|e| e.into_inner()).phase = index;
        let second = if phase.has_cart() {
            Some(second_product(product)?)
        } else {
            None
        };
        reset_for(phase, state, product, second.as_ref()).await?;
        let url = |path: &str| {
            let path = fill_cart(path, product, second.as_ref());
            let sep = if path.contains('?') { '&' } else { '?' };
            format!("{base}/deduct_stock/{path}{sep}product={product}")
        };
        if let Some(over_ms) = phase.arrivals_over_ms {
            let result = door::arrivals(phase, product, state, http, base, over_ms).await?;
            let mut status = status.lock().unwrap_or_else(|e| e.into_inner());
            status.results.push(result.phase);
            for (code, count) in result.statuses {
                *status.statuses.entry(code).or_default() += count;
            }
            status.sent += result.requests as u64;
            status.elapsed_ms = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX);
            continue;
        }
        if let Some(first) = phase.first_path() {
            http.post(url(&first))
                .send()
                .await
                .map_err(|err| format!("{}: {err}", lesson.name))?;
        }
        let urls = std::iter::once(phase.path()).chain(phase.alternate_path());
        let mut load = Load::to(urls.map(|p| url(&p)).collect(), seckill_load::Method::Post)
            .requests(phase.requests)
            .concurrency(phase.concurrency);
        if let Some(buyers) = phase.buyers {
            load = load.buyers(buyers);
        }
        let closing = phase.close_after_ms.map(|after| {
            let (state, product) = (state.clone(), product.clone());
            tokio::spawn(async move {
                tokio::time::sleep(Duration::from_millis(after)).await;
                crate::close::close(&state, &product, Duration::from_secs(10)).await
            })
        });
        let mut result = load.run(http, control).await;
        if phase.pay_within_ms > 0 && !phase.door.is_wide_open() && !control.is_stopped() {
            let late = latecomers(phase, product, url(&phase.path()), state, http, control).await;
            for (code, count) in late {
                *result.statuses.entry(code).or_default() += count;
            }
        }
        let closed = match closing {
            Some(closing) => match closing.await {
                Ok(Ok(_)) => None,
                Ok(Err(err)) => Some(format!("close: {err}")),
                Err(err) => Some(format!("close: {err}")),
            },
            None => None,
        };
        if !phase.door.is_wide_open() {
            // What the instances answered from memory reaches the audit within a flush.
            tokio::time::sleep(crate::admission::FLUSH_EVERY + Duration::from_millis(100)).await;
        }
        let stats = product::stats(&state.store, &state.lock_store, product)
            .await
            .map_err(|err| format!("stats: {err}"))?;
        let mut status = status.lock().unwrap_or_else(|e| e.into_inner());
        status.record(lesson, phase, &stats, result, base);
        status.sent = control.answered();
        status.elapsed_ms = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX);
        if closed.is_some() {
            status.error = closed;
        }
    }
    Ok(())
}

impl Status {
    /// A phase's result, from its audit (`stats`) and its load's report: a row of the side
    /// by side, its answers counted, and an error when requests got no answer from `base`.
    fn record(
        &mut self,
        lesson: &Lesson,
        phase: &Phase,
        stats: &product::Stats,
        result: seckill_load::Report,
        base: &str,
    ) {
        let door = (!phase.door.is_wide_open()).then(|| DoorResult {
            flagged: stats.admission.as_ref().map_or(0, |a| a.sold_out_flagged),
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

/// The product (and a cart's second one) reset for `phase`, traced, reopened, its door
/// forgotten by this instance. The lessons' products are scratch: their orders stay in
/// Redis only, unless the phase is about the orders' database.
async fn reset_for(
    phase: &Phase,
    state: &AppState,
    product: &ProductId,
    second: Option<&ProductId>,
) -> Result<(), String> {
    let terms = product::Terms {
        stock: phase.stock,
        shards: phase.shards,
        per_user: phase.per_user,
        pay_within_ms: phase.pay_within_ms,
        trace: true,
        in_database: phase.variant.spec().stock_in_database,
        door: phase.door,
    };
    let streaming = if phase.streamed {
        product::Streaming::Streamed
    } else {
        product::Streaming::AsBefore
    };
    for reset in std::iter::once(product).chain(second) {
        let db = state.database.as_deref();
        product::reset_with_database(&state.store, &state.lock_store, db, reset, terms, streaming)
            .await
            .map_err(|err| format!("reset: {err}"))?;
        // A close earlier in the lesson (or before it) ends with the reset.
        crate::close::reopen(state, reset)
            .await
            .map_err(|err| format!("reopen: {err}"))?;
        state.admission.forget(reset);
    }
    Ok(())
}

/// Latecomers, once the last reservations expired and gave their units back: a flag that
/// was cleared sells to them, one that was not turns them away. They pay at once, so that
/// their units do not come back before the audit is read. Their answers, by status.
async fn latecomers(
    phase: &Phase,
    product: &ProductId,
    url: String,
    state: &AppState,
    http: &reqwest::Client,
    control: &Control,
) -> std::collections::BTreeMap<u16, usize> {
    let expired = Duration::from_millis(phase.pay_within_ms.unsigned_abs() + 500);
    tokio::time::sleep(expired).await;
    let late = Load::post(url)
        .requests(usize::try_from(phase.stock).unwrap_or(0))
        .concurrency(5)
        .keeping_orders();
    let late = late.run(http, control).await;
    for order in &late.orders {
        if let Err(err) = crate::payment::pay(&state.store, product, order).await {
            tracing::warn!(%product, order, error = %err, "a latecomer's payment failed");
        }
    }
    late.statuses
}

#[cfg(test)]
mod tests;
