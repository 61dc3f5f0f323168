//! The Prometheus registry behind `/metrics`.
//!
//! One registry per instance (not a process-wide recorder), so several instances can live
//! in one process.

use std::sync::Arc;
use std::time::Duration;

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeLabelSet, EncodeMetric};
use prometheus_client::metrics::counter::{ConstCounter, Counter};
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::{ConstGauge, Gauge};
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;
use seckill_lock::WatchdogCounters;

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct RequestLabels {
    variant: &'static str,
    outcome: &'static str,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct VariantLabels {
    variant: &'static str,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct AcquireLabels {
    variant: &'static str,
    result: &'static str,
}

type HistogramFamily<L> = Family<L, Histogram, fn() -> Histogram>;

/// From 0.1 ms to about 13 s, doubling.
fn latency_histogram() -> Histogram {
    Histogram::new(exponential_buckets(0.0001, 2.0, 18))
}

/// What the orders' consumer did (`crate::orders`), in `/metrics`.
#[derive(Debug, Clone, Default)]
pub struct OrdersCounters {
    /// Orders inserted (new rows; a replayed entry inserts none).
    pub inserted: Counter,
    /// Stream entries acknowledged: their orders are in the database.
    pub acknowledged: Counter,
    /// Entries claimed from another consumer that left them pending.
    pub claimed: Counter,
    /// Batches that stayed in the stream (the database or Redis did not answer).
    pub failed_batches: Counter,
    /// Entries not yet in the database over every stream, at the last look (the
    /// reconciliation's `backlog`, for every product at once).
    pub backlog: Gauge,
    /// How long the oldest of them has waited, ms.
    pub oldest_ms: Gauge,
}

pub struct Metrics {
    registry: Registry,
    requests: Family<RequestLabels, Counter>,
    latency: HistogramFamily<VariantLabels>,
    lock_acquire: Family<AcquireLabels, Counter>,
    lock_wait: HistogramFamily<VariantLabels>,
    rss: Gauge,
    peak_rss: Gauge,
}

impl Metrics {
    /// Every series carries `instance="<id>"`: through Nginx, `/metrics` answers from a
    /// different instance each time, and the label says which.
    pub fn new(instance: &str, watchdog: Arc<WatchdogCounters>, orders: &OrdersCounters) -> Self {
        let labels = [(
            std::borrow::Cow::Borrowed("instance"),
            std::borrow::Cow::Owned(instance.to_owned()),
        )];
        let mut registry = Registry::with_prefix_and_labels("seckill", labels.into_iter());
        let requests = Family::<RequestLabels, Counter>::default();
        let latency: HistogramFamily<VariantLabels> =
            Family::new_with_constructor(latency_histogram);
        let lock_acquire = Family::<AcquireLabels, Counter>::default();
        let lock_wait: HistogramFamily<VariantLabels> =
            Family::new_with_constructor(latency_histogram);
        registry.register(
            "deductions",
            "Deduction requests by variant and outcome",
            requests.clone(),
        );
        registry.register(
            "deduction_duration_seconds",
            "Time to answer a deduction, by variant",
            latency.clone(),
        );
        registry.register(
            "lock_acquire",
            "Lock acquisitions by variant and result (acquired or busy)",
            lock_acquire.clone(),
        );
        registry.register(
            "lock_wait_seconds",
            "Time spent acquiring (or failing to acquire) a lock, by variant",
            lock_wait.clone(),
        );
        registry.register_collector(Box::new(LockCounters(watchdog)));
        register_orders(&mut registry, orders);
        let rss = Gauge::default();
        let peak_rss = Gauge::default();
        registry.register(
            "process_resident_memory_bytes",
            "Resident memory now",
            rss.clone(),
        );
        registry.register(
            "process_peak_resident_memory_bytes",
            "The most resident memory this process has held",
            peak_rss.clone(),
        );
        Self {
            rss,
            peak_rss,
            registry,
            requests,
            latency,
            lock_acquire,
            lock_wait,
        }
    }

    /// A deduction of `variant` (its name) answered `outcome` after `took`.
    pub fn deduction(&self, variant: &'static str, outcome: &'static str, took: Duration) {
        self.requests
            .get_or_create(&RequestLabels { variant, outcome })
            .inc();
        self.latency
            .get_or_create(&VariantLabels { variant })
            .observe(took.as_secs_f64());
    }

