//! Buyers arriving in a known order, each on its own: straight to the deduction (clicking
//! again while the answer says a retry may help), or through the product's waiting room
//! (a ticket, polls until let in, the deduction with the pass). What became of each buyer
//! is kept in arrival order, so that who got the units can be read against who came
//! first.
//!
//! ```no_run
//! # async fn run() {
//! use std::time::Duration;
//! use seckill_load::arrivals::{Arrivals, Door};
//! let http = reqwest::Client::new();
//! let report = Arrivals::new("http://127.0.0.1:8080", "101", "watchdog")
//!     .buyers(2_000, Duration::from_secs(2))
//!     .door(Door::Room { poll_every: Duration::from_millis(500) })
//!     .run(&http)
//!     .await;
//! println!("{} of the first 200 bought", report.bought_among_first(200));
//! # }
//! ```

use std::collections::BTreeMap;
use std::time::Duration;

use hdrhistogram::Histogram;
use tokio::time::Instant;

use crate::{field_number, field_string, find, histogram};

/// How buyers reach the stock.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Door {
    /// Straight to `/deduct_stock`.
    Straight,
    /// Through `/room/{product}`: polls at the room's `poll_after_ms`, at most
    /// `poll_every` apart.
    Room { poll_every: Duration },
}

/// Who comes, when, and how.
#[derive(Debug, Clone)]
pub struct Arrivals {
    base: String,
    product: String,
    /// `variant` or `variant?knobs`.
    variant: String,
    buyers: usize,
    /// Buyer `i` arrives at `i * over / buyers`.
    over: Duration,
    door: Door,
    /// A buyer gives up this long after arriving.
    patience: Duration,
    /// Each buyer clicks once: no retry after an answer that sold nothing.
    once: bool,
    /// Buyers are named `<prefix><i>`.
    prefix: String,
}

/// What became of one buyer, times from the start of the run.
#[derive(Debug, Clone, Default)]
pub struct Journey {
    pub arrived: Duration,
    /// When the room let them in.
    pub admitted: Option<Duration>,
    /// When their unit was sold to them.
    pub bought: Option<Duration>,
    /// When they were told the product was sold out (at a poll, a ticket or a deduction).
    pub told_sold_out: Option<Duration>,
    /// The poll interval they were keeping when told (the room said, or `poll_every`).
    pub polling_every: Option<Duration>,
}

/// What the buyers saw.
pub struct ArrivalsReport {
    /// One per buyer, in arrival order.
    pub journeys: Vec<Journey>,
    /// Latency of every deduction request, µs.
    pub deductions: Histogram<u64>,
    /// When each deduction request was sent, from the start.
    pub deduction_times: Vec<Duration>,
    /// Answers by step (`ticket`, `poll`, `deduct`) and status.
    pub statuses: BTreeMap<(&'static str, u16), usize>,
    pub transport_errors: usize,
    pub elapsed: Duration,
}

impl Arrivals {
    pub fn new(base: &str, product: &str, variant: &str) -> Self {
        Self {
            base: base.trim_end_matches('/').to_owned(),
            product: product.to_owned(),
            variant: variant.to_owned(),
            buyers: 1,
            over: Duration::ZERO,
            door: Door::Straight,
            patience: Duration::from_secs(10),
            once: false,
            prefix: "a".to_owned(),
        }
    }

    /// `buyers` buyers, arriving evenly over `over`.
    pub fn buyers(mut self, buyers: usize, over: Duration) -> Self {
        self.buyers = buyers;
        self.over = over;
        self
    }

    pub fn door(mut self, door: Door) -> Self {
        self.door = door;
        self
    }

    pub fn patience(mut self, patience: Duration) -> Self {
        self.patience = patience;
        self
    }

    /// Each buyer sends one deduction, whatever it is answered.
    pub fn once(mut self) -> Self {
        self.once = true;
        self
    }

    /// Buyers are named `<prefix><i>` (another run's buyers are other people).
    pub fn named(mut self, prefix: &str) -> Self {
        self.prefix = prefix.to_owned();
        self
    }

    /// Sends every buyer on their way at their time, and waits for the last.
    pub async fn run(&self, http: &reqwest::Client) -> ArrivalsReport {
        let started = Instant::now();
        let tasks: Vec<_> = (0..self.buyers)
            .map(|i| {
                let (this, http) = (self.clone(), http.clone());
                let at = self.over.mul_f64(i as f64 / self.buyers.max(1) as f64);
                tokio::spawn(async move {
                    tokio::time::sleep_until(started + at).await;
                    this.buyer(&http, i, started).await
                })
            })
            .collect();
        let mut report = ArrivalsReport {
            journeys: Vec::with_capacity(self.buyers),
            deductions: histogram(),
            deduction_times: Vec::new(),
            statuses: BTreeMap::new(),
            transport_errors: 0,
            elapsed: Duration::ZERO,
        };
        for task in tasks {
            let Ok(seen) = task.await else {
                report.journeys.push(Journey::default());
                continue;
            };
            report.journeys.push(seen.journey);
            let _ = report.deductions.add(&seen.deductions);
            report.deduction_times.extend(seen.deduction_times);
            for (step, count) in seen.statuses {
                *report.statuses.entry(step).or_default() += count;
            }
            report.transport_errors += seen.transport_errors;
        }
        report.elapsed = started.elapsed();
        report
    }

