//! The audit of one product, behind `/stats`.
//!
//! It is computed from what the deductions left in Redis, not from counters the service
//! keeps in memory, so it holds whatever client produced the load and however many
//! instances served it.

use std::collections::BTreeMap;

use super::MAX_SHARDS;
use super::stats::{Idempotency, LockView, OverLimit, Stats};
use crate::error::AppError;
use crate::keys::{Layout, ProductId, ProductKeys, ShardKeys};
use crate::store::{Store, master_of};
use futures_util::future::try_join_all;
use redis::aio::ConnectionLike;
use redis::{AsyncCommands, RedisError};

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
    type ShardRow = (
        Option<i64>,
        i64,
        BTreeMap<String, i64>,
        Vec<i64>,
        BTreeMap<String, i64>,
        i64,
        i64,
    );
    let lock_conn = locks.conn();
    let rows: Vec<(ShardRow, seckill_lock::LockState)> =
        try_join_all((0..layout.shards()).map(|index| {
            let shard = keys.shard(&layout, index);
            let mut conn = conn.clone();
            let mut lock_conn = lock_conn.clone();
            async move {
                let mut pipe = redis::pipe();
                pipe.get(&shard.stock)
                    .hlen(&shard.orders)
                    .hgetall(&shard.audit)
                    .hvals(&shard.claims)
                    .hgetall(&shard.buyers)
                    .hlen(&shard.keys)
                    .zcard(&shard.unpaid);
                let row = pipe.query_async::<ShardRow>(&mut conn).await?;
                let lock = seckill_lock::inspect::inspect(&mut lock_conn, &shard.lock).await?;
                Ok::<_, AppError>((row, lock))
            }
        }))
        .await?;
    // A split product keeps its request counters apart from its shards'.
    let (product_audit, reserved): (BTreeMap<String, i64>, BTreeMap<String, i64>) = if shards > 1 {
        redis::pipe()
            .hgetall(&keys.audit)
            .hgetall(&keys.reserved)
            .query_async(&mut conn)
            .await?
    } else {
        Default::default()
    };
    let masters = store.masters().await?;

    let mut stats = Stats {
        product: product.to_string(),
        initial,
        epoch: number("epoch").unwrap_or(0),
        shards,
        remaining: 0,
        in_shares: 0,
        reclaimed: 0,
        sold: 0,
        held: 0,
        oversold: 0,
        lost_updates: 0,
        sold_out: 0,
        lock_busy: 0,
        undersold: 0,
        close: None,
        multi: None,
        optimistic: None,
        lock_overlaps: 0,
        lock_lost: 0,
        unconfirmed: 0,
        fenced: 0,
        lock_unconfirmed: 0,
        per_user: number("per_user").unwrap_or(0),
        buyers: 0,
        over_limit: OverLimit::default(),
        limit_reached: 0,
        reserved_unsold: 0,
        idempotency: Idempotency::default(),
        by_instance: BTreeMap::new(),
        by_variant: BTreeMap::new(),
        shard_remaining: Vec::with_capacity(rows.len()),
        shard_tags: layout.tags().to_vec(),
        shard_nodes: Vec::with_capacity(rows.len()),
        locks: Vec::with_capacity(rows.len()),
        payment: None,
        orders_of_record: None,
        admission: None,
        stock_in: "redis",
    };
    let mut reserved_units = 0;
    let mut bought: BTreeMap<String, i64> = BTreeMap::new();
    for (index, ((stock, orders, audit, claimed, buyers, keyed, unpaid), lock)) in (0..).zip(rows) {
        stats.idempotency.keyed_sales += keyed;
        reserved_units += unpaid;
        for (user, units) in buyers {
            *bought.entry(user).or_default() += units;
        }
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
        stats.locks.push(LockView {
            shard: index,
            held: lock.held,
            ttl_ms: lock
                .ttl
                .map(|ttl| i64::try_from(ttl.as_millis()).unwrap_or(i64::MAX)),
            never_expires: lock.never_expires,
            // Holder ids start with the instance's id and a '/'.
            holder: lock
                .holder
                .as_deref()
                .and_then(|h| h.split_once('/'))
                .map(|(instance, _)| instance.to_owned()),
        });
    }
    stats.add(product_audit);
    if shards > 1 && stats.idempotency.keyed_sales > 0 {
        stats.idempotency.keys_sold_twice +=
            keys_in_several_shards(&mut conn, &keys, &layout).await?;
    }
    stats.buyers = bought.values().filter(|&&units| units > 0).count() as i64;
    if stats.per_user > 0 {
        for units in bought.values() {
            if *units > stats.per_user {
                stats.over_limit.users += 1;
                stats.over_limit.units += units - stats.per_user;
            }
        }
    }
    stats.reserved_unsold = reserved
        .iter()
        .map(|(user, units)| (units - bought.get(user).copied().unwrap_or(0)).max(0))
        .sum();
    if meta.contains_key("closed") {
        stats.close.get_or_insert_default().closed = true;
    }
    let pay_within_ms = number("pay_within_ms").unwrap_or(0);
    if pay_within_ms > 0 || stats.payment.is_some() {
        let payment = stats.payment.get_or_insert_default();
        payment.pay_within_ms = pay_within_ms;
        payment.reserved = reserved_units;
        payment.balanced = stats.initial == stats.remaining + payment.reserved + payment.paid;
    }
    let door = crate::admission::DoorTerms::from_meta(
        &crate::admission::terms::META_FIELDS.map(|f| meta.get(f).cloned()),
    );
    if !door.wide_open() || stats.admission.is_some() {
        let admission = stats.admission.get_or_insert_default();
        admission.waiting_room = door.room.as_ref().map(|r| crate::admission::RoomTerms {
            rate_per_s: r.rate_per_s,
            pass_ttl_ms: r.pass_ttl_ms,
        });
        admission.rate_limit = door.limit;
        admission.sold_out_flag = door.flag;
        if door.room.is_some() {
            let tickets: Option<i64> = conn.get(keys.room_counter()).await?;
            admission.tickets = tickets.unwrap_or(0);
        }
    }
    stats.stock_in = if meta.get("stock_in").map(String::as_str) == Some("postgres") {
        "postgres"
    } else {
        "redis"
    };
    stats.settle();
    Ok(stats)
}

