//! Product-level operations: setting the stock (reset) and the audit behind `/stats`.
//!
//! The audit is computed from what the deductions left in Redis, not from counters the
//! service keeps in memory, so it holds whatever client produced the load and however
//! many instances served it.

use std::collections::BTreeMap;

use futures_util::future::try_join_all;
use redis::AsyncCommands;
use serde::Serialize;

use crate::error::AppError;
use crate::keys::{Layout, ProductId, ProductKeys, ShardKeys, shard_tag};
use crate::scripts;
use crate::store::{Master, Store, key_slot, master_of};

/// The most shards a product may be split into.
pub const MAX_SHARDS: u32 = 64;
/// The most units a reset may set.
pub const MAX_STOCK: i64 = 100_000_000;

/// Sets a product's stock, split over `shards`, and clears its orders, audit and locks.
///
/// On a Cluster the shards are placed round-robin over the masters (see [`place`]). Each
/// shard is cleared and set in one `MULTI` on its own slot, all shards at once; the meta
/// (initial stock, shard count, tags) is written last, on the product's slot. Nothing
/// spans slots, so a reset is atomic per shard, not across them: a deduction that races
/// a reset finds its shard either before or after it, never half-set.
pub async fn reset(
    store: &Store,
    locks: &Store,
    product: &ProductId,
    stock: i64,
    shards: u32,
) -> Result<Layout, AppError> {
    let keys = ProductKeys::new(product);
    let old = recorded_layout(store, product).await?;
    let new = if shards <= 1 {
        Layout::unsplit(product)
    } else {
        place(&store.masters().await?, product, shards)
    };

    // Clear the unsplit layout, the old split and the new one; set the new one's stock.
    let mut clear: Vec<(ShardKeys, Option<i64>)> = Vec::new();
    for (index, _) in (0..).zip(new.tags()) {
        let units =
            stock / i64::from(shards) + i64::from(i64::from(index) < stock % i64::from(shards));
        clear.push((keys.shard(&new, index), Some(units)));
    }
    let others = [Some(Layout::unsplit(product)), old];
    for layout in others.iter().flatten() {
        for index in 0..layout.shards() {
            let shard = keys.shard(layout, index);
            if !clear.iter().any(|(c, _)| c.stock == shard.stock) {
                clear.push((shard, None));
            }
        }
    }
    let conn = store.conn();
    let lock_conn = locks.conn();
    try_join_all(clear.iter().map(|(shard, units)| {
        let mut conn = conn.clone();
        let mut lock_conn = lock_conn.clone();
        async move {
            let mut pipe = redis::pipe();
            pipe.atomic().del(&shard.stock_side()[..]).ignore();
            if let Some(units) = units {
                pipe.set(&shard.stock, units).ignore();
            }
            pipe.query_async::<()>(&mut conn).await?;
            lock_conn.del::<_, ()>(&shard.lock_side()[..]).await
        }
    }))
    .await?;

    let mut pipe = redis::pipe();
    pipe.atomic()
        .del(&keys.audit)
        .ignore()
        .hset_multiple(
            &keys.meta,
            &[
                ("initial", stock.to_string()),
                ("shards", shards.to_string()),
                ("tags", new.to_meta()),
            ],
        )
        .ignore();
    pipe.query_async::<()>(&mut store.conn()).await?;
    Ok(new)
}

/// Tags for `shards` shards that go round-robin over `masters`: shard `i` on master
/// `i mod M`. The plain tag `101/i` is kept when its slot is already there; otherwise the
/// first of `101/i.1`, `101/i.2`, … that is (about M tries each). With one master (a
/// standalone Redis) every plain tag qualifies, so nothing changes there.
pub fn place(masters: &[Master], product: &ProductId, shards: u32) -> Layout {
    if masters.len() <= 1 {
        return Layout::plain(product, shards);
    }
    let tags = (0..shards)
        .map(|index| {
            let target = &masters[index as usize % masters.len()];
            (0..MAX_PLACEMENT_TRIES)
                .map(|attempt| shard_tag(product, index, attempt))
                .find(|tag| target.serves(key_slot(tag.as_bytes())))
                .unwrap_or_else(|| shard_tag(product, index, 0))
        })
        .collect();
    Layout::from_tags(product, tags).unwrap_or_else(|| Layout::plain(product, shards))
}

/// Candidates tried per shard before giving up on its master (a master with almost no
/// slots); the shard then keeps its plain tag, wherever that lands.
const MAX_PLACEMENT_TRIES: u32 = 100_000;

