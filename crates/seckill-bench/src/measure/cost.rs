//! What a row's load cost the stores: Redis's `INFO`, the instances' lock counters, the
//! CPU time of the lock's own servers and, when the bench knows them, of every part, read
//! before the load and again after it.

use seckill::variants::Variant;

use crate::admin::Service;
use crate::lock_store::{cpu_seconds, lock_store_pids};
use crate::parts_cpu::{Reading, Spent};
use crate::redis_usage::{Masters, Usage, spent};

/// The instances' watchdog-lock counters, summed over their `/metrics`.
#[derive(Debug, Clone, Copy)]
pub(super) struct LockCounters {
    pub(super) tries: u64,
    pub(super) wakeups: u64,
    pub(super) without_reason: u64,
}

impl LockCounters {
    /// The counters now; `None` when a `/metrics` could not be read.
    async fn read(service: &Service<'_>) -> Option<Self> {
        let tries = service.counter_sum("lock_tries").await.ok()?;
        let wakeups = service.counter_sum("lock_wakeups").await.ok()?;
        let without_reason = service
            .counter_sum("lock_tries_without_reason")
            .await
            .ok()?;
        Some(Self {
            tries,
            wakeups,
            without_reason,
        })
    }

    /// What was counted between `before` and these.
    fn since(self, before: Self) -> Self {
        Self {
            tries: self.tries - before.tries,
            wakeups: self.wakeups - before.wakeups,
            without_reason: self.without_reason - before.without_reason,
        }
    }
}

/// The stores' counters before the load: Redis's `INFO`, the instances' lock counters, the
/// CPU time of the lock's own servers (with their pids).
pub(super) struct Before<'a> {
    usage: Option<Vec<(String, Usage)>>,
    lock: Option<LockCounters>,
    lock_pids: Option<&'a [u32]>,
    lock_cpu: Option<f64>,
    parts: Option<Reading>,
}

/// What the load cost the stores, read against [`Before`].
pub(super) struct Cost {
    /// The lock's own servers' CPU time, µs.
    pub(super) lock_cpu_us: Option<f64>,
    /// Commands and CPU µs by Redis master, as [`spent`] gives them.
    pub(super) spent: Vec<(String, u64, f64)>,
    pub(super) lock: Option<LockCounters>,
    /// The most lock scripts one acquire sent, since the instances started.
    pub(super) most_tries: Option<u64>,
    /// What each part spent, when the service knows the parts' processes.
    pub(super) parts: Option<Spent>,
}

impl<'a> Before<'a> {
    /// Reads the counters before `variant`'s load.
    pub(super) async fn read(
        service: &Service<'a>,
        info: &mut Option<Masters>,
        variant: Variant,
    ) -> anyhow::Result<Self> {
        let usage = match info {
            Some(masters) => Some(masters.read().await?),
            None => None,
        };
        let lock = LockCounters::read(service).await;
        let lock_pids = lock_store_pids(service.args, variant);
        let lock_cpu = lock_pids.map(cpu_seconds).transpose()?;
        // Last, nearest the load.
        let parts = service.parts.map(Reading::now).transpose()?;
        Ok(Self {
            usage,
            lock,
            lock_pids,
            lock_cpu,
            parts,
        })
    }

    /// Reads the counters again after the load: what it cost.
    pub(super) async fn cost(
        self,
        service: &Service<'_>,
        info: &mut Option<Masters>,
    ) -> anyhow::Result<Cost> {
        // First, nearest the load.
        let parts = match (self.parts, service.parts) {
            (Some(before), Some(pids)) => Some(Reading::now(pids)?.since(&before)),
            _ => None,
        };
        let lock_cpu_us = match (self.lock_pids, self.lock_cpu) {
            (Some(pids), Some(before)) => Some((cpu_seconds(pids)? - before).max(0.0) * 1e6),
            _ => None,
        };
        let spent = match (info, self.usage) {
            (Some(masters), Some(before)) => spent(&before, &masters.read().await?),
            _ => Vec::new(),
        };
        let lock = match (self.lock, LockCounters::read(service).await) {
            (Some(before), Some(after)) => Some(after.since(before)),
            _ => None,
        };
        // Since the instances started: a row's own worst would need a reset the service
        // does not offer; the bench's rows run in one order, so it is the worst so far.
        let most_tries = service.gauge_max("lock_most_tries").await.ok().flatten();
        Ok(Cost {
            lock_cpu_us,
            spent,
            lock,
            most_tries,
            parts,
        })
    }
}
