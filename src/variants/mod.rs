//! The variants of `/deduct_stock`, one file each, all the same shape:
//! `pub async fn deduct(d: &Deduction) -> Result<Outcome, AppError>`.
//!
//! The lock variants share [`Deduction::critical_section`], the seed's business logic
//! (read the stock, check it, work, take one unit) with the audit around it, so that
//! they differ only in how they take and give back their lock.

mod lua;
mod naive;
mod segmented;
mod setnx;
mod token;
mod watchdog;

pub use lua::{LuaBatches, MAX_BATCH};

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use redis::AsyncCommands;
use redis::aio::ConnectionManager;
use serde::Serialize;
use uuid::Uuid;

use crate::error::AppError;
use crate::keys::{ProductKeys, ShardKeys};
use crate::knobs::Knobs;
use crate::lock::WatchdogLocks;
use crate::metrics::Metrics;
use crate::scripts;

/// How long past its own work a holder may stay in the audit's "inside" set: the time it
/// needs for its last Redis round trips under load. A holder that dies inside stops
/// counting as inside after its work plus this margin.
const INSIDE_MARGIN: Duration = Duration::from_secs(2);

/// One step of the progression.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum Variant {
    Naive,
    Setnx,
    Token,
    Watchdog,
    Segmented,
    Lua,
}

impl Variant {
    /// Every variant, in the progression's order.
    pub const ALL: [Variant; 6] = [
        Self::Naive,
        Self::Setnx,
        Self::Token,
        Self::Watchdog,
        Self::Segmented,
        Self::Lua,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Self::Naive => "naive",
            Self::Setnx => "setnx",
            Self::Token => "token",
            Self::Watchdog => "watchdog",
            Self::Segmented => "segmented",
            Self::Lua => "lua",
        }
    }

    pub fn parse(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|v| v.name() == name)
    }

    /// Whether a deduction holds a lock it must give back (and so must not be cut short).
    pub fn takes_a_lock(self) -> bool {
        !matches!(self, Self::Naive | Self::Lua)
    }

    /// The knobs this variant takes besides `product`.
    pub fn knobs(self) -> &'static [&'static str] {
        match self {
            Self::Naive => &["work_ms"],
            Self::Setnx => &["work_ms", "fault", "pause_ms"],
            Self::Token => &["work_ms", "ttl_ms", "wait_ms", "fault", "pause_ms"],
            Self::Watchdog | Self::Segmented => {
                &["work_ms", "lease_ms", "wait_ms", "fault", "pause_ms"]
            }
            Self::Lua => &["batch"],
        }
    }
}

impl fmt::Display for Variant {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// What a deduction came to. Each maps to its own status code.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// 200: one unit sold and its order recorded.
    Deducted {
        remaining: i64,
        order: String,
        shard: u32,
    },
    /// 409: nothing left.
    SoldOut { remaining: i64 },
    /// 429: the lock was held for the whole wait.
    LockBusy,
    /// 503: the lock was lost before the holder could commit (its lease ran out while
    /// Redis was away, or an operator deleted it); nothing was sold, retrying is safe.
    LockLost,
    /// 500 (fault injection only): the holder stopped without releasing its lock.
    Abandoned,
}

impl Outcome {
    pub fn name(&self) -> &'static str {
        match self {
            Self::Deducted { .. } => "deducted",
            Self::SoldOut { .. } => "sold_out",
            Self::LockBusy => "lock_busy",
            Self::LockLost => "lock_lost",
            Self::Abandoned => "abandoned",
        }
    }
}

/// How `commit.lua` takes the unit.
enum Take {
    /// `DECR` in Redis.
    Decrement,
    /// `SET` a value the application computed from what it read earlier.
    Set(i64),
}

/// Everything one deduction needs.
pub struct Deduction {
    pub redis: ConnectionManager,
    pub product: ProductKeys,
    pub knobs: Knobs,
    pub variant: Variant,
    pub instance: Arc<str>,
    /// Who this request is, in locks and in the audit.
    pub holder: String,
    pub metrics: Arc<Metrics>,
    pub locks: WatchdogLocks,
    pub lua: LuaBatches,
}

impl Deduction {
    /// Runs the variant, and counts the requests that sold nothing in the product's audit
    /// (the lua script counts its own), so that `/stats` accounts for every answer.
    pub async fn run(&self) -> Result<Outcome, AppError> {
        let outcome = match self.variant {
            Variant::Naive => naive::deduct(self).await,
            Variant::Setnx => setnx::deduct(self).await,
            Variant::Token => token::deduct(self).await,
            Variant::Watchdog => watchdog::deduct(self).await,
            Variant::Segmented => segmented::deduct(self).await,
            Variant::Lua => return lua::deduct(self).await,
        }?;
        let counter = match outcome {
            Outcome::SoldOut { .. } => "sold_out",
            Outcome::LockBusy => "lock_busy",
            _ => return Ok(outcome),
        };
        let _: i64 = self
            .redis
            .clone()
            .hincr(&self.product.audit, counter, 1)
            .await?;
        Ok(outcome)
    }

