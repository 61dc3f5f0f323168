//! The load generator behind `seckill-bench`, the teaching page's lessons and the tests:
//! `requests` requests from `concurrency` workers, each on its own kept-alive connection,
//! as oha sends them, and what the clients saw — statuses, latency, the work each sale
//! reported, the order ids.
//!
//! ```no_run
//! # async fn run() {
//! use seckill_load::{Control, Load};
//! let http = reqwest::Client::new();
//! let report = Load::post("http://127.0.0.1:8080/deduct_stock/lua?product=101")
//!     .requests(2_000)
//!     .concurrency(100)
//!     .run(&http, &Control::default())
//!     .await;
//! println!("{:?} in {:?}", report.statuses, report.elapsed);
//! # }
//! ```

pub mod arrivals;
mod body;
mod shaped;
mod table;

pub use shaped::{Answered, KEPT_BODY, Keep, Shape};
pub use table::table;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

use body::{field_number, field_string, find};
use hdrhistogram::Histogram;
use tokio::time::Instant;

/// How the load is sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Method {
    Get,
    Post,
}

/// What to send.
#[derive(Debug, Clone)]
pub struct Load {
    /// Request `n` goes to `urls[n % urls.len()]`.
    urls: Vec<String>,
    method: Method,
    requests: usize,
    concurrency: usize,
    until_sold_out: bool,
    keep_orders: bool,
    buyers: Option<Buyers>,
    /// Each request carries `Idempotency-Key: <this>-<n>`.
    keys: Option<String>,
    /// Builds each request instead of `urls` and `method` ([`Load::shaped`]).
    shape: Option<shaped::Builder>,
    keep_history: bool,
    /// What the history keeps of each body; its first [`KEPT_BODY`] bytes without one.
    keep: Option<shaped::Keeper>,
}

/// Who buys: request `n` is click `n mod clicks` of buyer `n / clicks` (of buyer
/// `(n / clicks) mod users` when `users` is set), named `u<index>` in the `user` parameter.
/// Consecutive requests go out together, so a buyer's clicks arrive at once.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Buyers {
    pub users: Option<usize>,
    pub clicks: usize,
}

impl Buyers {
    /// The buyer of request `n`.
    pub fn of(&self, n: usize) -> usize {
        let buyer = n / self.clicks.max(1);
        self.users.map_or(buyer, |users| buyer % users.max(1))
    }
}

/// Shared with whoever watches or stops a load while it runs.
#[derive(Debug, Clone, Default)]
pub struct Control {
    stop: Arc<AtomicBool>,
    answered: Arc<AtomicU64>,
}

impl Control {
    /// Every worker stops before its next request; requests in flight finish.
    pub fn stop(&self) {
        self.stop.store(true, Ordering::Relaxed);
    }

    pub fn is_stopped(&self) -> bool {
        self.stop.load(Ordering::Relaxed)
    }

    /// Requests answered so far (or that failed to get an answer), over every load run
    /// with this control.
    pub fn answered(&self) -> u64 {
        self.answered.load(Ordering::Relaxed)
    }
}

impl Load {
    /// POSTs to `url`, one request from one connection until told otherwise.
    pub fn post(url: impl Into<String>) -> Self {
        Self::to(vec![url.into()], Method::Post)
    }

    /// GETs of `url`.
    pub fn get(url: impl Into<String>) -> Self {
        Self::to(vec![url.into()], Method::Get)
    }

    /// Requests spread over `urls` in turn (several instances without Nginx).
    pub fn to(urls: Vec<String>, method: Method) -> Self {
        assert!(!urls.is_empty(), "a load needs a URL");
        Self {
            urls,
            method,
            requests: 1,
            concurrency: 1,
            until_sold_out: false,
            keep_orders: false,
            buyers: None,
            keys: None,
            shape: None,
            keep_history: false,
            keep: None,
        }
    }

    /// Requests built by `shape` (request `n` is `shape(client, n)`), as they are.
    pub fn shaped(shape: Shape) -> Self {
        Self {
            shape: Some(shaped::Builder(shape)),
            ..Self::to(vec![String::new()], Method::Post)
        }
    }

    /// Keep every request's [`Answered`] ([`Report::history`]), its body included.
    pub fn keeping_history(mut self) -> Self {
        self.keep_history = true;
        self
    }

    /// Keep every request's [`Answered`], with what `keep` makes of its status and whole
    /// body in place of the body's first [`KEPT_BODY`] bytes.
    pub fn keeping_history_by(mut self, keep: Keep) -> Self {
        self.keep_history = true;
        self.keep = Some(shaped::Keeper(keep));
        self
    }

