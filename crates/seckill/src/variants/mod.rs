//! The variants of `/deduct_stock`, one file each, all the same shape:
//! `pub async fn deduct(d: &Deduction) -> Result<Outcome, AppError>`.
//!
//! The lock variants share [`Deduction::critical_section`], the seed's business logic
//! (read the stock, check it, work, take one unit) with the audit around it, so that
//! they differ only in how they take and give back their lock.

mod lua;
mod naive;
mod redlock;
mod segmented;
mod setnx;
mod shares;
mod token;
mod watchdog;

pub use crate::variant::Variant;
pub use lua::{LuaBatches, MAX_BATCH};
pub use shares::Shares;
pub use watchdog::{commit_release_script, lock_enter_script};

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use redis::AsyncCommands;
use uuid::Uuid;

use crate::error::AppError;
use crate::keys::{ProductKeys, ShardKeys};
use crate::knobs::Knobs;
use crate::lock::{Redlock, WatchdogLocks};
use crate::metrics::Metrics;
use crate::scripts;
use crate::store::{RedisConn, Store};
use crate::timer;

/// How long past its own work a holder may stay in the audit's "inside" set: the time it
/// needs for its last Redis round trips under load. A holder that dies inside stops
/// counting as inside after its work plus this margin.
pub(super) const INSIDE_MARGIN: Duration = Duration::from_secs(2);

/// The keys and first arguments of `lib/critical.lua`'s `commit`, as `commit.lua` and
/// `commit_release.lua` both take them.
pub fn commit_keys_and_args(
    script: &mut redis::ScriptInvocation<'_>,
    shard: &ShardKeys,
    holder: &str,
    order: &str,
    instance: &str,
    variant: &str,
) {
    script
        .key(&shard.stock)
        .key(&shard.inside)
        .key(&shard.orders)
        .key(&shard.audit)
        .key(&shard.lock)
        .key(&shard.fence)
        .arg(holder)
        .arg(order)
        .arg(instance)
        .arg(variant);
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
    /// 503: the unit was taken and its order recorded on the shard's master, but `WAIT`
    /// saw fewer replicas than `--redis-wait-replicas` have it in time: it may or may not
    /// survive a failover of that master. Counted as `unconfirmed` in `/stats`.
    Unconfirmed { order: String, shard: u32 },
    /// 503: the stock refused the commit: the holder's fencing token was older than one
    /// that had already read or written the stock (`fence=on`). Nothing was sold.
    Fenced,
    /// 503: the lock was taken but fewer replicas of the lock store than
    /// `--lock-wait-replicas` confirmed it in time; it was given back, nothing was sold.
    LockUnconfirmed,
}

impl Outcome {
    pub fn name(&self) -> &'static str {
        match self {
            Self::Deducted { .. } => "deducted",
            Self::SoldOut { .. } => "sold_out",
            Self::LockBusy => "lock_busy",
            Self::LockLost => "lock_lost",
            Self::Abandoned => "abandoned",
            Self::Unconfirmed { .. } => "unconfirmed",
            Self::Fenced => "fenced",
            Self::LockUnconfirmed => "lock_unconfirmed",
        }
    }
}

/// What a lock holder presents at the stock.
#[derive(Default, Clone, Copy)]
pub(super) struct Guard<'a> {
    /// Watchdog: the owner that must still hold the shard's lock hash at commit, checked
    /// inside the commit script — only when the lock lives in the stock store.
    pub owner: Option<&'a str>,
    /// `fence=on`: the fencing token the holder was granted.
    pub token: Option<i64>,
    /// Asked just before the commit: true when the holder knows its lock is gone (a
    /// Redlock extension that missed its quorum).
    pub lost: Option<&'a (dyn Fn() -> bool + Send + Sync)>,
}

impl Guard<'_> {
    fn token_arg(&self) -> String {
        self.token.map(|t| t.to_string()).unwrap_or_default()
    }
}

/// How `commit.lua` takes the unit.
enum Take {
    /// `DECR` in Redis.
    Decrement,
    /// `SET` a value the application computed from what it read earlier.
    Set(i64),
}