    /// The keys of an unsplit product.
    fn whole_stock(&self) -> ShardKeys {
        self.product.shard(0, 1)
    }

    /// The seed's business logic, run while holding a lock: enter (the audit notes who
    /// else is inside), read the stock, check it, work, take one unit and leave.
    ///
    /// With a `fence` (the watchdog lock's owner), the unit is taken only if that owner
    /// still holds the shard's lock at that moment, checked inside the same script.
    async fn critical_section(
        &self,
        shard: &ShardKeys,
        fence: Option<&str>,
    ) -> Result<Outcome, AppError> {
        let mut conn = self.redis.clone();
        let stay = self.knobs.work + INSIDE_MARGIN;
        let (stock, _overlap): (Option<i64>, i64) = scripts::ENTER
            .key(&shard.stock)
            .key(&shard.inside)
            .key(&shard.audit)
            .arg(&self.holder)
            .arg(stay.as_millis() as u64)
            .invoke_async(&mut conn)
            .await?;
        let Some(stock) = stock else {
            return Err(self.not_for_sale().await);
        };
        if stock <= 0 {
            let _: u64 = conn.zrem(&shard.inside, &self.holder).await?;
            return Ok(Outcome::SoldOut { remaining: stock });
        }
        self.work().await;
        self.commit(shard, Take::Decrement, fence).await
    }

    /// Takes one unit, records the order and leaves the critical section, in one round trip.
    async fn commit(
        &self,
        shard: &ShardKeys,
        take: Take,
        fence: Option<&str>,
    ) -> Result<Outcome, AppError> {
        let order = Uuid::now_v7().to_string();
        let mut script = scripts::COMMIT.prepare_invoke();
        script
            .key(&shard.stock)
            .key(&shard.inside)
            .key(&shard.orders)
            .key(&shard.audit)
            .key(&shard.lock)
            .arg(&self.holder)
            .arg(&order)
            .arg(&*self.instance)
            .arg(self.variant.name());
        match take {
            Take::Decrement => script.arg("decr").arg(0),
            Take::Set(value) => script.arg("set").arg(value),
        };
        script.arg(fence.unwrap_or_default());
        let remaining: i64 = script.invoke_async(&mut self.redis.clone()).await?;
        match remaining {
            -2 => return Err(self.not_for_sale().await),
            -3 => return Ok(Outcome::LockLost),
            _ => {}
        }
        Ok(Outcome::Deducted {
            remaining,
            order,
            shard: shard.index,
        })
    }

    /// The business time the seeds spend inside the critical section.
    async fn work(&self) {
        if !self.knobs.work.is_zero() {
            tokio::time::sleep(self.knobs.work).await;
        }
    }

    /// Times a lock acquisition for `/metrics`.
    async fn acquire<F>(&self, acquire: F) -> Result<bool, AppError>
    where
        F: Future<Output = Result<bool, crate::lock::LockError>>,
    {
        let started = tokio::time::Instant::now();
        let acquired = acquire.await?;
        self.metrics
            .lock_acquired(self.variant, acquired, started.elapsed());
        Ok(acquired)
    }

    /// Why there was no stock key: a product split into shards is sold by `segmented`
    /// only; any other product was never reset (or Redis lost it) and is not for sale.
    async fn not_for_sale(&self) -> AppError {
        let shards: Result<Option<u32>, _> =
            self.redis.clone().hget(&self.product.meta, "shards").await;
        match shards {
            Ok(Some(n)) if n > 1 => AppError::BadRequest(format!(
                "product {} is split into {n} shards; only the segmented variant sells it",
                self.product.product
            )),
            Ok(_) => AppError::UnknownProduct(self.product.product.to_string()),
            Err(err) => err.into(),
        }
    }

    fn log_release(&self, released: Result<bool, AppError>) {
        match released {
            Ok(true) => {}
            Ok(false) => tracing::warn!(
                variant = %self.variant,
                holder = %self.holder,
                "lock was no longer ours at release: the work outlasted it"
            ),
            Err(err) => tracing::warn!(
                variant = %self.variant,
                holder = %self.holder,
                error = %err,
                "lock release failed; it stays until it expires (setnx: until deleted by hand)"
            ),
        }
    }
}
