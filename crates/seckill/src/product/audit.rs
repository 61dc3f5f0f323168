//! The audit of one product, behind `/stats`.
//!
//! It is computed from what the deductions left in Redis, not from counters the service
//! keeps in memory, so it holds whatever client produced the load and however many
//! instances served it.

use std::collections::BTreeMap;

use super::MAX_SHARDS;
use super::stats::{LockView, Stats};
use crate::error::AppError;
use crate::keys::{Layout, ProductId, ProductKeys, ShardKeys};
use crate::store::{RedisConn, Store, master_of};
use futures_util::future::try_join_all;
use redis::aio::ConnectionLike;
use redis::{AsyncCommands, RedisError};

/// What one shard holds, read in one pipeline on its slot, and its lock from the lock
/// store.
struct ShardRead {
    stock: Option<i64>,
    orders: i64,
    audit: BTreeMap<String, i64>,
    /// Units in instances' shares (`shares`), each share's units left.
    in_shares: Vec<i64>,
    /// Units sold to each buyer here.
    buyers: BTreeMap<String, i64>,
    /// Sales under an idempotency key here.
    keyed: i64,
    /// Orders reserved, not paid yet.
    unpaid: i64,
    lock: seckill_lock::LockState,
}

/// Every shard of the product, read at once (each pipeline on its own slot).
async fn read_shards(
    store: &Store,
    locks: &Store,
    keys: &ProductKeys,
    layout: &Layout,
) -> Result<Vec<ShardRead>, AppError> {
    let (conn, lock_conn) = (store.conn(), locks.conn());
    try_join_all((0..layout.shards()).map(|index| {
        let shard = keys.shard(layout, index);
        let (mut conn, mut lock_conn) = (conn.clone(), lock_conn.clone());
        async move {
            let mut pipe = redis::pipe();
            pipe.get(&shard.stock)
                .hlen(&shard.orders)
                .hgetall(&shard.audit)
                .hvals(&shard.shares)
                .hgetall(&shard.buyers)
                .hlen(&shard.keys)
                .zcard(&shard.unpaid);
            let (stock, orders, audit, in_shares, buyers, keyed, unpaid) =
                pipe.query_async(&mut conn).await?;
            let lock = seckill_lock::inspect::inspect(&mut lock_conn, &shard.lock).await?;
            Ok::<_, AppError>(ShardRead {
                stock,
                orders,
                audit,
                in_shares,
                buyers,
                keyed,
                unpaid,
                lock,
            })
        }
    }))
    .await
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
    let reads = read_shards(store, locks, &keys, &layout).await?;
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
        per_user: number("per_user").unwrap_or(0),
        shard_tags: layout.tags().to_vec(),
        stock_in: if meta.get("stock_in").map(String::as_str) == Some("postgres") {
            "postgres"
        } else {
            "redis"
        },
        ..Stats::default()
    };
    let mut reserved_units = 0;
    let mut bought: BTreeMap<String, i64> = BTreeMap::new();
    for (index, read) in (0..).zip(reads) {
        reserved_units += read.unpaid;
        for (user, units) in &read.buyers {
            *bought.entry(user.clone()).or_default() += units;
        }
        let node = master_of(&masters, &keys.shard(&layout, index).stock)
            .map(|m| m.addr.clone())
            .unwrap_or_default();
        stats.add_shard(index, read, node);
    }
    stats.add(product_audit);
    if shards > 1 && stats.idempotency.keyed_sales > 0 {
        stats.idempotency.keys_sold_twice +=
            keys_in_several_shards(&mut conn, &keys, &layout).await?;
    }
    stats.add_buyers(&bought, &reserved);
    if meta.contains_key(crate::outcome::META_CLOSED) {
        stats.close.get_or_insert_default().closed = true;
    }
    let pay_within_ms = number("pay_within_ms").unwrap_or(0);
    if pay_within_ms > 0 || stats.payment.is_some() {
        let payment = stats.payment.get_or_insert_default();
        payment.pay_within_ms = pay_within_ms;
        payment.reserved = reserved_units;
        payment.balanced = stats.initial == stats.remaining + payment.reserved + payment.paid;
    }
    stats.add_door(&mut conn, &keys, &meta).await?;
    stats.settle();
    Ok(stats)
}

impl Stats {
    /// Shard `index`, as read, on master `node`.
    fn add_shard(&mut self, index: u32, read: ShardRead, node: String) {
        self.idempotency.keyed_sales += read.keyed;
        let in_shares: i64 = read.in_shares.iter().sum();
        self.in_shares += in_shares;
        let stock = read.stock.unwrap_or_default() + in_shares;
        self.remaining += stock;
        self.shard_remaining.push(stock);
        self.sold += read.orders;
        self.add(read.audit);
        self.shard_nodes.push(node);
        let lock = read.lock;
        self.locks.push(LockView {
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

    /// The buyers: how many bought, who is past the limit, and units reserved for a
    /// buyer that their shard never sold (`reserved`: a split product's, per buyer).
    fn add_buyers(&mut self, bought: &BTreeMap<String, i64>, reserved: &BTreeMap<String, i64>) {
        self.buyers = bought.values().filter(|&&units| units > 0).count() as i64;
        if self.per_user > 0 {
            for units in bought.values() {
                if *units > self.per_user {
                    self.over_limit.users += 1;
                    self.over_limit.units += units - self.per_user;
                }
            }
        }
        self.reserved_unsold = reserved
            .iter()
            .map(|(user, units)| (units - bought.get(user).copied().unwrap_or(0)).max(0))
            .sum();
    }

    /// The front door's terms, when it is not wide open (or counted something), and the
    /// waiting room's tickets.
    async fn add_door(
        &mut self,
        conn: &mut RedisConn,
        keys: &ProductKeys,
        meta: &BTreeMap<String, String>,
    ) -> Result<(), AppError> {
        let door = crate::admission::DoorTerms::from_meta(
            &crate::admission::terms::META_FIELDS.map(|f| meta.get(f).cloned()),
        );
        if door.wide_open() && self.admission.is_none() {
            return Ok(());
        }
        let admission = self.admission.get_or_insert_default();
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
        Ok(())
    }
}

impl Stats {
    /// What follows from the counts: units held, oversold, lost updates, the conflict
    /// rate, units left unsold.
    fn settle(&mut self) {
        let expired = self.payment.as_ref().map_or(0, |p| p.expired);
        self.held = self.sold - expired;
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
        let sale = seckill_audit::Sale {
            initial: self.initial,
            held: self.held,
            remaining: self.remaining,
            turned_away: self.lock_busy + conflict + flagged,
        };
        self.oversold = sale.oversold();
        self.lost_updates = sale.lost_updates();
        self.undersold = sale.undersold();
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