    /// Names a buyer in each request (`user=u<i>`), as `buyers` says.
    pub fn buyers(mut self, buyers: Buyers) -> Self {
        self.buyers = Some(buyers);
        self
    }

    /// Sends each request with an idempotency key of its own, `<prefix>-<n>` (the prefix
    /// tells one run's keys from another's).
    pub fn keyed(mut self, prefix: impl Into<String>) -> Self {
        self.keys = Some(prefix.into());
        self
    }

    pub fn requests(mut self, requests: usize) -> Self {
        self.requests = requests;
        self
    }

    /// Workers, each with a connection of its own.
    pub fn concurrency(mut self, concurrency: usize) -> Self {
        self.concurrency = concurrency.max(1);
        self
    }

    /// A worker stops at its first 409 (sold out).
    pub fn until_sold_out(mut self) -> Self {
        self.until_sold_out = true;
        self
    }

    /// Keep the order id of every 200 ([`Report::orders`]).
    pub fn keeping_orders(mut self) -> Self {
        self.keep_orders = true;
        self
    }

    /// Sends the load and waits for the last answer.
    pub async fn run(&self, http: &reqwest::Client, control: &Control) -> Report {
        let next = Arc::new(AtomicUsize::new(0));
        let started = Instant::now();
        let workers: Vec<_> = (0..self.concurrency)
            .map(|_| {
                let (load, http, next, control) =
                    (self.clone(), http.clone(), next.clone(), control.clone());
                tokio::spawn(async move { load.worker(&http, &next, &control, started).await })
            })
            .collect();
        let mut total = Report::new();
        for worker in workers {
            if let Ok(part) = worker.await {
                total.add(part);
            }
        }
        total.elapsed = started.elapsed();
        total
    }

    async fn worker(
        &self,
        http: &reqwest::Client,
        next: &AtomicUsize,
        control: &Control,
        started: Instant,
    ) -> Report {
        let mut report = Report::new();
        while !control.is_stopped() {
            let n = next.fetch_add(1, Ordering::Relaxed);
            if n >= self.requests {
                break;
            }
            let sent = Instant::now();
            let answer = match self.request(http, n).send().await {
                // Read the body, so the connection can be reused.
                Ok(response) => {
                    let status = response.status().as_u16();
                    let retry_after = response.headers().contains_key("retry-after");
                    let replayed = response.headers().contains_key("idempotent-replayed");
                    let body = response.bytes().await.ok();
                    body.map(|body| (status, retry_after, replayed, body))
                }
                Err(_) => None,
            };
            control.answered.fetch_add(1, Ordering::Relaxed);
            if self.keep_history {
                report.history.push(Answered {
                    n,
                    sent: sent - started,
                    done: started.elapsed(),
                    status: answer.as_ref().map(|a| a.0),
                    body: answer
                        .as_ref()
                        .map(|a| match &self.keep {
                            Some(keep) => (keep.0)(a.0, &a.3),
                            None => a.3[..a.3.len().min(KEPT_BODY)].to_vec(),
                        })
                        .unwrap_or_default(),
                });
            }
            let Some((status, retry_after, replayed, body)) = answer else {
                report.transport_errors += 1;
                continue;
            };
            report.replayed += usize::from(replayed);
            let took = u64::try_from(sent.elapsed().as_micros()).unwrap_or(u64::MAX);
            report.latency.saturating_record(took.max(1));
            *report.statuses.entry(status).or_default() += 1;
            match status {
                200 => {
                    report.last_ok = Some(started.elapsed());
                    if let Some(us) = field_number(&body, b"\"work_us\":") {
                        report.work.saturating_record(us.max(1));
                    }
                    match field_string(&body, b"\"order\":\"") {
                        Some(order) if self.keep_orders => report.orders.push(order),
                        Some(_) => {}
                        None => report.unnamed_sales += 1,
                    }
                }
                409 if self.until_sold_out => break,
                503 | 504 if !retry_after => report.without_retry_after += 1,
                _ => {}
            }
        }
        report
    }

    /// Request `n`: built by the shape, or to its URL with its buyer and key.
    fn request(&self, http: &reqwest::Client, n: usize) -> reqwest::RequestBuilder {
        if let Some(shape) = &self.shape {
            return (shape.0)(http, n);
        }
        let url = &self.urls[n % self.urls.len()];
        let url = match &self.buyers {
            Some(buyers) => {
                let joint = if url.contains('?') { '&' } else { '?' };
                std::borrow::Cow::Owned(format!("{url}{joint}user=u{}", buyers.of(n)))
            }
            None => std::borrow::Cow::Borrowed(url.as_str()),
        };
        let mut request = match self.method {
            Method::Get => http.get(url.as_ref()),
            Method::Post => http.post(url.as_ref()),
        };
        if let Some(prefix) = &self.keys {
            request = request.header("idempotency-key", format!("{prefix}-{n}"));
        }
        request
    }
}