/// Deletes every lock of a product, whoever holds them, and wakes their waiters: the
/// operator's way out of a setnx deadlock. Returns how many locks were held.
pub async fn force_unlock(
    store: &Store,
    locks: &Store,
    product: &ProductId,
) -> Result<u32, AppError> {
    let layout = layout(store, product).await?;
    let keys = ProductKeys::new(product);
    let conn = locks.conn();
    let freed = try_join_all((0..layout.shards()).map(|index| {
        let shard = keys.shard(&layout, index);
        let mut conn = conn.clone();
        async move {
            scripts::FORCE_UNLOCK
                .key(&shard.lock)
                .key(&shard.lock_channel)
                .key(&shard.lock_queue)
                .key(&shard.lock_waiting)
                .invoke_async::<u32>(&mut conn)
                .await
        }
    }))
    .await?;
    Ok(freed.into_iter().sum())
}

/// Where the shards of a product that was reset live, or `UnknownProduct`.
pub async fn layout(store: &Store, product: &ProductId) -> Result<Layout, AppError> {
    recorded_layout(store, product)
        .await?
        .ok_or_else(|| AppError::UnknownProduct(product.to_string()))
}

async fn recorded_layout(store: &Store, product: &ProductId) -> Result<Option<Layout>, AppError> {
    let keys = ProductKeys::new(product);
    let (shards, tags): (Option<u32>, Option<String>) = redis::cmd("HMGET")
        .arg(&keys.meta)
        .arg("shards")
        .arg("tags")
        .query_async(&mut store.conn())
        .await?;
    Ok(shards.map(|n| Layout::from_meta(product, n.clamp(1, MAX_SHARDS), tags.as_deref())))
}

/// The units left, summed over shards, and per shard (units in instances' shares count).
pub async fn remaining(store: &Store, product: &ProductId) -> Result<(i64, Vec<i64>), AppError> {
    let layout = layout(store, product).await?;
    let keys = ProductKeys::new(product);
    let conn = store.conn();
    let per_shard: Vec<i64> = try_join_all((0..layout.shards()).map(|index| {
        let shard = keys.shard(&layout, index);
        let mut conn = conn.clone();
        async move {
            let (stock, claimed): (Option<i64>, Vec<i64>) = redis::pipe()
                .get(&shard.stock)
                .hvals(&shard.claims)
                .query_async(&mut conn)
                .await?;
            Ok::<_, redis::RedisError>(stock.unwrap_or_default() + claimed.iter().sum::<i64>())
        }
    }))
    .await?;
    Ok((per_shard.iter().sum(), per_shard))
}

/// Each shard's stock key, one `GET` per shard (each on its own slot), all at once.
pub async fn shard_stocks(
    store: &Store,
    product: &ProductId,
    layout: &Layout,
) -> Result<Vec<Option<i64>>, AppError> {
    let keys = ProductKeys::new(product);
    let conn = store.conn();
    Ok(try_join_all((0..layout.shards()).map(|index| {
        let stock = keys.shard(layout, index).stock;
        let mut conn = conn.clone();
        async move { conn.get::<_, Option<i64>>(stock).await }
    }))
    .await?)
}

/// The audit of one product.
#[derive(Debug, Clone, Serialize)]
pub struct Stats {
    pub product: String,
    /// Units set by the last reset.
    pub initial: i64,
    pub shards: u32,
    /// Units left, summed over shards (with the units in instances' shares).
    pub remaining: i64,
    /// `shares`: units instances have claimed and not sold yet (part of `remaining`).
    pub in_shares: i64,
    /// `shares`: units given back to the pool when a claim's lease ran out (a dead or idle
    /// instance's unsold share).
    pub reclaimed: i64,
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
    /// Sales answered 503 `unconfirmed`: `WAIT` saw fewer replicas than asked for in
    /// time. Each is recorded as an order (it is in `sold` if it survived), but whether it
    /// outlives a failover of its master nobody can say.
    pub unconfirmed: i64,
    /// Commits refused because the holder's fencing token was older than one the stock
    /// had already seen (`fence=on`): a lock that failed, caught at the stock.
    pub fenced: i64,
    /// Locks given back because fewer replicas of the lock store than
    /// `--lock-wait-replicas` confirmed them in time.
    pub lock_unconfirmed: i64,
    pub by_instance: BTreeMap<String, i64>,
    pub by_variant: BTreeMap<String, i64>,
    pub shard_remaining: Vec<i64>,
    /// Each shard's hash tag, as the reset recorded it.
    pub shard_tags: Vec<String>,
    /// The master that holds each shard (`host:port`; the one server when standalone).
    pub shard_nodes: Vec<String>,
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
                    "unconfirmed" => self.unconfirmed += count,
                    "fenced" => self.fenced += count,
                    "lock_unconfirmed" => self.lock_unconfirmed += count,
                    "reclaimed" => self.reclaimed += count,
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
    /// The instance whose request holds it, when one does.
    pub holder: Option<String>,
}