/// `--redis-wait-replicas`: how many replicas must have a sale before it is answered 200,
/// and how long `WAIT` may take to say so.
#[derive(Debug, Clone, Copy)]
pub struct ReplicaWait {
    pub replicas: u32,
    pub timeout: Duration,
}

impl ReplicaWait {
    /// After a sale written on `conn` to the slot of `key`: true when enough replicas have
    /// it. When they do not (or the master went away meanwhile), the `count` sales are
    /// counted as unconfirmed in `audit` where that can still be written.
    pub async fn confirm(
        wait: Option<Self>,
        conn: &mut RedisConn,
        key: &str,
        audit: &str,
        count: i64,
    ) -> bool {
        let Some(wait) = wait else {
            return true;
        };
        match conn.wait_replicas(key, wait.replicas, wait.timeout).await {
            Ok(acked) if acked >= wait.replicas => true,
            outcome => {
                tracing::warn!(?outcome, wanted = wait.replicas, %key, "sale not confirmed by replicas");
                let counted: Result<i64, _> = conn.hincr(audit, "unconfirmed", count).await;
                if let Err(err) = counted {
                    tracing::warn!(error = %err, "unconfirmed sales not counted in the audit");
                }
                false
            }
        }
    }
}

/// Everything one deduction needs.
pub struct Deduction {
    /// The stock store's connection.
    pub redis: RedisConn,
    /// The stock store, for what spans shards (segmented's look at every shard).
    pub store: Store,
    /// The lock store's connection (setnx, token; the watchdog locks hold their own).
    pub lock_redis: RedisConn,
    /// Whether locks live in the stock store itself, so that a commit can check the lock
    /// hash in the same script (the watchdog's fence).
    pub locks_beside_stock: bool,
    /// Replicas every sale must reach before it is answered 200.
    pub wait: Option<ReplicaWait>,
    /// Replicas of the lock store every lock must reach before its holder goes on.
    pub lock_wait: Option<ReplicaWait>,
    /// The redlock variant's servers, when configured.
    pub redlock: Option<Redlock>,
    pub product: ProductKeys,
    pub knobs: Knobs,
    pub variant: Variant,
    pub instance: Arc<str>,
    /// Who this request is, in locks and in the audit.
    pub holder: String,
    pub metrics: Arc<Metrics>,
    pub locks: WatchdogLocks,
    pub lua: LuaBatches,
    /// This instance's shares of each product (the `shares` variant).
    pub shares: Shares,
    /// How long the work really took, µs (0 until it ran): `work_ms` is what was asked.
    pub worked_us: AtomicU64,
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
            Variant::Shares => shares::deduct(self).await,
            Variant::Redlock => redlock::deduct(self).await,
            Variant::Lua => return lua::deduct(self).await,
        }?;
        let counter = match outcome {
            Outcome::SoldOut { .. } => "sold_out",
            Outcome::LockBusy => "lock_busy",
            Outcome::LockUnconfirmed => "lock_unconfirmed",
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
        self.product.whole()
    }

    /// The seed's business logic, run while holding a lock: enter (the audit notes who
    /// else is inside), read the stock, check it, work, take one unit and leave. What the
    /// holder presents at the stock is in `guard`.
    async fn critical_section(
        &self,
        shard: &ShardKeys,
        guard: Guard<'_>,
    ) -> Result<Outcome, AppError> {
        let mut conn = self.redis.clone();
        let stay = self.knobs.work + INSIDE_MARGIN;
        let (stock, _overlap): (Option<i64>, i64) = scripts::ENTER
            .key(&shard.stock)
            .key(&shard.inside)
            .key(&shard.audit)
            .key(&shard.fence)
            .arg(&self.holder)
            .arg(stay.as_millis() as u64)
            .arg(guard.token_arg())
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
        if guard.lost.is_some_and(|lost| lost()) {
            // The holder knows its lock is gone: it must not commit.
            let _: u64 = conn.zrem(&shard.inside, &self.holder).await?;
            let _: i64 = conn.hincr(&shard.audit, "lock_lost", 1).await?;
            return Ok(Outcome::LockLost);
        }
        self.commit(shard, Take::Decrement, guard).await
    }

    /// Takes one unit, records the order and leaves the critical section, in one round trip.
    async fn commit(
        &self,
        shard: &ShardKeys,
        take: Take,
        guard: Guard<'_>,
    ) -> Result<Outcome, AppError> {
        let order = Uuid::now_v7().to_string();
        let mut script = scripts::COMMIT.prepare_invoke();
        commit_keys_and_args(
            &mut script,
            shard,
            &self.holder,
            &order,
            &self.instance,
            self.variant.name(),
        );
        match take {
            Take::Decrement => script.arg("decr").arg(0),
            Take::Set(value) => script.arg("set").arg(value),
        };
        // The lock hash can be checked in the commit only where it lives beside the stock.
        let owner = guard.owner.filter(|_| self.locks_beside_stock);
        script.arg(owner.unwrap_or_default()).arg(guard.token_arg());
        let mut conn = self.redis.clone();
        let remaining: i64 = script.invoke_async(&mut conn).await?;
        match remaining {
            -2 => Err(self.not_for_sale().await),
            -3 => Ok(Outcome::LockLost),
            -4 => Ok(Outcome::Fenced),
            _ => Ok(self.sold(shard, order, remaining).await),
        }
    }

    /// A unit sold and recorded: a 200, once as many replicas as asked for have it.
    async fn sold(&self, shard: &ShardKeys, order: String, remaining: i64) -> Outcome {
        let mut conn = self.redis.clone();
        if !ReplicaWait::confirm(self.wait, &mut conn, &shard.stock, &shard.audit, 1).await {
            return Outcome::Unconfirmed {
                order,
                shard: shard.index,
            };
        }
        Outcome::Deducted {
            remaining,
            order,
            shard: shard.index,
        }
    }

    /// With `fence=on`, a fencing token for a holder that has just taken `shard`'s lock:
    /// the next number of the shard's counter in the stock store. The stock store issues
    /// it because the stock store is what checks it: the counter and the highest token
    /// seen sit in one hash on the shard's slot, so whatever happens to the lock store (a
    /// failover that forgets a lock), the same token is never handed out twice while the
    /// stock remembers tokens.
    async fn fencing_token(&self, shard: &ShardKeys) -> Result<Option<i64>, AppError> {
        if !self.knobs.fence {
            return Ok(None);
        }
        let token: i64 = self.redis.clone().hincr(&shard.fence, "issued", 1).await?;
        Ok(Some(token))
    }

    /// With `--lock-wait-replicas`, whether enough replicas of the lock store have the
    /// lock at `key` just taken (Redisson's `checkLockSyncedSlaves`).
    async fn lock_confirmed(&self, key: &str) -> Result<bool, AppError> {
        let Some(wait) = self.lock_wait else {
            return Ok(true);
        };
        let acked = self
            .lock_redis
            .clone()
            .wait_replicas(key, wait.replicas, wait.timeout)
            .await?;
        if acked < wait.replicas {
            tracing::warn!(%key, acked, wanted = wait.replicas, "lock not confirmed by the lock store's replicas");
        }
        Ok(acked >= wait.replicas)
    }

    /// The business time the seeds spend inside the critical section: `work_ms`, to the
    /// tens of microseconds ([`timer`]), and measured.
    async fn work(&self) {
        if self.knobs.work.is_zero() {
            return;
        }
        let started = tokio::time::Instant::now();
        timer::sleep(self.knobs.work).await;
        let took = u64::try_from(started.elapsed().as_micros()).unwrap_or(u64::MAX);
        self.worked_us.store(took, Ordering::Relaxed);
    }

    /// How long the work really took, when there was any.
    pub fn worked(&self) -> Option<Duration> {
        match self.worked_us.load(Ordering::Relaxed) {
            0 => None,
            us => Some(Duration::from_micros(us)),
        }
    }

    /// Whether a watchdog lock can be taken and given back in the same scripts that enter
    /// and commit the critical section: the lock must live beside the stock (one slot),
    /// and nothing may need a step of its own between them — a fencing token issued after
    /// the lock, the lock store's replicas asked, a fault injected.
    fn in_one_trip(&self) -> bool {
        self.locks_beside_stock
            && !self.knobs.fence
            && self.lock_wait.is_none()
            && self.knobs.fault.is_none()
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