/// What the clients saw.
pub struct Report {
    pub statuses: BTreeMap<u16, usize>,
    /// Requests that got no HTTP answer.
    pub transport_errors: usize,
    /// Latency of answered requests, in microseconds.
    pub latency: Histogram<u64>,
    pub elapsed: Duration,
    /// When the last 200 arrived, from the start.
    pub last_ok: Option<Duration>,
    /// How long the work inside the lock really took, µs, as each 200 said (`work_us`).
    pub work: Histogram<u64>,
    /// The order id of every 200, when the load keeps them.
    pub orders: Vec<String>,
    /// 200s that named no order: the contract says every sale does.
    pub unnamed_sales: usize,
    /// 503s and 504s that did not say when to come back (`Retry-After`).
    pub without_retry_after: usize,
    /// Answers that were an idempotency key's first answer given again.
    pub replayed: usize,
    /// Every request, in the order answered, when the load keeps its history.
    pub history: Vec<Answered>,
}

impl std::fmt::Debug for Report {
    // The counts, not the histograms' buckets nor thousands of order ids.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Report")
            .field("statuses", &self.statuses)
            .field("transport_errors", &self.transport_errors)
            .field("elapsed", &self.elapsed)
            .field("slowest", &self.slowest())
            .field("orders", &self.orders.len())
            .field("unnamed_sales", &self.unnamed_sales)
            .field("without_retry_after", &self.without_retry_after)
            .field("replayed", &self.replayed)
            .finish()
    }
}

impl Report {
    fn new() -> Self {
        Self {
            statuses: BTreeMap::new(),
            transport_errors: 0,
            latency: histogram(),
            elapsed: Duration::ZERO,
            last_ok: None,
            work: histogram(),
            orders: Vec::new(),
            unnamed_sales: 0,
            without_retry_after: 0,
            replayed: 0,
            history: Vec::new(),
        }
    }

    fn add(&mut self, part: Report) {
        for (status, count) in part.statuses {
            *self.statuses.entry(status).or_default() += count;
        }
        self.transport_errors += part.transport_errors;
        let _ = self.latency.add(&part.latency);
        let _ = self.work.add(&part.work);
        self.last_ok = self.last_ok.max(part.last_ok);
        self.orders.extend(part.orders);
        self.unnamed_sales += part.unnamed_sales;
        self.without_retry_after += part.without_retry_after;
        self.replayed += part.replayed;
        self.history.extend(part.history);
    }

    /// Answers with `status`.
    pub fn count(&self, status: u16) -> usize {
        self.statuses.get(&status).copied().unwrap_or(0)
    }

    /// Every answer, whatever its status.
    pub fn answered(&self) -> usize {
        self.statuses.values().sum()
    }

    /// Answers of any kind per second.
    pub fn throughput(&self) -> f64 {
        self.answered() as f64 / self.elapsed.as_secs_f64().max(1e-9)
    }

    /// A latency percentile (`quantile` in 0..=1), in milliseconds.
    pub fn percentile_ms(&self, quantile: f64) -> f64 {
        self.latency.value_at_quantile(quantile) as f64 / 1000.0
    }

    /// The slowest answer.
    pub fn slowest(&self) -> Duration {
        Duration::from_micros(self.latency.max())
    }

    /// The mean and p99 of the real work time, in milliseconds, when answers reported it.
    pub fn work_ms(&self) -> Option<(f64, f64)> {
        (!self.work.is_empty()).then(|| {
            (
                self.work.mean() / 1000.0,
                self.work.value_at_quantile(0.99) as f64 / 1000.0,
            )
        })
    }
}

fn histogram() -> Histogram<u64> {
    // 1 µs to 10 min, 3 significant figures: enough for any request the knobs allow.
    Histogram::new_with_bounds(1, 600_000_000, 3).expect("valid histogram bounds")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buyers_click_in_runs_of_consecutive_requests() {
        let unique = Buyers {
            users: None,
            clicks: 3,
        };
        let who: Vec<usize> = (0..7).map(|n| unique.of(n)).collect();
        assert_eq!(who, [0, 0, 0, 1, 1, 1, 2]);
        let two = Buyers {
            users: Some(2),
            clicks: 1,
        };
        let who: Vec<usize> = (0..5).map(|n| two.of(n)).collect();
        assert_eq!(who, [0, 1, 0, 1, 0]);
    }
}
