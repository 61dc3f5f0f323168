//! The bounds on the teaching knobs and on what one request may cost, as the command
//! line gives them (`seckill serve --max-work-ms …`, flattened into `config::ServeArgs`).

use std::time::Duration;

use anyhow::ensure;
use clap::Args;

/// Bounds on the teaching knobs and on what one request may cost.
#[derive(Debug, Clone, Args)]
pub struct Limits {
    /// Largest `work_ms` (business time inside the critical section) a request may ask for.
    #[arg(long, env = "SECKILL_MAX_WORK_MS", default_value_t = 5_000,
          value_parser = clap::value_parser!(u64).range(0..=60_000))]
    pub max_work_ms: u64,

    /// Largest `ttl_ms` / `lease_ms` a request may ask for (and the smallest is 10).
    #[arg(long, env = "SECKILL_MAX_TTL_MS", default_value_t = 60_000,
          value_parser = clap::value_parser!(u64).range(1..=600_000))]
    pub max_ttl_ms: u64,

    /// The watchdog lock's lease when a request names no `lease_ms` (Redisson's
    /// `lockWatchdogTimeout`); the watchdog renews it every third of it.
    #[arg(long, env = "SECKILL_LOCK_LEASE_MS", default_value_t = 30_000,
          value_parser = clap::value_parser!(u64).range(100..=600_000))]
    pub lock_lease_ms: u64,

    /// Largest `wait_ms` (time to wait for a held lock) a request may ask for.
    #[arg(long, env = "SECKILL_MAX_WAIT_MS", default_value_t = 10_000,
          value_parser = clap::value_parser!(u64).range(0..=60_000))]
    pub max_wait_ms: u64,

    /// Largest `pause_ms` (the fault `pause_before_release`) a request may ask for.
    #[arg(long, env = "SECKILL_MAX_PAUSE_MS", default_value_t = 5_000,
          value_parser = clap::value_parser!(u64).range(0..=60_000))]
    pub max_pause_ms: u64,

    /// Time after which a request is answered 408. Must exceed the largest work, wait and
    /// pause together; a deduction already under way still finishes and is recorded.
    #[arg(long, env = "SECKILL_REQUEST_TIMEOUT_MS", default_value_t = 30_000,
          value_parser = clap::value_parser!(u64).range(100..=600_000))]
    pub request_timeout_ms: u64,

    /// Time one Redis command (or connection attempt) may take before the request is
    /// answered 503.
    #[arg(long, env = "SECKILL_REDIS_TIMEOUT_MS", default_value_t = 1_000,
          value_parser = clap::value_parser!(u64).range(10..=60_000))]
    pub redis_timeout_ms: u64,

    /// Requests served at once; past this the instance sheds load with 503 and Retry-After.
    #[arg(long, env = "SECKILL_MAX_IN_FLIGHT", default_value_t = 4_096,
          value_parser = clap::value_parser!(u64).range(1..=1_000_000))]
    pub max_in_flight: u64,

    /// Largest request body accepted, in bytes (413 past it).
    #[arg(long, env = "SECKILL_MAX_BODY_BYTES", default_value_t = 4_096,
          value_parser = clap::value_parser!(u64).range(0..=1_048_576))]
    pub max_body_bytes: u64,
}

impl Limits {
    pub fn request_timeout(&self) -> Duration {
        Duration::from_millis(self.request_timeout_ms)
    }

    pub fn redis_timeout(&self) -> Duration {
        Duration::from_millis(self.redis_timeout_ms)
    }

    /// A request that uses every knob to its bound must still finish inside the request
    /// timeout, or the timeout would cut deductions short for no visible reason.
    pub(crate) fn check(&self) -> anyhow::Result<()> {
        let longest = self.max_work_ms + self.max_wait_ms + self.max_pause_ms;
        let redis_round_trips = 6 * self.redis_timeout_ms;
        ensure!(
            self.request_timeout_ms > longest + redis_round_trips,
            "--request-timeout-ms ({}) must exceed max work + wait + pause ({longest} ms) plus \
             six Redis timeouts ({redis_round_trips} ms)",
            self.request_timeout_ms
        );
        Ok(())
    }
}
