//! Product-level operations: setting the stock (reset) and the audit behind `/stats`.
//!
//! The audit is computed from what the deductions left in Redis, not from counters the
//! service keeps in memory, so it holds whatever client produced the load and however
//! many instances served it.

use std::collections::BTreeMap;

use redis::AsyncCommands;
use redis::aio::ConnectionManager;
use serde::Serialize;

use crate::error::AppError;
use crate::keys::{ProductId, ProductKeys};
use crate::scripts;

/// The most shards a product may be split into.
pub const MAX_SHARDS: u32 = 64;
/// The most units a reset may set.
pub const MAX_STOCK: i64 = 100_000_000;

/// Sets a product's stock, split over `shards`, and clears its orders, audit and locks.
///
/// Runs as one `MULTI`/`EXEC` under `WATCH` of the product's metadata, on an exclusive
/// pooled connection: the keys to clear depend on the shard count read first, and a
/// concurrent reset must not slip in between.
pub async fn reset(
    pool: &deadpool_redis::Pool,
    product: &ProductId,
    stock: i64,
    shards: u32,
) -> Result<(), AppError> {
    let keys = ProductKeys::new(product);
    let mut conn = pool.get().await.map_err(|err| match err {
        deadpool_redis::PoolError::Backend(err) => AppError::from(err),
        other => AppError::RedisUnavailable(redis::RedisError::from((
            redis::ErrorKind::Io,
            "no pooled redis connection",
            other.to_string(),
        ))),
    })?;
    loop {
        let _: () = redis::cmd("WATCH")
            .arg(&keys.meta)
            .query_async(&mut conn)
            .await?;
        let old_shards: Option<u32> = conn.hget(&keys.meta, "shards").await?;
        let old_shards = old_shards.unwrap_or(1).clamp(1, MAX_SHARDS);

        let mut pipe = redis::pipe();
        pipe.atomic();
        // Clear the unsplit layout, the old split and the new one.
        let layouts = [(1, 1), (old_shards, old_shards), (shards, shards)];
        for (count, split) in layouts {
            for index in 0..count {
                pipe.del(&keys.shard(index, split).all()[..]).ignore();
            }
        }
        for index in 0..shards {
            let units =
                stock / i64::from(shards) + i64::from(i64::from(index) < stock % i64::from(shards));
            pipe.set(&keys.shard(index, shards).stock, units).ignore();
        }
        pipe.hset_multiple(
            &keys.meta,
            &[
                ("initial", stock.to_string()),
                ("shards", shards.to_string()),
            ],
        )
        .ignore();
        // EXEC answers nil when the watched key changed: read again and retry.
        let done: Option<()> = pipe.query_async(&mut conn).await?;
        if done.is_some() {
            return Ok(());
        }
    }
}

/// Deletes every lock of a product, whoever holds them, and wakes their waiters: the
/// operator's way out of a setnx deadlock. Returns how many locks were held.
pub async fn force_unlock(redis: &ConnectionManager, product: &ProductId) -> Result<u32, AppError> {
    let shards = shard_count(redis, product).await?;
    let keys = ProductKeys::new(product);
    let mut freed = 0;
    for index in 0..shards {
        let shard = keys.shard(index, shards);
        let deleted: u32 = scripts::FORCE_UNLOCK
            .key(&shard.lock)
            .key(&shard.lock_channel)
            .arg("released")
            .invoke_async(&mut redis.clone())
            .await?;
        freed += deleted;
    }
    Ok(freed)
}

/// The shard count of a product that was reset, or `UnknownProduct`.
pub async fn shard_count(redis: &ConnectionManager, product: &ProductId) -> Result<u32, AppError> {
    let keys = ProductKeys::new(product);
    let shards: Option<u32> = redis.clone().hget(&keys.meta, "shards").await?;
    shards
        .map(|n| n.clamp(1, MAX_SHARDS))
        .ok_or_else(|| AppError::UnknownProduct(product.to_string()))
}

/// The units left, summed over shards, and per shard.
pub async fn remaining(
    redis: &ConnectionManager,
    product: &ProductId,
) -> Result<(i64, Vec<i64>), AppError> {
    let shards = shard_count(redis, product).await?;
    let keys = ProductKeys::new(product);
    let mut pipe = redis::pipe();
    for index in 0..shards {
        pipe.get(&keys.shard(index, shards).stock);
    }
    let per_shard: Vec<Option<i64>> = pipe.query_async(&mut redis.clone()).await?;
    let per_shard: Vec<i64> = per_shard
        .into_iter()
        .map(Option::unwrap_or_default)
        .collect();
    Ok((per_shard.iter().sum(), per_shard))
}