    async fn buyer(&self, http: &reqwest::Client, i: usize, started: Instant) -> Seen {
        let user = format!("{}{i}", self.prefix);
        let mut seen = Seen {
            journey: Journey {
                arrived: started.elapsed(),
                ..Journey::default()
            },
            deductions: histogram(),
            deduction_times: Vec::new(),
            statuses: BTreeMap::new(),
            transport_errors: 0,
        };
        let deadline = Instant::now() + self.patience;
        let mut pass = None;
        let mut ticket = None;
        let mut polling_every = None;
        while Instant::now() < deadline {
            if let Door::Room { poll_every } = self.door {
                if ticket.is_none() {
                    let url = format!("{}/room/{}/ticket?user={user}", self.base, self.product);
                    match seen.send("ticket", http.post(url)).await {
                        Some((200, body)) => ticket = field_string(&body, b"\"ticket\":\""),
                        Some((409, _)) => {
                            seen.told(started, polling_every);
                            break;
                        }
                        _ => pause(Duration::from_millis(100)).await,
                    }
                    continue;
                }
                if pass.is_none() {
                    let url = format!(
                        "{}/room/{}?user={user}&ticket={}",
                        self.base,
                        self.product,
                        ticket.as_deref().unwrap_or_default()
                    );
                    match seen.send("poll", http.get(url)).await {
                        Some((200, body)) if find(&body, b"\"admitted\"").is_some() => {
                            pass = field_string(&body, b"\"pass\":\"");
                            seen.journey.admitted.get_or_insert(started.elapsed());
                        }
                        Some((200, body)) => {
                            let after = field_number(&body, b"\"poll_after_ms\":")
                                .map_or(poll_every, Duration::from_millis)
                                .min(poll_every);
                            polling_every = Some(after);
                            pause(after).await;
                        }
                        Some((409, _)) => {
                            seen.told(started, polling_every);
                            break;
                        }
                        _ => pause(Duration::from_millis(100)).await,
                    }
                    continue;
                }
            }
            let mut url = format!(
                "{}/deduct_stock/{}{}product={}&user={user}",
                self.base,
                self.variant,
                if self.variant.contains('?') { '&' } else { '?' },
                self.product
            );
            if let Some(pass) = &pass {
                url.push_str("&pass=");
                url.push_str(pass);
            }
            seen.deduction_times.push(started.elapsed());
            let sent = Instant::now();
            let answer = seen.send("deduct", http.post(url)).await;
            let took = u64::try_from(sent.elapsed().as_micros()).unwrap_or(u64::MAX);
            seen.deductions.saturating_record(took.max(1));
            match answer {
                Some((200, _)) => {
                    seen.journey.bought = Some(started.elapsed());
                    break;
                }
                Some((409, _)) => {
                    seen.told(started, polling_every);
                    break;
                }
                // The pass ran out before the buyer used it: back to the room.
                Some((403, body)) if find(&body, b"pass_refused").is_some() => pass = None,
                _ if self.once => break,
                // The lock stayed held, the optimistic tries conflicted, a rate said wait:
                // nothing was sold, click again.
                Some((429, _)) => {}
                // Anything else (a 503, a 504 `unknown`, no answer) may or may not have
                // sold: the buyer does not click blindly again, and stops.
                _ => break,
            }
        }
        seen
    }
}

async fn pause(time: Duration) {
    tokio::time::sleep(time).await;
}

/// One buyer's part of the report.
struct Seen {
    journey: Journey,
    deductions: Histogram<u64>,
    deduction_times: Vec<Duration>,
    statuses: BTreeMap<(&'static str, u16), usize>,
    transport_errors: usize,
}

impl Seen {
    async fn send(
        &mut self,
        step: &'static str,
        request: reqwest::RequestBuilder,
    ) -> Option<(u16, Vec<u8>)> {
        let answer = match request.send().await {
            Ok(response) => {
                let status = response.status().as_u16();
                response.bytes().await.ok().map(|b| (status, b.to_vec()))
            }
            Err(_) => None,
        };
        match &answer {
            Some((status, _)) => *self.statuses.entry((step, *status)).or_default() += 1,
            None => self.transport_errors += 1,
        }
        answer
    }

    fn told(&mut self, started: Instant, polling_every: Option<Duration>) {
        self.journey.told_sold_out = Some(started.elapsed());
        self.journey.polling_every = polling_every;
    }
}

impl ArrivalsReport {
    /// Units bought by the first `n` buyers to arrive.
    pub fn bought_among_first(&self, n: usize) -> usize {
        self.journeys
            .iter()
            .take(n)
            .filter(|j| j.bought.is_some())
            .count()
    }

    /// Units bought, by anyone.
    pub fn bought(&self) -> usize {
        self.journeys.iter().filter(|j| j.bought.is_some()).count()
    }

    /// When the last unit was sold.
    pub fn last_sale(&self) -> Option<Duration> {
        self.journeys.iter().filter_map(|j| j.bought).max()
    }

    /// Answers of `step` with `status`.
    pub fn count(&self, step: &str, status: u16) -> usize {
        self.statuses
            .iter()
            .filter(|((s, code), _)| *s == step && *code == status)
            .map(|(_, n)| n)
            .sum()
    }

    /// Deduction requests per second between `from` and `to` (from the start).
    pub fn deduction_rate(&self, from: Duration, to: Duration) -> f64 {
        let sent = self
            .deduction_times
            .iter()
            .filter(|t| **t >= from && **t < to)
            .count();
        sent as f64 / (to.saturating_sub(from)).as_secs_f64().max(1e-9)
    }

    /// A deduction latency percentile, ms.
    pub fn deduction_ms(&self, quantile: f64) -> f64 {
        self.deductions.value_at_quantile(quantile) as f64 / 1000.0
    }
}
