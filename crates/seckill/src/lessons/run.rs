//! One lesson run: phase after phase, each product reset (traced, so that the page can
//! draw its timeline), the phase's load driven through Nginx, its audit recorded.

use std::sync::Mutex;
use std::time::Duration;

use seckill_load::{Control, Load};
use tokio::time::Instant;

use super::{DoorResult, Lesson, Phase, PhaseResult, Status, door};
use crate::keys::ProductId;
use crate::product;
use crate::state::AppState;

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
pub(super) async fn run(
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
            status.arrived(result, started.elapsed());
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
            Some(closing) => close_failed(closing).await,
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

/// What went wrong with a phase's close (`close_after_ms`), if anything did.
async fn close_failed<T, E: std::fmt::Display>(
    closing: tokio::task::JoinHandle<Result<T, E>>,
) -> Option<String> {
    match closing.await {
        Ok(Ok(_)) => None,
        Ok(Err(err)) => Some(format!("close: {err}")),
        Err(err) => Some(format!("close: {err}")),
    }
}

impl Status {
    /// An arrivals phase's result: its row, its answers counted.
    fn arrived(&mut self, result: door::Arrived, elapsed: Duration) {
        self.results.push(result.phase);
        for (code, count) in result.statuses {
            *self.statuses.entry(code).or_default() += count;
        }
        self.sent += result.requests as u64;
        self.elapsed_ms = u64::try_from(elapsed.as_millis()).unwrap_or(u64::MAX);
    }

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
