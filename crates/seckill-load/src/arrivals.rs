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

    /// Buyer `i`'s way, from their arrival until they bought, were told the product was
    /// sold out, ran out of patience, or had an answer that may have sold.
    async fn buyer(&self, http: &reqwest::Client, i: usize, started: Instant) -> Seen {
        let mut buyer = Buyer {
            arrivals: self,
            http,
            user: format!("{}{i}", self.prefix),
            started,
            seen: Seen::arrived(started),
            ticket: None,
            pass: None,
            polling_every: None,
        };
        let deadline = Instant::now() + self.patience;
        while Instant::now() < deadline {
            let next = match self.door {
                Door::Room { .. } if buyer.ticket.is_none() => buyer.take_ticket().await,
                Door::Room { poll_every } if buyer.pass.is_none() => buyer.poll(poll_every).await,
                _ => buyer.deduct().await,
            };
            if next == Next::Stop {
                break;
            }
        }
        buyer.seen
    }
}

/// One buyer on their way: who, how far through the room, and what they have seen.
struct Buyer<'a> {
    arrivals: &'a Arrivals,
    http: &'a reqwest::Client,
    user: String,
    started: Instant,
    seen: Seen,
    ticket: Option<String>,
    pass: Option<String>,
    /// The poll interval the room last said (at most `poll_every`).
    polling_every: Option<Duration>,
}

/// What a buyer does after a step: another (or the same again), or stop.
#[derive(Debug, PartialEq, Eq)]
enum Next {
    Again,
    Stop,
}

impl Buyer<'_> {
    /// Asks the room for a ticket.
    async fn take_ticket(&mut self) -> Next {
        let Arrivals { base, product, .. } = self.arrivals;
        let url = format!("{base}/room/{product}/ticket?user={}", self.user);
        match self.seen.send("ticket", self.http.post(url)).await {
            Some((200, body)) => self.ticket = field_string(&body, b"\"ticket\":\""),
            Some((409, _)) => return self.told(),
            _ => pause(Duration::from_millis(100)).await,
        }
        Next::Again
    }

    /// Polls the room with the ticket: let in with a pass, or waits as long as it says (at
    /// most `poll_every`).
    async fn poll(&mut self, poll_every: Duration) -> Next {
        let Arrivals { base, product, .. } = self.arrivals;
        let url = format!(
            "{base}/room/{product}?user={}&ticket={}",
            self.user,
            self.ticket.as_deref().unwrap_or_default()
        );
        match self.seen.send("poll", self.http.get(url)).await {
            Some((200, body)) if find(&body, b"\"admitted\"").is_some() => {
                self.pass = field_string(&body, b"\"pass\":\"");
                self.seen
                    .journey
                    .admitted
                    .get_or_insert(self.started.elapsed());
            }
            Some((200, body)) => {
                let after = field_number(&body, b"\"poll_after_ms\":")
                    .map_or(poll_every, Duration::from_millis)
                    .min(poll_every);
                self.polling_every = Some(after);
                pause(after).await;
            }
            Some((409, _)) => return self.told(),
            _ => pause(Duration::from_millis(100)).await,
        }
        Next::Again
    }

    /// Sends the deduction (with the pass, if the room gave one) and times it.
    async fn deduct(&mut self) -> Next {
        let Arrivals {
            base,
            product,
            variant,
            once,
            ..
        } = self.arrivals;
        let mut url = format!(
            "{base}/deduct_stock/{variant}{}product={product}&user={}",
            if variant.contains('?') { '&' } else { '?' },
            self.user
        );
        if let Some(pass) = &self.pass {
            url.push_str("&pass=");
            url.push_str(pass);
        }
        self.seen.deduction_times.push(self.started.elapsed());
        let sent = Instant::now();
        let answer = self.seen.send("deduct", self.http.post(url)).await;
        let took = u64::try_from(sent.elapsed().as_micros()).unwrap_or(u64::MAX);
        self.seen.deductions.saturating_record(took.max(1));
        match answer {
            Some((200, _)) => {
                self.seen.journey.bought = Some(self.started.elapsed());
                Next::Stop
            }
            Some((409, _)) => self.told(),
            // The pass ran out before the buyer used it: back to the room.
            Some((403, body)) if find(&body, b"pass_refused").is_some() => {
                self.pass = None;
                Next::Again
            }
            _ if *once => Next::Stop,
            // The lock stayed held, the optimistic tries conflicted, a rate said wait:
            // nothing was sold, click again.
            Some((429, _)) => Next::Again,
            // Anything else (a 503, a 504 `unknown`, no answer) may or may not have
            // sold: the buyer does not click blindly again, and stops.
            _ => Next::Stop,
        }
    }

    /// Told the product is sold out: noted, and the buyer stops.
    fn told(&mut self) -> Next {
        self.seen.told(self.started, self.polling_every);
        Next::Stop
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
    /// Nothing seen yet, by a buyer arriving now.
    fn arrived(started: Instant) -> Self {
        Self {
            journey: Journey {
                arrived: started.elapsed(),
                ..Journey::default()
            },
            deductions: histogram(),
            deduction_times: Vec::new(),
            statuses: BTreeMap::new(),
            transport_errors: 0,
        }
    }

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