    /// `variant` (its name) took its lock (`acquired`) or gave up, after `took`.
    pub fn lock_acquired(&self, variant: &'static str, acquired: bool, took: Duration) {
        let result = if acquired { "acquired" } else { "busy" };
        self.lock_acquire
            .get_or_create(&AcquireLabels { variant, result })
            .inc();
        self.lock_wait
            .get_or_create(&VariantLabels { variant })
            .observe(took.as_secs_f64());
    }

    /// The registry in the OpenMetrics text format.
    pub fn render(&self) -> String {
        if let Ok(status) = std::fs::read_to_string("/proc/self/status") {
            let kib = |field: &str| {
                status
                    .lines()
                    .find_map(|line| line.strip_prefix(field))
                    .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<i64>().ok())
                    .map_or(0, |kib| kib * 1024)
            };
            self.rss.set(kib("VmRSS:"));
            self.peak_rss.set(kib("VmHWM:"));
        }
        let mut out = String::new();
        // Writing into a String cannot fail.
        let _ = prometheus_client::encoding::text::encode(&mut out, &self.registry);
        out
    }
}

/// The orders' consumer's series (`--orders-db`).
fn register_orders(registry: &mut Registry, orders: &OrdersCounters) {
    registry.register(
        "orders_inserted",
        "Orders the consumer inserted into the orders' database (--orders-db)",
        orders.inserted.clone(),
    );
    registry.register(
        "orders_acknowledged",
        "Stream entries acknowledged once their orders were in the database",
        orders.acknowledged.clone(),
    );
    registry.register(
        "orders_claimed",
        "Stream entries claimed from a consumer that left them pending",
        orders.claimed.clone(),
    );
    registry.register(
        "orders_failed_batches",
        "Batches left in the stream: the database or Redis did not answer",
        orders.failed_batches.clone(),
    );
    registry.register(
        "orders_backlog",
        "Stream entries not yet in the database, over every orders stream (pending and \
         not read), as this instance's consumer last saw them (once a second)",
        orders.backlog.clone(),
    );
    registry.register(
        "orders_oldest_waiting_ms",
        "How long the oldest of them has waited, ms (0: none waits)",
        orders.oldest_ms.clone(),
    );
}

/// The lock library's counters, read at each scrape (the library counts; the service
/// exports).
#[derive(Debug)]
struct LockCounters(Arc<WatchdogCounters>);

impl Collector for LockCounters {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let counters = &self.0;
        let each = [
            (
                "watchdog_renewals",
                "Lock leases extended by a watchdog",
                counters.renewals(),
            ),
            (
                "watchdog_lost",
                "Watchdog ticks that found their lock gone (the holder lost it)",
                counters.lost(),
            ),
            (
                "lock_wakeups",
                "Waiters woken by a release message",
                counters.wakeups(),
            ),
            (
                "lock_handoffs",
                "Locks a holder handed straight to a waiter of this instance",
                counters.handoffs(),
            ),
            (
                "lock_tries",
                "Lock scripts sent by watchdog acquires (every try, the first included)",
                counters.tries(),
            ),
            (
                "lock_tries_without_reason",
                "Lock scripts an acquire sent beyond one, one per wake-up it received and one per nap that ran out (a spinning waiter; 0)",
                counters.tries_without_reason(),
            ),
            (
                "lock_subscription_losses",
                "Times the lock release subscription was lost (dropped, or its server stopped answering its ping) and started again",
                counters.subscription_losses(),
            ),
        ];
        for (name, help, value) in each {
            let counter = ConstCounter::new(value);
            let metric = encoder.encode_descriptor(name, help, None, counter.metric_type())?;
            counter.encode(metric)?;
        }
        let most = ConstGauge::new(i64::try_from(counters.most_tries()).unwrap_or(i64::MAX));
        let metric = encoder.encode_descriptor(
            "lock_most_tries",
            "The most lock scripts one watchdog acquire sent since the instance started",
            None,
            most.metric_type(),
        )?;
        most.encode(metric)?;
        Ok(())
    }
}