pub async fn stats(store: &Store, locks: &Store, product: &ProductId) -> Result<Stats, AppError> {
    let keys = ProductKeys::new(product);
    let mut conn = store.conn();
    let meta: BTreeMap<String, String> = conn.hgetall(&keys.meta).await?;
    let number = |field: &str| meta.get(field).and_then(|v| v.parse::<i64>().ok());
    let (Some(initial), Some(shards)) = (number("initial"), number("shards")) else {
        return Err(AppError::UnknownProduct(product.to_string()));
    };
    let shards = u32::try_from(shards).unwrap_or(1).clamp(1, MAX_SHARDS);
    let layout = Layout::from_meta(product, shards, meta.get("tags").map(String::as_str));

    // One pipeline per shard, each on its own slot, all at once; the locks' TTLs from
    // the lock store.
    type ShardRow = (Option<i64>, i64, BTreeMap<String, i64>, Vec<i64>);
    let lock_conn = locks.conn();
    let rows: Vec<(ShardRow, (i64, Option<String>))> =
        try_join_all((0..layout.shards()).map(|index| {
            let shard = keys.shard(&layout, index);
            let mut conn = conn.clone();
            let mut lock_conn = lock_conn.clone();
            async move {
                let mut pipe = redis::pipe();
                pipe.get(&shard.stock)
                    .hlen(&shard.orders)
                    .hgetall(&shard.audit)
                    .hvals(&shard.claims);
                let row = pipe.query_async::<ShardRow>(&mut conn).await?;
                let lock: (i64, Option<String>) = scripts::LOCK_STATE
                    .key(&shard.lock)
                    .invoke_async(&mut lock_conn)
                    .await?;
                Ok::<_, redis::RedisError>((row, lock))
            }
        }))
        .await?;
    // A split product keeps its request counters apart from its shards'.
    let product_audit: BTreeMap<String, i64> = if shards > 1 {
        conn.hgetall(&keys.audit).await?
    } else {
        BTreeMap::new()
    };
    let masters = store.masters().await?;

    let mut stats = Stats {
        product: product.to_string(),
        initial,
        shards,
        remaining: 0,
        in_shares: 0,
        reclaimed: 0,
        sold: 0,
        oversold: 0,
        lost_updates: 0,
        sold_out: 0,
        lock_busy: 0,
        lock_overlaps: 0,
        lock_lost: 0,
        unconfirmed: 0,
        fenced: 0,
        lock_unconfirmed: 0,
        by_instance: BTreeMap::new(),
        by_variant: BTreeMap::new(),
        shard_remaining: Vec::with_capacity(rows.len()),
        shard_tags: layout.tags().to_vec(),
        shard_nodes: Vec::with_capacity(rows.len()),
        locks: Vec::with_capacity(rows.len()),
    };
    for (index, ((stock, orders, audit, claimed), (pttl, holder))) in (0..).zip(rows) {
        let claimed: i64 = claimed.iter().sum();
        stats.in_shares += claimed;
        let stock = stock.unwrap_or_default() + claimed;
        stats.remaining += stock;
        stats.shard_remaining.push(stock);
        stats.sold += orders;
        stats.add(audit);
        let shard = keys.shard(&layout, index);
        stats.shard_nodes.push(
            master_of(&masters, &shard.stock)
                .map(|m| m.addr.clone())
                .unwrap_or_default(),
        );
        // PTTL: -2 no key, -1 no expiry, otherwise milliseconds left.
        stats.locks.push(LockState {
            shard: index,
            held: pttl != -2,
            ttl_ms: (pttl >= 0).then_some(pttl),
            never_expires: pttl == -1,
            holder: holder
                .as_deref()
                .and_then(|h| h.split_once('/'))
                .map(|(instance, _)| instance.to_owned()),
        });
    }
    stats.add(product_audit);
    stats.oversold = (stats.sold - stats.initial).max(0);
    let left_the_stock = stats.initial - stats.remaining;
    stats.lost_updates = (stats.sold - left_the_stock).max(0);
    Ok(stats)
}