/// The audit of one product.
#[derive(Debug, Clone, Serialize)]
pub struct Stats {
    pub product: String,
    /// Units set by the last reset.
    pub initial: i64,
    pub shards: u32,
    /// Units left, summed over shards.
    pub remaining: i64,
    /// Orders recorded: one per 200.
    pub sold: i64,
    /// `sold - initial`, when positive: units sold that never existed.
    pub oversold: i64,
    /// `sold - (initial - remaining)`, when positive: sales the stock never saw, because a
    /// write based on a stale read overwrote them.
    pub lost_updates: i64,
    /// Requests answered 409: nothing left.
    pub sold_out: i64,
    /// Requests answered 429 because the lock stayed held for their whole wait.
    pub lock_busy: i64,
    /// Times a holder entered a critical section another holder was still inside.
    pub lock_overlaps: i64,
    /// Times a watchdog-lock holder found, at commit, that the lock was no longer its own
    /// (and so sold nothing).
    pub lock_lost: i64,
    pub by_instance: BTreeMap<String, i64>,
    pub by_variant: BTreeMap<String, i64>,
    pub shard_remaining: Vec<i64>,
    pub locks: Vec<LockState>,
}

impl Stats {
    /// Adds one audit hash's counters.
    fn add(&mut self, audit: BTreeMap<String, i64>) {
        for (field, count) in audit {
            // `sold/<instance>/<variant>`: one counter per pair, bumped in the same script
            // that records the order.
            if let Some((instance, variant)) = field
                .strip_prefix("sold/")
                .and_then(|pair| pair.split_once('/'))
            {
                *self.by_instance.entry(instance.to_owned()).or_default() += count;
                *self.by_variant.entry(variant.to_owned()).or_default() += count;
            } else {
                match field.as_str() {
                    "sold_out" => self.sold_out += count,
                    "lock_busy" => self.lock_busy += count,
                    "lock_overlaps" => self.lock_overlaps += count,
                    "lock_lost" => self.lock_lost += count,
                    _ => {}
                }
            }
        }
    }
}

/// One shard's lock as Redis has it now.
#[derive(Debug, Clone, Serialize)]
pub struct LockState {
    pub shard: u32,
    pub held: bool,
    /// Time left before the lock expires; null when it is free or never expires.
    pub ttl_ms: Option<i64>,
    /// Held with no TTL at all: only a DEL frees it (the setnx deadlock).
    pub never_expires: bool,
}

pub async fn stats(redis: &ConnectionManager, product: &ProductId) -> Result<Stats, AppError> {
    let keys = ProductKeys::new(product);
    let mut conn = redis.clone();
    let meta: BTreeMap<String, i64> = conn.hgetall(&keys.meta).await?;
    let (Some(&initial), Some(&shards)) = (meta.get("initial"), meta.get("shards")) else {
        return Err(AppError::UnknownProduct(product.to_string()));
    };
    let shards = u32::try_from(shards).unwrap_or(1).clamp(1, MAX_SHARDS);

    let mut pipe = redis::pipe();
    for index in 0..shards {
        let shard = keys.shard(index, shards);
        pipe.get(&shard.stock)
            .hlen(&shard.orders)
            .hgetall(&shard.audit)
            .pttl(&shard.lock);
    }
    type ShardRow = (Option<i64>, i64, BTreeMap<String, i64>, i64);
    let rows: Vec<ShardRow> = pipe.query_async(&mut conn).await?;
    // A split product keeps its request counters apart from its shards'.
    let product_audit: BTreeMap<String, i64> = if shards > 1 {
        conn.hgetall(&keys.audit).await?
    } else {
        BTreeMap::new()
    };

    let mut stats = Stats {
        product: product.to_string(),
        initial,
        shards,
        remaining: 0,
        sold: 0,
        oversold: 0,
        lost_updates: 0,
        sold_out: 0,
        lock_busy: 0,
        lock_overlaps: 0,
        lock_lost: 0,
        by_instance: BTreeMap::new(),
        by_variant: BTreeMap::new(),
        shard_remaining: Vec::with_capacity(rows.len()),
        locks: Vec::with_capacity(rows.len()),
    };
    for (index, (stock, orders, audit, pttl)) in (0..).zip(rows) {
        let stock = stock.unwrap_or_default();
        stats.remaining += stock;
        stats.shard_remaining.push(stock);
        stats.sold += orders;
        stats.add(audit);
        // PTTL: -2 no key, -1 no expiry, otherwise milliseconds left.
        stats.locks.push(LockState {
            shard: index,
            held: pttl != -2,
            ttl_ms: (pttl >= 0).then_some(pttl),
            never_expires: pttl == -1,
        });
    }
    stats.add(product_audit);
    stats.oversold = (stats.sold - stats.initial).max(0);
    let left_the_stock = stats.initial - stats.remaining;
    stats.lost_updates = (stats.sold - left_the_stock).max(0);
    Ok(stats)
}