impl Stats {
    /// What follows from the counts: units held, oversold, lost updates, the conflict
    /// rate, units left unsold.
    fn settle(&mut self) {
        let expired = self.payment.as_ref().map_or(0, |p| p.expired);
        self.held = self.sold - expired;
        self.oversold = (self.held - self.initial).max(0);
        let left_the_stock = self.initial - self.remaining;
        self.lost_updates = (self.held - left_the_stock).max(0);
        let conflict = match &mut self.optimistic {
            Some(tx) => {
                let tries = tx.commits + tx.conflicts;
                if tries > 0 {
                    tx.conflict_rate = tx.conflicts as f64 / tries as f64;
                }
                tx.conflict
            }
            None => 0,
        };
        let flagged = self.admission.as_ref().map_or(0, |a| a.sold_out_flagged);
        self.undersold = self
            .remaining
            .max(0)
            .min(self.lock_busy + conflict + flagged);
    }

    /// A product whose stock is in PostgreSQL (`stock_in: postgres`): what is left and
    /// what was sold, counted from the database itself (its row, the orders of its sale).
    pub fn from_database(
        &mut self,
        remaining: i64,
        by_instance: BTreeMap<String, i64>,
        by_variant: BTreeMap<String, i64>,
    ) {
        self.remaining = remaining;
        self.shard_remaining = vec![remaining];
        self.sold = by_instance.values().sum();
        self.by_instance = by_instance;
        self.by_variant = by_variant;
        self.settle();
    }
}

/// A split product: keys more than one shard sold a unit under (a shard itself never
/// sells twice under one key; that is counted as it happens).
async fn keys_in_several_shards(
    conn: &mut crate::store::RedisConn,
    keys: &ProductKeys,
    layout: &Layout,
) -> Result<i64, AppError> {
    let mut seen: BTreeMap<String, i64> = BTreeMap::new();
    for index in 0..layout.shards() {
        let sold: Vec<String> = conn.hkeys(&keys.shard(layout, index).keys).await?;
        for key in sold {
            *seen.entry(key).or_default() += 1;
        }
    }
    Ok(seen.values().filter(|&&shards| shards > 1).count() as i64)
}

/// Every order recorded for `product`, over all its shards, wherever its reset put them:
/// order id -> `"<instance> <variant>[ <user>]"`. On a Cluster, `conn` reaches every slot.
pub async fn recorded_orders<C: ConnectionLike + Send>(
    conn: &mut C,
    product: &ProductId,
) -> Result<BTreeMap<String, String>, RedisError> {
    every_shard_hash(conn, product, |shard| &shard.orders).await
}

/// How every settled reservation of `product` ended: order id -> `paid` or `expired`.
pub async fn settled_orders<C: ConnectionLike + Send>(
    conn: &mut C,
    product: &ProductId,
) -> Result<BTreeMap<String, String>, RedisError> {
    every_shard_hash(conn, product, |shard| &shard.settled).await
}

/// One hash of each of `product`'s shards (`which`), merged.
async fn every_shard_hash<C: ConnectionLike + Send>(
    conn: &mut C,
    product: &ProductId,
    which: fn(&ShardKeys) -> &String,
) -> Result<BTreeMap<String, String>, RedisError> {
    let keys = ProductKeys::new(product);
    let (shards, tags): (Option<u32>, Option<String>) = redis::cmd("HMGET")
        .arg(&keys.meta)
        .arg("shards")
        .arg("tags")
        .query_async(conn)
        .await?;
    let shards = shards.unwrap_or(1).clamp(1, MAX_SHARDS);
    let layout = Layout::from_meta(product, shards, tags.as_deref());
    let mut merged = BTreeMap::new();
    for index in 0..layout.shards() {
        let shard: BTreeMap<String, String> = redis::cmd("HGETALL")
            .arg(which(&keys.shard(&layout, index)))
            .query_async(conn)
            .await?;
        merged.extend(shard);
    }
    Ok(merged)
}
