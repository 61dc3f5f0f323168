//! One lesson run: phase after phase, each product reset (traced, so that the page can
//! draw its timeline), the phase's load driven through Nginx, its audit recorded.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use seckill_load::{Control, Load};
use tokio::time::Instant;

use crate::door;
use crate::lesson::{Lesson, Phase};
use crate::service::Service;
use crate::status::Status;

/// The second product of a phase's carts (`{cart}`): `<product>-b`.
pub fn second_product(product: &str) -> String {
    format!("{product}-b")
}

/// `knobs` with the cart's placeholders filled in.
fn fill_cart(path: &str, product: &str, second: Option<&str>) -> String {
    let Some(second) = second else {
        return path.to_owned();
    };
    path.replace("{cart_reversed}", &format!("{second},{product}"))
        .replace("{cart}", &format!("{product},{second}"))
}

/// One lesson, phase after phase: each resets the product (traced, so that the page can
/// draw its timeline) and drives the phase's load through `base`.
pub(crate) async fn run(
    lesson: &Lesson,
    product: &str,
    service: &impl Service,
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
        let second = phase.has_cart().then(|| second_product(product));
        service.reset(phase, product).await?;
        let url = |path: &str| {
            let path = fill_cart(path, product, second.as_deref());
            let sep = if path.contains('?') { '&' } else { '?' };
            format!("{base}/deduct_stock/{path}{sep}product={product}")
        };
        if let Some(over_ms) = phase.arrivals_over_ms {
            let result = door::arrivals(phase, product, service, http, base, over_ms).await?;
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
            let (service, product) = (service.clone(), product.to_owned());
            tokio::spawn(async move {
                tokio::time::sleep(Duration::from_millis(after)).await;
                service.close(&product).await
            })
        });
        let mut result = load.run(http, control).await;
        if phase.pay_within_ms > 0 && !phase.door.is_wide_open() && !control.is_stopped() {
            let late = latecomers(phase, product, url(&phase.path()), service, http, control).await;
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
            tokio::time::sleep(service.flush_every() + Duration::from_millis(100)).await;
        }
        let stats = service
            .audit(product)
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

/// Latecomers, once every reservation expired and gave its unit back (the audit shows the
/// whole stock left): a flag that was cleared sells to them, one that was not turns them
/// away. Each pays as soon as it is answered, so that its unit does not come back before
/// the audit is read; one whose reservation expired all the same (a slow machine) gave its
/// unit back, and another latecomer comes for it, up to [`LATE_ROUNDS`] times. Their
/// answers, by status.
async fn latecomers(
    phase: &Phase,
    product: &str,
    url: String,
    service: &impl Service,
    http: &reqwest::Client,
    control: &Control,
) -> BTreeMap<u16, usize> {
    units_back(phase, product, service, control).await;
    let mut statuses = BTreeMap::new();
    let mut wanted = usize::try_from(phase.stock).unwrap_or(0);
    for _ in 0..LATE_ROUNDS {
        if wanted == 0 || control.is_stopped() {
            break;
        }
        let next = Arc::new(AtomicUsize::new(0));
        let mut workers = tokio::task::JoinSet::new();
        for _ in 0..wanted.min(5) {
            let (next, url, service, http, control, product) = (
                next.clone(),
                url.clone(),
                service.clone(),
                http.clone(),
                control.clone(),
                product.to_owned(),
            );
            workers.spawn(async move {
                let (mut statuses, mut came_back) = (BTreeMap::<u16, usize>::new(), 0);
                while next.fetch_add(1, Ordering::Relaxed) < wanted {
                    let bought = Load::post(url.as_str())
                        .keeping_orders()
                        .run(&http, &control)
                        .await;
                    for (code, count) in bought.statuses {
                        *statuses.entry(code).or_default() += count;
                    }
                    for order in &bought.orders {
                        if let Err(err) = service.pay(&product, order).await {
                            tracing::warn!(%product, order, error = %err, "a latecomer's payment failed");
                            came_back += 1;
                        }
                    }
                }
                (statuses, came_back)
            });
        }
        wanted = 0;
        while let Some(worker) = workers.join_next().await {
            let Ok((answers, came_back)) = worker else {
                continue;
            };
            for (code, count) in answers {
                *statuses.entry(code).or_default() += count;
            }
            wanted += came_back;
        }
    }
    statuses
}

/// How many times latecomers come for units whose reservations expired before they paid.
const LATE_ROUNDS: usize = 10;

/// Waits until every reservation of the phase expired and gave its unit back: the audit
/// shows the whole stock left. Gives up after 30 s (the phase's results then say what
/// the latecomers found), or when the lesson is stopped.
async fn units_back(phase: &Phase, product: &str, service: &impl Service, control: &Control) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while Instant::now() < deadline && !control.is_stopped() {
        if let Ok(audit) = service.audit(product).await
            && audit.remaining >= phase.stock
        {
            return;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    tracing::warn!(%product, "not every reservation gave its unit back within 30 s");
}
